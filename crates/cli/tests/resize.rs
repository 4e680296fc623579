//! `ext4kit resize`: grows an image to SIZE (or to the image file's size),
//! prints the minimum size as `resize2fs -P` does (same figure), refuses
//! an image that needs e2fsck first unless `-f`, shrinks when the cut
//! part is unused and refuses, naming the moves, when it is not; every
//! image written is e2fsck -fn clean.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use ext4kit_testkit::tools::{assert_fsck_clean, require_tools, run_ok};

fn exe() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_ext4kit"))
}

fn have_tools() -> bool {
    match require_tools(&["mkfs.ext4", "e2fsck", "dumpe2fs", "resize2fs"]) {
        Ok(()) => true,
        Err(why) => {
            assert!(std::env::var_os("CI").is_none(), "CI must have e2fsprogs: {why}");
            ext4kit_testkit::skipped!("{why}");
            false
        }
    }
}

fn mkfs(dir: &Path, args: &[&str], size: &str) -> PathBuf {
    let img = dir.join("r.img");
    let d = dir.join("src");
    std::fs::create_dir_all(d.join("sub")).unwrap();
    for i in 0..50 {
        std::fs::write(d.join(format!("sub/f{i}")), vec![b'a' + (i % 26) as u8; 3000 * i]).unwrap();
    }
    let out = Command::new("mkfs.ext4")
        .args(["-q", "-F"])
        .args(args)
        .arg("-d")
        .arg(&d)
        .arg(&img)
        .arg(size)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    img
}

fn resize(args: &[&str]) -> Output {
    Command::new(exe()).arg("resize").args(args).output().unwrap()
}

fn blocks(img: &Path) -> u64 {
    let out = run_ok("dumpe2fs", &["-h", img.to_str().unwrap()]).unwrap().stdout;
    let l = out.lines().find(|l| l.starts_with("Block count:")).unwrap();
    l.split(':').nth(1).unwrap().trim().parse().unwrap()
}

#[test]
fn grows_to_size_and_to_the_file_size() {
    if !have_tools() {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let img = mkfs(d.path(), &["-b", "1024"], "16M");
    let i = img.to_str().unwrap();
    let o = resize(&[i, "40M"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stdout).contains("40960 (1k) blocks"));
    assert_eq!(blocks(&img), 40960);
    assert_eq!(std::fs::metadata(&img).unwrap().len(), 40 << 20);
    assert_fsck_clean(&img).unwrap();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&img)
        .unwrap()
        .set_len(100 << 20)
        .unwrap();
    let o = resize(&[i]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(blocks(&img), 100 << 10);
    assert_fsck_clean(&img).unwrap();
    let o = resize(&[i, "204800s"]);
    assert!(o.status.success());
    assert!(String::from_utf8_lossy(&o.stdout).contains("Nothing to do"));
}

#[test]
fn minimum_size_is_resize2fs_s() {
    if !have_tools() {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    for args in [&["-b", "4096"][..], &["-b", "1024", "-O", "^flex_bg"], &["-t", "ext2"]] {
        let img = mkfs(d.path(), args, "64M");
        let i = img.to_str().unwrap();
        let ours = resize(&["-P", i]);
        assert!(ours.status.success());
        let theirs = run_ok("resize2fs", &["-P", i]).unwrap().stdout;
        assert_eq!(
            String::from_utf8_lossy(&ours.stdout).trim(),
            theirs.lines().last().unwrap().trim(),
            "{args:?}"
        );
    }
}

#[test]
fn unclean_images_and_shrinks_are_refused() {
    if !have_tools() {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let img = mkfs(d.path(), &["-b", "4096"], "32M");
    let i = img.to_str().unwrap();
    run_ok("debugfs", &["-w", "-R", "ssv state 0", i]).unwrap();
    let o = resize(&[i, "64M"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("e2fsck -f"), "{o:?}");
    assert_eq!(blocks(&img), 8192);
    let o = resize(&["-f", i, "64M"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    run_ok("e2fsck", &["-fy", i]).ok();
    assert_fsck_clean(&img).unwrap();
    // Back to 32M: the cut part holds nothing in use.
    let o = resize(&[i, "32M"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(blocks(&img), 8192);
    assert_fsck_clean(&img).unwrap();
    // Below the -P estimate: refused, as resize2fs refuses it.
    let o = resize(&[i, "2000"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("smaller than the minimum"),
        "{o:?}"
    );
    assert_eq!(blocks(&img), 8192);
    assert_fsck_clean(&img).unwrap();
}
