//! Seeded fault injection: fresh small images, one metadata corruption per
//! case (superblock, group descriptors, bitmaps, inode table, extent tree
//! block, directory blocks, journal superblock), then `e2fsck -fn` and `ext4kit fsck -fn`.
//! Whatever e2fsck flags as not clean, ext4kit should flag too; it must
//! never panic or hang. Then `ext4kit fsck -fy` on each damaged image:
//! afterwards `e2fsck -fn` must find it clean as often as after e2fsck's
//! own `-fy` (the floor below is what it reaches today), and an image
//! e2fsck found clean must stay clean. A fixed seed list keeps the test
//! deterministic; the figures go to stderr and
//! `$CARGO_TARGET_TMPDIR/fsck-faults.md`.

mod fsck_common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use ext4kit_testkit::rng::Rng;
use fsck_common::*;

const LIMIT: Duration = Duration::from_secs(20);
const SEEDS: std::ops::Range<u64> = 1..241;
/// Share (percent) of e2fsck's non-clean verdicts ext4kit must match:
/// the floor at what it reaches today.
const MIN_AGREE_PERCENT: usize = 95;
/// Damaged images `ext4kit fsck -fy` brings to e2fsck-clean: the floor at
/// what it reaches today.
const MIN_REPAIRED: usize = 150;

/// Where a fault may go in one base image.
struct Base {
    image: PathBuf,
    block_size: usize,
    /// (kind, block, bytes of it worth corrupting)
    targets: Vec<(&'static str, u64, usize)>,
}

fn debugfs(image: &Path, req: &str) -> String {
    let out = Command::new("debugfs").args(["-R", req]).arg(image).output().unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn dumpe2fs_field(image: &Path, label: &str) -> u64 {
    let out = Command::new("dumpe2fs").arg(image).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with(label))
        .unwrap_or_else(|| panic!("{label}"));
    line.trim_start()[label.len()..]
        .trim()
        .split(|c: char| !c.is_ascii_digit())
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

fn make_base(dir: &Path, name: &str, args: &[&str]) -> Base {
    let src = dir.join(format!("{name}-src"));
    make_tree(&src);
    let f = std::fs::File::create(src.join("sparse")).unwrap();
    for k in 0..20u64 {
        std::os::unix::fs::FileExt::write_at(&f, &[0x78; 1024], k * 8192).unwrap();
    }
    let image = dir.join(format!("{name}.img"));
    // A fixed UUID and hash seed keep the layout, and so the cases, the
    // same from run to run.
    let mut a = vec![
        "-b",
        "1024",
        "-U",
        "6a1f8e52-3c1d-4b8e-9a55-0d3c2b1a0f11",
        "-E",
        "hash_seed=2b7e1516-28ae-42a6-abf7-158809cf4f3c",
    ];
    a.extend_from_slice(args);
    mkfs_d("mkfs.ext4", &a, &src, &image, "16M");
    let _ = Command::new("e2fsck").args(["-fyD"]).arg(&image).output();
    assert_eq!(
        e2fsck_fn(&image, LIMIT).code,
        Some(0),
        "{name}: base image is not clean"
    );
    let bs = 1024usize;
    let mut targets = vec![("superblock", 1, 1024), ("group descriptors", 2, 64)];
    targets.push(("block bitmap", dumpe2fs_field(&image, "Block bitmap at"), bs));
    targets.push(("inode bitmap", dumpe2fs_field(&image, "Inode bitmap at"), bs));
    let itable = dumpe2fs_field(&image, "Inode table at");
    for blk in 0..8 {
        targets.push(("inode table", itable + blk, bs));
    }
    let ex = debugfs(&image, "ex /sparse");
    if let Some(l) = ex.lines().find(|l| l.trim_start().starts_with("0/")) {
        let leaf: u64 = l.split_whitespace().nth(7).unwrap().parse().unwrap();
        targets.push(("extent block", leaf, bs));
    }
    if let Ok(jsb) = debugfs(&image, "bmap <8> 0").trim().parse::<u64>() {
        targets.push(("journal superblock", jsb, 256));
    }
    for path in ["/", "/huge", "/d1"] {
        let blocks = debugfs(&image, &format!("blocks {path}"));
        for b in blocks.split_whitespace().filter_map(|t| t.parse::<u64>().ok()).take(3) {
            targets.push(("directory block", b, bs));
        }
    }
    Base {
        image,
        block_size: bs,
        targets,
    }
}

struct Case {
    seed: u64,
    what: String,
    e2fsck: Option<i32>,
    ext4kit: Option<i32>,
    timed_out: bool,
    /// After `ext4kit fsck -fy`: e2fsck -fn's verdict (None: not run).
    ours_after: Option<i32>,
    /// After `e2fsck -fy` on a second copy: e2fsck -fn's verdict.
    theirs_after: Option<i32>,
    repair_failed: bool,
}

fn inject(base: &Base, seed: u64, scratch: &Path) -> Case {
    let mut rng = Rng::new(seed);
    let (kind, blk, span) = base.targets[rng.below(base.targets.len() as u64) as usize];
    let mut bytes = std::fs::read(&base.image).unwrap();
    let off = blk as usize * base.block_size + rng.below(span as u64) as usize;
    let how = if rng.below(4) == 0 {
        let v = rng.next_u64() as u8;
        bytes[off] = v;
        format!("set byte to {v:#04x}")
    } else {
        let bit = rng.below(8);
        bytes[off] ^= 1 << bit;
        format!("flip bit {bit}")
    };
    let img = scratch.join(format!("case{seed}.img"));
    std::fs::write(&img, &bytes).unwrap();
    let e = e2fsck_fn(&img, LIMIT);
    let k = ext4kit_fsck(&["-fn"], &img, LIMIT);
    // EXT4KIT_FAULTS_KEEP=DIR keeps the images the two checkers disagree on.
    if let Some(keep) = std::env::var_os("EXT4KIT_FAULTS_KEEP")
        && (e.code != Some(0)) != (k.code != Some(0))
    {
        let _ = std::fs::copy(&img, Path::new(&keep).join(format!("case{seed}.img")));
    }
    let (ours_after, theirs_after, repair_failed) = repair_both(&img, &bytes);
    let _ = std::fs::remove_file(&img);
    Case {
        seed,
        what: format!("{kind} block {blk} byte {}: {how}", off % base.block_size),
        e2fsck: if e.timed_out { None } else { e.code },
        ext4kit: k.code,
        timed_out: k.timed_out || !matches!(k.code, Some(0 | 4 | 8)),
        ours_after,
        theirs_after,
        repair_failed,
    }
}

/// `ext4kit fsck -fy` on `img`, `e2fsck -fy` on a copy of `bytes`; each
/// judged by `e2fsck -fn` afterwards. The third value: our repair
/// panicked, hung or exited with a status e2fsck never gives.
fn repair_both(img: &Path, bytes: &[u8]) -> (Option<i32>, Option<i32>, bool) {
    let r = ext4kit_fsck(&["-fy"], img, LIMIT);
    let failed = r.timed_out || !matches!(r.code, Some(0 | 1 | 4 | 5 | 8));
    let ours = e2fsck_fn(img, LIMIT);
    let copy = img.with_extension("e2fsck.img");
    std::fs::write(&copy, bytes).unwrap();
    let fy = run_timed("e2fsck", &["-fy", copy.to_str().unwrap()], LIMIT);
    let theirs = (!fy.timed_out).then(|| e2fsck_fn(&copy, LIMIT).code).flatten();
    let _ = std::fs::remove_file(&copy);
    (if ours.timed_out { None } else { ours.code }, theirs, failed)
}

#[test]
fn whatever_e2fsck_flags_in_a_corrupted_image_ext4kit_flags_too() {
    if !have_e2fsprogs() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bases = [
        make_base(dir.path(), "csum", &[]),
        make_base(dir.path(), "nocsum", &["-O", "^metadata_csum"]),
    ];
    let cases: Vec<Case> = SEEDS.map(|s| inject(&bases[(s % 2) as usize], s, dir.path())).collect();
    let flagged: Vec<&Case> = cases.iter().filter(|c| c.e2fsck.is_some_and(|x| x != 0)).collect();
    let agree = flagged.iter().filter(|c| c.ext4kit.is_some_and(|x| x != 0)).count();
    let extra = cases
        .iter()
        .filter(|c| c.e2fsck == Some(0) && c.ext4kit.is_some_and(|x| x != 0))
        .count();
    let repaired = flagged.iter().filter(|c| c.ours_after == Some(0)).count();
    let theirs = flagged.iter().filter(|c| c.theirs_after == Some(0)).count();
    let mut report = format!(
        "# ext4kit fsck -fn against e2fsck -fn on {} seeded corruptions\n\n\
         e2fsck flags {}; ext4kit flags {agree} of them; ext4kit alone flags {extra}.\n\n\
         Repairs of the {} damaged images: after ext4kit fsck -fy, e2fsck -fn finds {repaired} clean; \
         after e2fsck -fy, {theirs}.\n\n",
        cases.len(),
        flagged.len(),
        flagged.len()
    );
    for c in &cases {
        let unrepaired = c.e2fsck.is_some_and(|x| x != 0) && c.ours_after != Some(0);
        if c.e2fsck.is_some_and(|x| x != 0) != c.ext4kit.is_some_and(|x| x != 0) || c.timed_out || unrepaired {
            report.push_str(&format!(
                "- seed {}: {}: e2fsck {:?}, ext4kit {:?}; e2fsck -fn after our -fy {:?}, after its own {:?}\n",
                c.seed, c.what, c.e2fsck, c.ext4kit, c.ours_after, c.theirs_after
            ));
        }
    }
    eprintln!("{report}");
    let _ = std::fs::write(Path::new(env!("CARGO_TARGET_TMPDIR")).join("fsck-faults.md"), &report);
    let bad: Vec<String> = cases
        .iter()
        .filter(|c| c.timed_out)
        .map(|c| format!("seed {}: {}", c.seed, c.what))
        .collect();
    assert!(bad.is_empty(), "ext4kit fsck panicked or hung:\n{}", bad.join("\n"));
    let failed: Vec<String> = cases
        .iter()
        .filter(|c| c.repair_failed)
        .map(|c| format!("seed {}: {}", c.seed, c.what))
        .collect();
    assert!(
        failed.is_empty(),
        "ext4kit fsck -fy panicked or hung:\n{}",
        failed.join("\n")
    );
    let harmed: Vec<String> = cases
        .iter()
        .filter(|c| c.e2fsck == Some(0) && c.ours_after != Some(0))
        .map(|c| format!("seed {}: {}", c.seed, c.what))
        .collect();
    assert!(
        harmed.is_empty(),
        "clean images made unclean by ext4kit fsck -fy:\n{}",
        harmed.join("\n")
    );
    assert!(repaired >= MIN_REPAIRED, "ext4kit fsck -fy repaired only {repaired}");
    assert!(
        flagged.len() >= 30,
        "too few corruptions e2fsck notices ({}) to measure anything",
        flagged.len()
    );
    assert!(
        agree * 100 >= flagged.len() * MIN_AGREE_PERCENT,
        "ext4kit flags {agree} of the {} cases e2fsck flags",
        flagged.len()
    );
}
