//! `chattr +F` through `ext4kit mount` (`FS_IOC_SETFLAGS` with
//! `EXT4_CASEFOLD_FL`): an empty directory becomes casefolded and its
//! names are found under other casings; a non-empty one is refused with
//! ENOTEMPTY as the kernel refuses it. e2fsck -fn clean afterwards.

use std::path::Path;
use std::process::Command;

use ext4kit_testkit::fuse::{FuseMount, can_fuse_mount};
use ext4kit_testkit::tools::{assert_fsck_clean, require_tools};

fn exe() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_ext4kit"))
}

#[test]
fn chattr_plus_f_makes_an_empty_directory_casefolded() {
    for check in [can_fuse_mount(), require_tools(&["chattr", "e2fsck"])] {
        if let Err(why) = check {
            ext4kit_testkit::skipped!("{why}");
            assert!(std::env::var_os("CI").is_none(), "CI must run this: {why}");
            return;
        }
    }
    let tmp = tempfile::tempdir().unwrap();
    let img = tmp.path().join("img");
    let out = Command::new(exe())
        .args(["mkfs", "-q", "-O", "casefold"])
        .arg(&img)
        .arg("32M")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let m = FuseMount::start(exe(), &img, "").expect("mounted");
    let cf = m.path().join("cf");
    std::fs::create_dir(&cf).unwrap();
    let st = Command::new("chattr").arg("+F").arg(&cf).status().unwrap();
    assert!(st.success(), "chattr +F on an empty directory");
    std::fs::write(cf.join("Größe.txt"), b"hi").unwrap();
    assert_eq!(std::fs::read(cf.join("GRÖSSE.TXT")).unwrap(), b"hi");
    let full = m.path().join("full");
    std::fs::create_dir(&full).unwrap();
    std::fs::write(full.join("x"), b"").unwrap();
    let out = Command::new("chattr").arg("+F").arg(&full).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("not empty"), "{err}");
    m.unmount().expect("unmount");
    assert_fsck_clean(&img).expect("e2fsck -fn clean");
}
