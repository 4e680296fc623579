//! External journals through the command line: `mkfs -O journal_dev` and
//! `mkfs -J device=` (checked by `e2fsck -fn -j`), editing commands with
//! `--journal`, their refusal without it, `fsck -j`, and `mount -o
//! journal_path=` through FUSE (skipped loudly without /dev/fuse).

use std::path::Path;
use std::process::{Command, Output};

use ext4kit_testkit::fuse::{FuseMount, can_fuse_mount};
use ext4kit_testkit::tools::skip_unless;

fn exe() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_ext4kit"))
}

fn ext4kit(args: &[&str]) -> Output {
    Command::new(exe()).args(args).output().expect("run ext4kit")
}

fn ok(args: &[&str]) -> String {
    let out = ext4kit(args);
    assert!(
        out.status.success(),
        "ext4kit {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn assert_e2fsck_clean(img: &Path, jnl: &Path) {
    let out = Command::new("e2fsck")
        .arg("-fn")
        .arg("-j")
        .arg(jnl)
        .arg(img)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "e2fsck -fn -j: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn dumpe2fs(img: &Path) -> String {
    let out = Command::new("dumpe2fs").arg("-h").arg(img).output().unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `(image, journal)` made by ext4kit mkfs, paths as strings.
fn make(dir: &Path, bs: &str) -> (String, String) {
    let (img, jnl) = (dir.join("fs.img"), dir.join("journal.img"));
    let (img, jnl) = (img.to_str().unwrap().to_string(), jnl.to_str().unwrap().to_string());
    ok(&["mkfs", "-q", "-O", "journal_dev", "-b", bs, &jnl, "8M"]);
    ok(&["mkfs", "-q", "-J", &format!("device={jnl}"), &img, "64M"]);
    (img, jnl)
}

#[test]
fn mkfs_makes_a_journal_device_and_a_file_system_on_it() {
    let dir = tempfile::tempdir().unwrap();
    let (img, jnl) = make(dir.path(), "1024");
    let j = dumpe2fs(Path::new(&jnl));
    let f = dumpe2fs(Path::new(&img));
    assert!(j.contains("journal_dev"), "{j}");
    let fs_uuid = f.lines().find(|l| l.starts_with("Filesystem UUID:")).unwrap();
    let fs_uuid = fs_uuid.split_whitespace().last().unwrap();
    let j_uuid = j.lines().find(|l| l.starts_with("Filesystem UUID:")).unwrap();
    let j_uuid = j_uuid.split_whitespace().last().unwrap();
    assert!(j.contains(&format!("Journal users:            {fs_uuid}")), "{j}");
    assert!(f.contains(&format!("Journal UUID:             {j_uuid}")), "{f}");
    assert!(
        f.contains("Block size:               1024"),
        "the journal's block size: {f}"
    );
    assert_e2fsck_clean(Path::new(&img), Path::new(&jnl));
}

#[test]
fn editing_takes_journal_and_is_refused_without_it() {
    let dir = tempfile::tempdir().unwrap();
    let (img, jnl) = make(dir.path(), "4096");
    let out = ext4kit(&["mkdir", &img, "/nope"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--journal PATH") && err.contains("journal_path="), "{err}");
    let before = std::fs::read(&jnl).unwrap();
    ok(&["mkdir", "--journal", &jnl, &img, "/d"]);
    assert_ne!(std::fs::read(&jnl).unwrap(), before, "the journal device was written");
    let ls = ok(&["ls", "--journal", &jnl, &img, "/"]);
    assert!(ls.lines().any(|l| l.trim() == "d"), "{ls}");
    let note = ok(&["fsck", "-fn", "-j", &jnl, &img]);
    assert!(note.contains("journal: external device"), "{note}");
    let other = dir.path().join("other.img");
    ok(&[
        "mkfs",
        "-q",
        "-O",
        "journal_dev",
        "-b",
        "4096",
        other.to_str().unwrap(),
        "8M",
    ]);
    let out = ext4kit(&["ls", "--journal", other.to_str().unwrap(), &img, "/"]);
    assert!(!out.status.success(), "a journal device of no file system is refused");
    assert_e2fsck_clean(Path::new(&img), Path::new(&jnl));
}

#[test]
fn mount_takes_journal_path() {
    if skip_unless(can_fuse_mount()).is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (img, jnl) = make(dir.path(), "4096");
    let m = FuseMount::start(exe(), Path::new(&img), &format!("journal_path={jnl}")).unwrap();
    std::fs::create_dir(m.path().join("d")).unwrap();
    for i in 0..20 {
        std::fs::write(m.path().join(format!("d/f{i}")), vec![i as u8; 5000 + i * 999]).unwrap();
    }
    assert!(m.unmount().unwrap().success());
    assert_e2fsck_clean(Path::new(&img), Path::new(&jnl));
    let ls = ok(&["ls", "--journal", &jnl, &img, "/d"]);
    assert_eq!(ls.lines().count(), 20, "{ls}");
    assert!(
        FuseMount::start(exe(), Path::new(&img), "").is_err(),
        "read-write without the journal"
    );
}

/// A loop device attached to an image file, detached when dropped.
struct Loop(String);

impl Drop for Loop {
    fn drop(&mut self) {
        let _ = Command::new("losetup").args(["-d", &self.0]).status();
    }
}

#[test]
fn fsck_j_replays_a_journal_the_kernel_left_dirty() {
    use ext4kit_testkit::mount::{LoopMount, can_loop_mount};
    if skip_unless(can_loop_mount()).is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (img, jnl) = make(dir.path(), "4096");
    let (copy, jcopy) = (dir.path().join("copy.img"), dir.path().join("copy.jnl"));
    let (theirs, jtheirs) = (dir.path().join("theirs.img"), dir.path().join("theirs.jnl"));
    {
        let out = Command::new("losetup").args(["-f", "--show", &jnl]).output().unwrap();
        assert!(
            out.status.success(),
            "losetup: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let lo = Loop(String::from_utf8_lossy(&out.stdout).trim().to_string());
        let opt = format!("journal_path={}", lo.0);
        let mnt = LoopMount::rw(Path::new(&img), &[&opt]).expect("mount -o journal_path=");
        for i in 0..30 {
            std::fs::write(mnt.path().join(format!("f{i}")), vec![i as u8; 2000 + i * 700]).unwrap();
        }
        Command::new("sync").status().unwrap();
        std::fs::copy(&img, &copy).unwrap();
        std::fs::copy(&jnl, &jcopy).unwrap();
        std::fs::copy(&img, &theirs).unwrap();
        std::fs::copy(&jnl, &jtheirs).unwrap();
        mnt.unmount().expect("unmount");
    }
    let (copy_s, jcopy_s) = (copy.to_str().unwrap(), jcopy.to_str().unwrap());
    let refused = ext4kit(&["fsck", "-fy", copy_s]);
    assert_eq!(refused.status.code(), Some(8), "a repair without the dirty journal");
    assert!(String::from_utf8_lossy(&refused.stderr).contains("-j PATH"));
    let out = ext4kit(&["fsck", "-fy", "-j", jcopy_s, copy_s]);
    assert!(
        out.status.code().is_some_and(|c| c <= 1),
        "fsck -fy -j: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_e2fsck_clean(&copy, &jcopy);
    // e2fsck's f_ext_journal case, built here: e2fsck -fy -j on the same
    // bytes leaves the same journal device and the same image but for the
    // primary superblock (e2fsck stamps its check time and mount count).
    let e2 = Command::new("e2fsck")
        .arg("-fy")
        .arg("-j")
        .arg(&jtheirs)
        .arg(&theirs)
        .output()
        .unwrap();
    assert!(
        e2.status.code().is_some_and(|c| c <= 1),
        "{}",
        String::from_utf8_lossy(&e2.stdout)
    );
    assert!(
        std::fs::read(&jcopy).unwrap() == std::fs::read(&jtheirs).unwrap(),
        "journal devices differ"
    );
    let (a, b) = (std::fs::read(&copy).unwrap(), std::fs::read(&theirs).unwrap());
    let diff = (0..a.len())
        .filter(|&i| a[i] != b[i] && !(1024..2048).contains(&i))
        .count();
    assert_eq!(
        diff, 0,
        "bytes outside the primary superblock differ from e2fsck's result"
    );
    let ls = ok(&["ls", "--journal", jcopy_s, copy_s, "/"]);
    assert_eq!(ls.lines().filter(|l| l.starts_with('f')).count(), 30, "{ls}");
    assert_e2fsck_clean(Path::new(&img), Path::new(&jnl));
}

/// `losetup -f --show FILE`, or `None` (skipped loudly) without loop devices.
fn attach_loop(file: &str) -> Option<Loop> {
    let out = Command::new("losetup").args(["-f", "--show", file]).output();
    match out {
        Ok(o) if o.status.success() => Some(Loop(String::from_utf8_lossy(&o.stdout).trim().to_string())),
        other => {
            ext4kit_testkit::skipped!("no loop device: {other:?}");
            assert!(std::env::var_os("CI").is_none(), "loop devices are required in CI");
            None
        }
    }
}

/// Without `--journal`, the journal device is found as e2fsprogs finds it
/// through blkid: by `s_journal_dev` (mkfs -J device=/dev/loopN records
/// the device number) or by UUID among the block devices (a journal made
/// as a file, attached, then put on a loop device); its absence is said
/// with the UUID. `mount -o journal_dev=MAJ:MIN` names it by number.
#[test]
fn the_journal_device_is_found_by_number_or_uuid() {
    let dir = tempfile::tempdir().unwrap();
    let jnl = dir.path().join("journal.img");
    let jnl_s = jnl.to_str().unwrap();
    ok(&["mkfs", "-q", "-O", "journal_dev", "-b", "4096", jnl_s, "8M"]);
    let Some(lo) = attach_loop(jnl_s) else { return };
    let img = dir.path().join("fs.img");
    let img_s = img.to_str().unwrap();
    ok(&["mkfs", "-q", "-J", &format!("device={}", lo.0), img_s, "64M"]);
    let out = ext4kit(&["mkdir", img_s, "/by-number"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains(&format!("found at {}", lo.0)), "{err}");
    assert_e2fsck_clean(&img, Path::new(&lo.0));
    // A file system whose superblock records no device number (attached
    // to the file): found by UUID.
    let img2 = dir.path().join("fs2.img");
    let img2_s = img2.to_str().unwrap();
    drop(lo);
    ok(&["mkfs", "-q", "-O", "journal_dev", "-b", "4096", "-F", jnl_s, "8M"]);
    ok(&["mkfs", "-q", "-J", &format!("device={jnl_s}"), img2_s, "64M"]);
    let Some(lo) = attach_loop(jnl_s) else { return };
    let out = ext4kit(&["mkdir", img2_s, "/by-uuid"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && err.contains(&format!("found at {}", lo.0)),
        "{err}"
    );
    let rdev = std::fs::read_to_string(format!("/sys/class/block/{}/dev", lo.0.trim_start_matches("/dev/"))).unwrap();
    if skip_unless(can_fuse_mount()).is_some() {
        let m = FuseMount::start(exe(), &img2, &format!("journal_dev={}", rdev.trim())).unwrap();
        std::fs::write(m.path().join("by-uuid/f"), b"through journal_dev=").unwrap();
        assert!(m.unmount().unwrap().success());
    }
    assert_e2fsck_clean(&img2, Path::new(&lo.0));
    drop(lo);
    let out = ext4kit(&["mkdir", img2_s, "/gone"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("was not found") && err.contains("--journal PATH"), "{err}");
}
