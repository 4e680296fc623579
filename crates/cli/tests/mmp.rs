//! Multi-mount protection through the `ext4kit` binary: an image made by
//! `ext4kit mkfs -O mmp` and served by `ext4kit mount` keeps the kernel's
//! mount out; a server killed with SIGKILL leaves the block live, and the
//! next `ext4kit mount` takes it over after waiting as the kernel would,
//! with no manual cleanup; after `ext4kit umount` the block is clean and
//! the kernel mounts the image; `ext4kit info` shows who holds the block.
//! Ends with `e2fsck -fn`.

use std::path::Path;
use std::process::Command;

use ext4kit_testkit::fuse::{FuseMount, can_fuse_mount};
use ext4kit_testkit::mount::{LoopMount, can_loop_mount};
use ext4kit_testkit::tools::{self, assert_fsck_clean, require_tools, skip_unless};

fn exe() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_ext4kit"))
}

/// The sequence field of `debugfs -R dump_mmp`.
fn mmp_sequence(img: &Path) -> String {
    let out = tools::debugfs(img, "dump_mmp").expect("debugfs dump_mmp");
    out.lines()
        .find_map(|l| l.strip_prefix("sequence: "))
        .unwrap_or_else(|| panic!("no sequence in dump_mmp:\n{out}"))
        .trim()
        .to_string()
}

/// The `mmp` object of `ext4kit info -H --json`.
fn info_mmp(img: &Path) -> serde_json::Value {
    let out = Command::new(exe())
        .args(["info", "-H", "--json"])
        .arg(img)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    v["mmp"].clone()
}

#[test]
fn a_killed_server_is_taken_over_and_the_kernel_is_kept_out() {
    if skip_unless(can_fuse_mount()).is_none()
        || skip_unless(can_loop_mount()).is_none()
        || skip_unless(require_tools(&["e2fsck", "debugfs"])).is_none()
    {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let img = work.path().join("shared.img");
    let out = Command::new(exe())
        .args(["mkfs", "-q", "-O", "mmp", "-E", "mmp_update_interval=1"])
        .arg(&img)
        .arg("64M")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(mmp_sequence(&img), "ff4d4d50");

    let m = FuseMount::start(exe(), &img, "").expect("ext4kit mounts the MMP image");
    std::fs::write(m.path().join("first"), b"first server\n").unwrap();
    std::fs::File::open(m.path().join("first")).unwrap().sync_all().unwrap();
    assert_ne!(mmp_sequence(&img), "ff4d4d50", "the server holds the block");
    let held = info_mmp(&img);
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    assert_eq!(held["node_name"], host.trim(), "{held}");
    assert_eq!(held["device_name"], img.to_str().unwrap(), "{held}");
    assert_eq!(held["state"], "in use (or its holder died)", "{held}");
    assert!(
        LoopMount::rw(&img, &[]).is_err(),
        "the kernel mounted an image an ext4kit server holds"
    );

    let mnt = m.path().to_path_buf();
    let status = m.signal_and_wait(rustix::process::Signal::KILL).unwrap();
    assert!(!status.success());
    let _ = Command::new("umount").arg("-l").arg(&mnt).status();
    let left = mmp_sequence(&img);
    assert_ne!(left, "ff4d4d50", "a killed server cannot mark the block clean");

    let m = FuseMount::start(exe(), &img, "").expect("the next mount takes the dead holder's block over");
    assert_eq!(std::fs::read(m.path().join("first")).unwrap(), b"first server\n");
    std::fs::write(m.path().join("second"), b"second server\n").unwrap();
    assert!(m.unmount().unwrap().success());
    assert_eq!(mmp_sequence(&img), "ff4d4d50");
    assert_eq!(info_mmp(&img)["state"], "clean");
    assert_fsck_clean(&img).unwrap();

    let k = LoopMount::rw(&img, &[]).expect("the kernel mounts once ext4kit let go");
    assert_eq!(std::fs::read(k.path().join("second")).unwrap(), b"second server\n");
    k.unmount().unwrap();
    assert_fsck_clean(&img).unwrap();
}
