//! Writes seeds with journals that need recovery, made by ext4kit itself:
//! each base image is opened on a [`CrashDevice`], written to through the
//! journal (the writes of `ext4kit_fuzz::write_a_little`, twice over), and
//! the images a power loss at each flush point could leave are kept when
//! their superblock says `needs_recovery` (`EXT3_FEATURE_INCOMPAT_RECOVER`).
//!
//! Usage: `journal_seeds OUTDIR IMAGE...` (run by `fuzz/make-seed.sh`).

use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;

use ext4kit_engine::device::{CrashDevice, Survivors};
use ext4kit_engine::{Filesystem, OpenOptions};
use ext4kit_format::superblock::{RawSuperblock, SUPERBLOCK_OFFSET, SUPERBLOCK_SIZE};

/// Seeds kept per base image: enough for a few transaction shapes, few
/// enough that the corpus stays small.
const PER_IMAGE: usize = 6;

fn needs_recovery(img: &[u8]) -> bool {
    let at = SUPERBLOCK_OFFSET as usize;
    img.get(at..at + SUPERBLOCK_SIZE)
        .and_then(|b| RawSuperblock::parse(b).ok())
        .is_some_and(|sb| {
            sb.features()
                .incompat
                .contains(ext4kit_format::features::IncompatFeatures::RECOVER)
        })
}

fn crash_images(base: Vec<u8>) -> Vec<Vec<u8>> {
    let dev = Arc::new(CrashDevice::new(base));
    let opts = OpenOptions {
        count_mount: false,
        sync_writes: true,
        ..OpenOptions::default()
    };
    let Ok(fs) = Filesystem::open(Box::new(dev.clone()), opts) else {
        return vec![];
    };
    ext4kit_fuzz::write_a_little(&fs);
    let _ = fs.unlink(ext4kit_engine::ROOT_INO, b"fuzz-dir");
    ext4kit_fuzz::write_a_little(&fs);
    drop(fs);
    let mut seen = HashSet::new();
    let mut out = vec![];
    for point in dev.flush_points().into_iter().chain([dev.writes()]) {
        for survivors in [Survivors::None, Survivors::All] {
            let img = dev.crash_image(point, survivors);
            if needs_recovery(&img) && seen.insert(img.clone()) {
                out.push(img);
            }
        }
    }
    // Spread over the run: early, middle and late crashes.
    let step = out.len().div_ceil(PER_IMAGE).max(1);
    out.into_iter().step_by(step).collect()
}

fn main() -> std::io::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some((outdir, images)) = args.split_first() else {
        eprintln!("usage: journal_seeds OUTDIR IMAGE...");
        std::process::exit(2);
    };
    for image in images {
        let name = Path::new(image).file_name().and_then(|n| n.to_str()).unwrap_or("image");
        let seeds = crash_images(std::fs::read(image)?);
        for (i, img) in seeds.iter().enumerate() {
            std::fs::write(Path::new(outdir).join(format!("{name}-crash{i}")), img)?;
        }
        println!("seed {name}: {} crash images with a dirty journal", seeds.len());
    }
    Ok(())
}
