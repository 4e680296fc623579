//! Pass 1 with the inode tables read on several threads
//! (`Options::threads`, `itable_scan`) must report exactly what the
//! serial scan reports, finding for finding and in the same order: on
//! every e2fsprogs `f_*` image, and on engine-made images with seeded
//! damage to their inode tables. A cancel in the middle of the scan must
//! end the workers, not hang.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use ext4kit_engine::device::{FileDevice, MemDevice};
use ext4kit_engine::{BlockDevice, NodeKind, ROOT_INO};
use ext4kit_format::group_desc::RawGroupDesc;
use ext4kit_format::superblock::{Geometry, RawSuperblock};
use ext4kit_fsck::{Fatal, Options, check};
use ext4kit_testkit::rng::Rng;
use support::*;

/// The whole outcome of `fsck -fn` with `threads` readers, as text.
fn report(dev: &dyn BlockDevice, threads: usize) -> String {
    let opts = Options {
        force: true,
        now: 1_800_000_000,
        threads,
        ..Options::default()
    };
    match check(dev, &opts, &mut |_| {}) {
        Ok(r) => format!("{r:?}"),
        Err(e) => format!("fatal: {e:?}"),
    }
}

fn assert_same(dev: &dyn BlockDevice, what: &str) {
    let serial = report(dev, 1);
    for threads in [2, 3] {
        assert_eq!(report(dev, threads), serial, "{what}: {threads} threads");
    }
}

#[test]
fn corpus_reports_do_not_depend_on_threads() {
    let images =
        ext4kit_testkit::peer::e2fsprogs_images_in(&std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("peer"));
    if images.is_empty() {
        assert!(std::env::var_os("CI").is_none(), "no e2fsprogs peer images");
        eprintln!("SKIPPED: no e2fsprogs peer images");
        return;
    }
    for img in &images {
        let dev = FileDevice::open(&img.path, false).expect("open");
        assert_same(&dev, &img.test);
    }
    eprintln!("{} images: serial and parallel reports equal", images.len());
}

/// An image of many groups with their flags cleared (no group checksums,
/// so every table is read) or kept, holding files, directories and
/// symlinks; 1 KiB blocks, so each table is several pieces.
fn built(csum: bool) -> Vec<u8> {
    let (dev, fs) = engine_fs(32 << 20, 7, |o| {
        if !csum {
            o.feature_edits.push(("metadata_csum".into(), false));
            o.feature_edits.push(("uninit_bg".into(), false));
        }
    });
    for d in 0..20u32 {
        let dir = fs
            .create(ROOT_INO, format!("d{d}").as_bytes(), NodeKind::Directory, ATTR)
            .unwrap()
            .ino;
        for f in 0..40u32 {
            let ino = fs
                .create(dir, format!("f{f}").as_bytes(), NodeKind::Regular, ATTR)
                .unwrap()
                .ino;
            fs.write(ino, 0, &vec![0x5a; (f as usize % 5) * 1000]).unwrap();
        }
        fs.create(dir, b"s", NodeKind::Symlink(b"f1".to_vec()), ATTR).unwrap();
    }
    fs.unmount().expect("unmount");
    dev.snapshot()
}

/// Where each group's inode table lies, in bytes, and its length.
fn tables(bytes: &[u8]) -> Vec<(usize, usize)> {
    let sb = RawSuperblock::parse(&bytes[1024..2048]).unwrap();
    let geo = Geometry::from_superblock(&sb).unwrap();
    let bs = geo.block_size as usize;
    let gdt = (geo.first_data_block as usize + 1) * bs;
    let dsz = usize::from(geo.desc_size);
    (0..geo.group_count as usize)
        .map(|g| {
            let gd = RawGroupDesc::parse(&bytes[gdt + g * dsz..], dsz).unwrap();
            (gd.inode_table() as usize * bs, geo.inode_table_blocks as usize * bs)
        })
        .collect()
}

#[test]
fn seeded_table_damage_reports_do_not_depend_on_threads() {
    for csum in [true, false] {
        let base = built(csum);
        assert_e2fsck_clean(&base, "the undamaged image");
        let dev = MemDevice::new(base.clone());
        assert_same(&dev, &format!("undamaged, metadata_csum {csum}"));
        let tabs = tables(&base);
        for seed in 1..=12u64 {
            let mut rng = Rng::new(seed);
            let mut bytes = base.clone();
            for _ in 0..1 + rng.below(6) {
                // Mostly the first groups' tables, where the inodes are.
                let (at, len) = tabs[rng.below(tabs.len().min(3) as u64) as usize];
                let off = at + rng.below(len.min(64 << 10) as u64) as usize;
                let n = 1 + rng.below(16) as usize;
                rng.fill(&mut bytes[off..off + n]);
            }
            let dev = MemDevice::new(bytes);
            assert_same(&dev, &format!("seed {seed}, metadata_csum {csum}"));
        }
    }
}

#[test]
fn a_cancel_during_the_scan_ends_the_readers() {
    let dev = Arc::new(MemDevice::new(built(false)));
    let cancel = AtomicBool::new(false);
    let opts = Options {
        force: true,
        threads: 2,
        cancel: Some(&cancel),
        ..Options::default()
    };
    let mut stop = |p: ext4kit_fsck::Progress| {
        if p.pass == 1 && p.done == 1 {
            cancel.store(true, Ordering::Relaxed);
        }
    };
    let r = check(dev.as_ref(), &opts, &mut stop);
    assert!(matches!(r, Err(Fatal::Cancelled(_))), "{r:?}");
    e2fsck_clean(&dev.snapshot());
}
