//! Trees of any depth: a chain of 16,000 directories — 32,000-byte paths,
//! nearly eight times `PATH_MAX` — is made with `mkdir -p`, exported to the host,
//! imported from there into a fresh image, and removed with `rm -r`. Each
//! walk keeps its own stack and works relative to open directories; `rm -r`
//! of such a chain used to overflow the stack (SIGABRT).

use std::path::Path;
use std::process::Command;

use ext4kit_testkit::tools::{e2fsck_fn, require_tools, skip_unless};

const DEPTH: usize = 16_000;

fn ext4kit(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_ext4kit")).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "ext4kit {:?}…: {} ({})",
        &args[..2],
        String::from_utf8_lossy(&out.stderr),
        out.status
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn mke2fs(img: &Path) {
    // 1 KiB blocks, an inode and a block per directory.
    let out = Command::new("mkfs.ext4")
        .args(["-q", "-F", "-b", "1024", "-N", "40000"])
        .arg(img)
        .arg("64M")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

fn assert_clean(img: &Path) {
    let r = e2fsck_fn(img).unwrap();
    assert!(r.is_clean(), "e2fsck -fn:\n{}", r.output);
}

/// Lines of `find DIR ARGS` (GNU find walks any depth).
fn find(dir: &Path, args: &[&str]) -> Vec<String> {
    let out = Command::new("find").arg(dir).args(args).output().unwrap();
    assert!(out.status.success(), "find: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

#[test]
fn a_16000_level_chain_exports_imports_and_removes() {
    if skip_unless(require_tools(&["mkfs.ext4", "e2fsck", "find", "rm"])).is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (img, img2) = (dir.path().join("img"), dir.path().join("img2"));
    mke2fs(&img);
    mke2fs(&img2);
    let deep = format!("/d{}", "/d".repeat(DEPTH - 1));
    let i = img.to_str().unwrap();
    let before = ext4kit(&["info", i]);
    ext4kit(&["mkdir", "-p", i, &deep]);
    let leaf = format!("{deep}/leaf");
    let out = Command::new(env!("CARGO_BIN_EXE_ext4kit"))
        .args(["write", i, &leaf])
        .stdin(
            std::fs::File::open("/etc/hostname")
                .or_else(|_| std::fs::File::open("/dev/null"))
                .unwrap(),
        )
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));

    // Out to the host, far past PATH_MAX.
    let host = dir.path().join("out");
    let _cleanup = RmRf(host.clone());
    ext4kit(&["export", "-q", i, "/d", host.to_str().unwrap()]);
    assert_eq!(find(&host, &["-type", "d"]).len(), DEPTH);
    let leaves = find(&host, &["-name", "leaf"]);
    assert_eq!(leaves.len(), 1);
    assert!(leaves[0].len() > 7 * 4096);

    // And back into a fresh image.
    let i2 = img2.to_str().unwrap();
    ext4kit(&["import", i2, host.to_str().unwrap(), "/"]);
    let a = ext4kit(&["cat", i, &leaf]);
    let b = ext4kit(&["cat", i2, &leaf[2..]]);
    assert_eq!(a, b);
    assert_clean(&img2);

    // rm -r, on the original.
    ext4kit(&["rm", "-r", i, "/d"]);
    assert_eq!(ext4kit(&["ls", i, "/"]).trim(), "lost+found");
    let free = |info: &str| info.lines().find(|l| l.starts_with("Free blocks:")).map(str::to_string);
    assert_eq!(free(&ext4kit(&["info", i])), free(&before));
    assert_clean(&img);
}

/// Removes a deep host tree with `rm -rf` (before the TempDir holding it
/// goes, also when a test fails): std's recursive removal is not meant for
/// such depths.
struct RmRf(std::path::PathBuf);

impl Drop for RmRf {
    fn drop(&mut self) {
        let _ = Command::new("rm").arg("-rf").arg(&self.0).status();
    }
}
