//! `ext4kit tune -j`, `-J size=`, `-O has_journal`, `-O ^has_journal` and
//! `-J device=` against `tune2fs` on copies of the same mke2fs image: the
//! same `dumpe2fs` listing and the same bytes (but for `s_kbytes_written`
//! and the superblock checksum), e2fsck-clean, and a journal the kernel
//! mounts and writes through as ext3/ext4.

use std::path::Path;
use std::process::{Command, Output};

use ext4kit_testkit::mount::{LoopMount, can_loop_mount};
use ext4kit_testkit::tools::{self, assert_fsck_clean, require_tools, skip_unless};

const UUID: &str = "11111111-2222-3333-4444-555555555555";
const EPOCH: &str = "1700000000";

fn ext4kit(args: &[&str], img: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ext4kit"))
        .env("SOURCE_DATE_EPOCH", EPOCH)
        .args(args)
        .arg(img)
        .output()
        .expect("run ext4kit")
}

fn mke2fs(img: &Path, size: u64, args: &[&str]) {
    std::fs::File::create(img).unwrap().set_len(size).unwrap();
    let out = Command::new("mke2fs")
        .env("E2FSPROGS_FAKE_TIME", EPOCH)
        .args(["-q", "-F", "-U", UUID])
        .args(args)
        .arg(img)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "mke2fs {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn tune2fs(img: &Path, args: &[&str]) -> Output {
    Command::new("tune2fs")
        .env("E2FSPROGS_FAKE_TIME", EPOCH)
        .args(args)
        .arg(img)
        .output()
        .unwrap()
}

fn dumpe2fs(img: &Path) -> String {
    let out = tools::run_ok("dumpe2fs", &[img]).expect("dumpe2fs");
    out.stdout
        .lines()
        .filter(|l| !l.starts_with("Lifetime writes:") && !l.starts_with("Checksum:"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Offsets where the images differ, but for `s_kbytes_written` and
/// `s_checksum` of the primary superblock.
fn differing_bytes(a: &Path, b: &Path) -> Vec<usize> {
    let (x, y) = (std::fs::read(a).unwrap(), std::fs::read(b).unwrap());
    assert_eq!(x.len(), y.len());
    (0..x.len())
        .filter(|&i| x[i] != y[i])
        .filter(|&i| !((1024 + 0x178..1024 + 0x180).contains(&i) || (1024 + 0x3FC..2048).contains(&i)))
        .collect()
}

fn setup() -> Option<tempfile::TempDir> {
    skip_unless(require_tools(&["e2fsck", "mke2fs", "dumpe2fs", "tune2fs"]))?;
    Some(tempfile::tempdir().unwrap())
}

/// The kernel mounts the image as `fstype`, writes through the journal, and
/// leaves it e2fsck-clean.
fn kernel_writes(img: &Path, fstype: &str) {
    if let Err(why) = can_loop_mount() {
        ext4kit_testkit::skipped!("kernel mount of the new journal: {why}");
        assert!(std::env::var_os("CI").is_none(), "loop mounts are required in CI");
        return;
    }
    let mnt = LoopMount::mount(img, Some(fstype), &[]).expect("kernel mounts the tuned image");
    std::fs::write(mnt.path().join("f"), vec![5u8; 300_000]).unwrap();
    std::fs::create_dir(mnt.path().join("d")).unwrap();
    mnt.unmount().unwrap();
    assert_fsck_clean(img).unwrap_or_else(|e| panic!("after the kernel wrote: {e}"));
}

#[test]
fn adding_and_removing_match_tune2fs() {
    let Some(dir) = setup() else { return };
    let (ours, theirs) = (dir.path().join("ours.img"), dir.path().join("theirs.img"));
    for (size, mk, tune, fstype) in [
        (64u64 << 20, &["-t", "ext2"][..], &["-j"][..], Some("ext3")),
        (64 << 20, &["-t", "ext2"][..], &["-J", "size=8"][..], Some("ext3")),
        (
            256 << 20,
            &["-t", "ext2", "-b", "4096"][..],
            &["-O", "has_journal"][..],
            Some("ext3"),
        ),
        (
            64 << 20,
            &["-t", "ext4", "-O", "^has_journal"][..],
            &["-j"][..],
            Some("ext4"),
        ),
        (
            1 << 30,
            &["-t", "ext4", "-O", "^has_journal"][..],
            &["-J", "size=64"][..],
            Some("ext4"),
        ),
        (
            64 << 20,
            &["-t", "ext4", "-O", "^has_journal,fast_commit"][..],
            &["-J", "size=8,fast_commit_size=256"][..],
            Some("ext4"),
        ),
        (64 << 20, &["-t", "ext4"][..], &["-O", "^has_journal"][..], None),
        (64 << 20, &["-t", "ext3"][..], &["-O", "^has_journal"][..], None),
        (1 << 30, &["-t", "ext4"][..], &["-O", "^has_journal"][..], None),
    ] {
        mke2fs(&theirs, size, mk);
        std::fs::copy(&theirs, &ours).unwrap();
        let out = ext4kit(&[&["tune"][..], tune].concat(), &ours);
        assert!(
            out.status.success(),
            "{mk:?} {tune:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let t = tune2fs(&theirs, tune);
        assert!(
            t.status.success(),
            "tune2fs {tune:?}: {}",
            String::from_utf8_lossy(&t.stderr)
        );
        assert_eq!(dumpe2fs(&ours), dumpe2fs(&theirs), "dumpe2fs after {mk:?} {tune:?}");
        let diff = differing_bytes(&ours, &theirs);
        assert!(
            diff.is_empty(),
            "{mk:?} {tune:?}: {} bytes differ, first at {:#x}",
            diff.len(),
            diff[0]
        );
        assert_fsck_clean(&ours).unwrap_or_else(|e| panic!("{mk:?} {tune:?}: {e}"));
        if let Some(fstype) = fstype {
            kernel_writes(&ours, fstype);
        }
    }
}

#[test]
fn refusals_name_the_reason_as_tune2fs() {
    let Some(dir) = setup() else { return };
    let img = dir.path().join("fs.img");
    let err = |args: &[&str]| {
        let out = ext4kit(&[&["tune"][..], args].concat(), &img);
        assert!(!out.status.success(), "{args:?} succeeded");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    mke2fs(&img, 64 << 20, &["-t", "ext3"]);
    assert!(err(&["-j"]).contains("already has a journal"));
    mke2fs(&img, 64 << 20, &["-t", "ext2", "-b", "4096"]);
    let e = err(&["-J", "size=1"]);
    assert!(e.contains("must be between 1024 and 10240000 blocks"), "{e}");
    let e = err(&["-J", "size=40"]);
    assert!(e.contains("too big"), "{e}");
    assert!(!tune2fs(&img, &["-J", "size=40"]).status.success());
    assert!(err(&["-J", "location=9"]).contains("bad journal option"));
    assert!(err(&["-O", "^has_journal"]).contains("no journal"));
    assert_fsck_clean(&img).unwrap();
}

/// A journal flagged needs_recovery is replayed, then removed, as tune2fs
/// 1.47 does ("Recovering journal."); the results match.
#[test]
fn a_journal_needing_recovery_is_replayed_then_removed() {
    let Some(dir) = setup() else { return };
    let (ours, theirs) = (dir.path().join("ours.img"), dir.path().join("theirs.img"));
    mke2fs(&theirs, 64 << 20, &["-t", "ext3"]);
    // s_feature_incompat bit 0x4 at 0x460 (ext3 has no superblock checksum).
    let mut bytes = std::fs::read(&theirs).unwrap();
    bytes[1024 + 0x60] |= 4;
    std::fs::write(&theirs, &bytes).unwrap();
    std::fs::write(&ours, &bytes).unwrap();
    let out = ext4kit(&["tune", "-O", "^has_journal"], &ours);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(tune2fs(&theirs, &["-O", "^has_journal"]).status.success());
    // tune2fs's recovery also stamps s_lastcheck (with 0xffffffff under
    // E2FSPROGS_FAKE_TIME); ext4kit's replay leaves it.
    let listing = |p: &Path| {
        dumpe2fs(p)
            .lines()
            .filter(|l| !l.starts_with("Last checked:"))
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert_eq!(listing(&ours), listing(&theirs));
    assert_fsck_clean(&ours).unwrap();
}

/// `tune -J device=` attaches a journal device made by `mkfs -O
/// journal_dev`; e2fsck checks both, and `^has_journal` detaches it.
#[test]
fn attaching_a_journal_device() {
    let Some(dir) = setup() else { return };
    let (img, jnl) = (dir.path().join("fs.img"), dir.path().join("journal.img"));
    mke2fs(&img, 64 << 20, &["-t", "ext4", "-O", "^has_journal", "-b", "4096"]);
    let out = Command::new(env!("CARGO_BIN_EXE_ext4kit"))
        .args(["mkfs", "-q", "-F", "-O", "journal_dev", "-b", "4096"])
        .arg(&jnl)
        .arg("8M")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let dev = format!("device={}", jnl.display());
    let out = ext4kit(&["tune", "-J", &dev], &img);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let f = dumpe2fs(&img);
    assert!(f.contains("has_journal") && f.contains("Journal UUID:"), "{f}");
    let fsck = Command::new("e2fsck")
        .arg("-fn")
        .arg("-j")
        .arg(&jnl)
        .arg(&img)
        .output()
        .unwrap();
    assert_eq!(fsck.status.code(), Some(0), "{}", String::from_utf8_lossy(&fsck.stdout));
    let out = ext4kit(&["tune", "-J", &dev], &img);
    assert!(String::from_utf8_lossy(&out.stderr).contains("already has a journal"));
    let out = ext4kit(&["tune", "-O", "^has_journal"], &img);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(!dumpe2fs(&img).contains("Journal UUID:"));
    assert_fsck_clean(&img).unwrap();
    // An external journal that needs recovery cannot be replayed here.
    let out = ext4kit(&["tune", "-J", &dev], &img);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let mut bytes = std::fs::read(&img).unwrap();
    bytes[1024 + 0x60] |= 4;
    std::fs::write(&img, &bytes).unwrap();
    let out = ext4kit(&["tune", "-O", "^has_journal"], &img);
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && e.contains("needs recovery") && e.contains("fsck -j"),
        "{e}"
    );
    bytes[1024 + 0x60] &= !4;
    std::fs::write(&img, &bytes).unwrap();
    let fsck = Command::new("e2fsck")
        .arg("-fn")
        .arg("-j")
        .arg(&jnl)
        .arg(&img)
        .output()
        .unwrap();
    assert_eq!(fsck.status.code(), Some(0), "{}", String::from_utf8_lossy(&fsck.stdout));
}

/// A crash of `tune -j` before its last write (the primary superblock)
/// leaves the old superblock over a written journal inode: what e2fsck
/// reports ("Journal inode is not in use, but contains data") and
/// repairs, nothing worse.
#[test]
fn a_crash_before_the_superblock_leaves_only_leaked_blocks() {
    let Some(dir) = setup() else { return };
    let img = dir.path().join("fs.img");
    mke2fs(&img, 64 << 20, &["-t", "ext4", "-O", "^has_journal"]);
    let old_sb = std::fs::read(&img).unwrap()[1024..2048].to_vec();
    let out = ext4kit(&["tune", "-j"], &img);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let mut bytes = std::fs::read(&img).unwrap();
    bytes[1024..2048].copy_from_slice(&old_sb);
    std::fs::write(&img, &bytes).unwrap();
    let check = tools::e2fsck_fn(&img).unwrap();
    assert!(
        check.output.contains("Journal inode is not in use, but contains data"),
        "{}",
        check.output
    );
    let fix = Command::new("e2fsck").arg("-fy").arg(&img).output().unwrap();
    assert!(
        fix.status.code().is_some_and(|c| c <= 1),
        "{}",
        String::from_utf8_lossy(&fix.stdout)
    );
    assert_fsck_clean(&img).unwrap();
}
