//! `ext4kit tune`: tune2fs's options reach the image (dumpe2fs agrees,
//! e2fsck -fn is clean), bad arguments and unsafe requests are refused with
//! exit 1 and the image left as it was, and an image served by `ext4kit
//! mount` or mounted by the kernel is refused.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use ext4kit_testkit::fuse::{FuseMount, can_fuse_mount};
use ext4kit_testkit::mount::{LoopMount, can_loop_mount};
use ext4kit_testkit::tools::{e2fsck_fn, require_tools};

fn exe() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_ext4kit"))
}

/// Whether `check` passed; a skip is a failure under CI.
fn available(check: Result<(), String>) -> bool {
    match check {
        Ok(()) => true,
        Err(why) => {
            assert!(std::env::var_os("CI").is_none(), "CI must provide it: {why}");
            ext4kit_testkit::skipped!("{why}");
            false
        }
    }
}

fn make_image(dir: &Path) -> PathBuf {
    let img = dir.join("t.img");
    let out = Command::new("mkfs.ext4")
        .args(["-q", "-F", "-b", "1024", "-O", "^metadata_csum,uninit_bg"])
        .arg(&img)
        .arg("24M")
        .output()
        .expect("run mkfs.ext4");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    img
}

fn tune(args: &[&str], img: &Path) -> Output {
    Command::new(exe())
        .arg("tune")
        .args(args)
        .arg(img)
        .output()
        .expect("run ext4kit")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn assert_clean(img: &Path) {
    let r = e2fsck_fn(img).unwrap();
    assert!(r.is_clean(), "e2fsck -fn exited {}:\n{}", r.code, r.output);
}

fn dumpe2fs(img: &Path) -> String {
    let o = Command::new("dumpe2fs").arg("-h").arg(img).output().unwrap();
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn options_reach_the_superblock() {
    if !available(require_tools(&["mkfs.ext4", "e2fsck", "dumpe2fs"])) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let img = make_image(dir.path());
    let o = tune(
        &[
            "-O",
            "metadata_csum",
            "-L",
            "cli-label",
            "-e",
            "continue",
            "-c",
            "-1",
            "-i",
            "3d",
        ],
        &img,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert_clean(&img);
    let h = dumpe2fs(&img);
    for want in [
        "metadata_csum",
        "Filesystem volume name:   cli-label",
        "Errors behavior:          Continue",
        "Maximum mount count:      -1",
        "Check interval:           259200 (3 days)",
    ] {
        assert!(h.contains(want), "dumpe2fs -h lacks {want:?}:\n{h}");
    }
    let o = tune(
        &["-U", "12345678-1234-1234-1234-123456789abc", "-O", "^metadata_csum"],
        &img,
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert_clean(&img);
    assert!(dumpe2fs(&img).contains("Filesystem UUID:          12345678-1234-1234-1234-123456789abc"));
}

/// `-E encoding=utf8,encoding_flags=strict` turns casefold on in strict
/// mode, which e2fsck reads back (it checks names in strict mode only).
#[test]
fn encoding_turns_casefold_on() {
    if !available(require_tools(&["mkfs.ext4", "e2fsck", "dumpe2fs"])) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let img = make_image(dir.path());
    let o = tune(&["-E", "encoding=utf8,encoding_flags=strict", "-O", "verity"], &img);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(String::from_utf8_lossy(&o.stdout).contains("setting encoding to 'utf8-12.1'"));
    assert_clean(&img);
    let h = dumpe2fs(&img);
    assert!(h.contains(" casefold ") && h.contains(" verity"), "{h}");
    assert!(h.contains("Character encoding:       utf8-12.1"), "{h}");
    // s_encoding (0x27C) and s_encoding_flags (0x27E) of the primary.
    let raw = std::fs::read(&img).unwrap();
    assert_eq!(raw[1024 + 0x27C..1024 + 0x280], [1, 0, 1, 0], "utf8-12.1, strict");
    let o = tune(&["-E", "encoding=utf8"], &img);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("cannot alter existing encoding"), "{}", stderr(&o));
}

#[test]
fn bad_requests_are_refused_and_change_nothing() {
    if !available(require_tools(&["mkfs.ext4", "e2fsck"])) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let img = make_image(dir.path());
    let before = std::fs::read(&img).unwrap();
    for (args, want) in [
        (&["-O", "^extent"][..], "cannot turn off extent"),
        (&["-O", "bogus"][..], "unknown feature"),
        (&["-e", "explode"][..], "bad error behavior"),
        (&["-c", "20000"][..], "bad mounts count"),
        (&["-i", "5y"][..], "bad interval"),
        (&["-U", "not-a-uuid"][..], "invalid UUID"),
        (&["-E", "stride=4"][..], "unknown extended option"),
        (&["-E", "encoding=utf16"][..], "invalid encoding"),
        (
            &["-E", "encoding=utf8,encoding_flags=loud"][..],
            "invalid encoding flag",
        ),
        (
            &["-E", "encoding_flags=strict"][..],
            "an encoding must be explicitly specified",
        ),
        (&["-O", "^verity"][..], "verity"),
        (&[][..], "nothing to do"),
    ] {
        let o = tune(args, &img);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(want), "{args:?}: {:?} lacks {want:?}", stderr(&o));
    }
    assert_eq!(std::fs::read(&img).unwrap(), before, "a refusal changed the image");
    assert_clean(&img);
}

#[test]
fn mounted_images_are_refused() {
    if !available(require_tools(&["mkfs.ext4", "e2fsck"])) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let img = make_image(dir.path());
    let before = std::fs::read(&img).unwrap();
    if available(can_fuse_mount()) {
        let m = FuseMount::start(exe(), &img, "").unwrap();
        let o = tune(&["-L", "x"], &img);
        assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
        assert!(stderr(&o).contains("mounted by ext4kit"), "{}", stderr(&o));
        m.unmount().unwrap();
    }
    if available(can_loop_mount()) {
        let m = LoopMount::ro(&img).unwrap();
        let o = tune(&["-O", "metadata_csum"], &img);
        assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
        assert!(stderr(&o).contains("mounted by the kernel"), "{}", stderr(&o));
        drop(m);
    }
    let o = tune(&["-L", "after"], &img);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_clean(&img);
    assert_ne!(std::fs::read(&img).unwrap(), before);
}
