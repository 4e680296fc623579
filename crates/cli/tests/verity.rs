//! `ext4kit verity enable|digest` and verity files through `cat` and the
//! FUSE mount: the digest equals what Debian's `fsverity digest` computes
//! from the same content on the host; a changed data block makes `cat`
//! fail naming the path and the block; on the mount a verity file reads
//! back whole, refuses writing (EPERM) and can be removed while the rest
//! of the image writes normally. Every image ends e2fsck -fn clean. The
//! mount part needs /dev/fuse and skips loudly without it (and fails
//! under CI).

use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use ext4kit_testkit::fuse::{FuseMount, can_fuse_mount};
use ext4kit_testkit::tools::{assert_fsck_clean, require_tools};

fn exe() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_ext4kit"))
}

fn ext4kit(args: &[&str]) -> Output {
    Command::new(exe()).args(args).output().unwrap()
}

fn ok(args: &[&str]) -> String {
    let out = ext4kit(args);
    assert!(
        out.status.success(),
        "ext4kit {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn skip(why: String) {
    ext4kit_testkit::skipped!("{why}");
    assert!(
        std::env::var_os("CI").is_none(),
        "CI installs what this test needs: {why}"
    );
}

/// A `-O verity` image (4 KiB blocks) holding `src/big` (300000 bytes)
/// and `src/other`.
fn image(dir: &Path) -> Option<PathBuf> {
    if let Err(why) = require_tools(&["mkfs.ext4", "debugfs"]) {
        skip(why);
        return None;
    }
    let src = dir.join("src");
    std::fs::create_dir_all(&src).unwrap();
    let big: Vec<u8> = (0..300_000u32).map(|i| (i.wrapping_mul(7919) >> 5) as u8).collect();
    std::fs::write(src.join("big"), big).unwrap();
    std::fs::write(src.join("other"), b"plain").unwrap();
    let img = dir.join("img");
    let out = Command::new("mkfs.ext4")
        .args(["-q", "-F", "-O", "verity", "-b", "4096", "-d"])
        .arg(&src)
        .arg(&img)
        .arg("32M")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    Some(img)
}

#[test]
fn enable_digest_and_cat() {
    let dir = tempfile::tempdir().unwrap();
    let Some(img) = image(dir.path()) else { return };
    let i = img.to_str().unwrap();
    ok(&["verity", "enable", i, "/big", "--salt", "ab01"]);
    ok(&["verity", "enable", i, "/other", "--hash-alg", "sha512"]);
    let e = ext4kit(&["verity", "enable", i, "/big"]);
    assert!(!e.status.success(), "enabling twice must fail");
    let digest = ok(&["verity", "digest", i, "/big"]);
    assert!(
        digest.starts_with("sha256:") && digest.trim_end().ends_with(" /big"),
        "{digest}"
    );
    let host = dir.path().join("src/big");
    if require_tools(&["fsverity"]).is_ok() {
        let out = Command::new("fsverity")
            .args(["digest", "--block-size=4096", "--salt=ab01"])
            .arg(&host)
            .output()
            .unwrap();
        let theirs = String::from_utf8(out.stdout).unwrap();
        assert_eq!(
            digest.split(' ').next(),
            theirs.split(' ').next(),
            "ours {digest} theirs {theirs}"
        );
        let other = ok(&["verity", "digest", i, "/other"]);
        let out = Command::new("fsverity")
            .args(["digest", "--block-size=4096", "--hash-alg=sha512"])
            .arg(dir.path().join("src/other"))
            .output()
            .unwrap();
        let theirs = String::from_utf8(out.stdout).unwrap();
        assert!(other.starts_with("sha512:"), "{other}");
        assert_eq!(
            other.split(' ').next(),
            theirs.split(' ').next(),
            "ours {other} theirs {theirs}"
        );
    } else {
        skip("fsverity is not installed (apt-get install fsverity)".into());
    }
    assert_eq!(ext4kit(&["cat", i, "/big"]).stdout, std::fs::read(&host).unwrap());
    assert_eq!(ext4kit(&["cat", i, "/other"]).stdout, b"plain");
    assert_fsck_clean(&img).unwrap();

    // Change data block 5 behind the file system's back.
    let bmap = Command::new("debugfs").args(["-R", "bmap /big 5", i]).output().unwrap();
    let block: u64 = String::from_utf8(bmap.stdout).unwrap().trim().parse().unwrap();
    let f = std::fs::OpenOptions::new().read(true).write(true).open(&img).unwrap();
    f.write_all_at(b"tampered", block * 4096 + 10).unwrap();
    let out = ext4kit(&["cat", i, "/big"]);
    assert!(!out.status.success(), "cat of a changed verity file must fail");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("/big") && err.contains("data block 5"), "{err}");
}

#[test]
fn verity_file_on_the_mount() {
    let dir = tempfile::tempdir().unwrap();
    let Some(img) = image(dir.path()) else { return };
    if let Err(why) = can_fuse_mount() {
        return skip(why);
    }
    ok(&["verity", "enable", img.to_str().unwrap(), "/big"]);
    let m = FuseMount::start(exe(), &img, "").unwrap();
    let big = m.path().join("big");
    assert_eq!(
        std::fs::read(&big).unwrap(),
        std::fs::read(dir.path().join("src/big")).unwrap()
    );
    let e = std::fs::OpenOptions::new().append(true).open(&big).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EPERM), "{e}");
    let e = std::fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(&big)
        .unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EPERM), "{e}");
    std::fs::write(m.path().join("other"), b"rewritten").unwrap();
    std::fs::write(m.path().join("new"), vec![7u8; 100_000]).unwrap();
    std::fs::remove_file(&big).unwrap();
    assert!(m.unmount().unwrap().success());
    assert_fsck_clean(&img).unwrap();
}
