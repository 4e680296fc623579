//! `ext4kit tune -O [^]quota`, `-O [^]project` and `-Q [^]usrquota,…`
//! against tune2fs 1.47.0 on copies of one populated image (files of
//! several owners and a project): after each step both images are
//! `e2fsck -fn` clean (e2fsck verifies quota usage), name the same quota
//! inodes and features (`dumpe2fs -h`), and hold the same quota files,
//! byte for byte (`debugfs dump`).

use std::path::{Path, PathBuf};
use std::process::Command;

use ext4kit_testkit::tools::{assert_fsck_clean, debugfs, debugfs_write, require_tools, skip_unless};

const UUID: &str = "11111111-2222-3333-4444-555555555555";
const EPOCH: &str = "1700000000";

fn tools() -> bool {
    let ok = skip_unless(require_tools(&["mke2fs", "tune2fs", "e2fsck", "debugfs", "dumpe2fs"])).is_some();
    assert!(ok || std::env::var_os("CI").is_none(), "CI must have e2fsprogs");
    ok
}

fn run(program: &str, args: &[&str], img: &Path) -> (bool, String) {
    let out = Command::new(program)
        .env("E2FSPROGS_FAKE_TIME", EPOCH)
        .args(args)
        .arg(img)
        .output()
        .expect("run");
    let text = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
}

fn ours(args: &[&str], img: &Path) -> (bool, String) {
    let mut a = vec!["tune"];
    a.extend_from_slice(args);
    run(env!("CARGO_BIN_EXE_ext4kit"), &a, img)
}

/// A tree with files of uids 0, 1000, 1001 and gids 0, 100, 2000, made
/// into an image by mke2fs -d (quota off), one file put in project 7.
fn populated(dir: &Path, inode_size: &str) -> PathBuf {
    let src = dir.join("src");
    std::fs::create_dir_all(src.join("d/e")).unwrap();
    let files: [(&str, usize, u32, u32); 5] = [
        ("a", 5000, 1000, 100),
        ("d/b", 70_000, 1001, 2000),
        ("d/e/c", 1, 1000, 2000),
        ("z", 0, 0, 0),
        ("big", 300_000, 1001, 100),
    ];
    for (name, len, uid, gid) in files {
        let p = src.join(name);
        std::fs::write(&p, vec![b'q'; len]).unwrap();
        std::os::unix::fs::chown(&p, Some(uid), Some(gid)).unwrap();
    }
    std::os::unix::fs::chown(src.join("d"), Some(1000), Some(100)).unwrap();
    let img = dir.join(format!("base{inode_size}.img"));
    let args = [
        "-q",
        "-F",
        "-t",
        "ext4",
        "-I",
        inode_size,
        "-U",
        UUID,
        "-d",
        src.to_str().unwrap(),
    ];
    let mut a = args.to_vec();
    a.push(img.to_str().unwrap());
    let out = Command::new("mke2fs")
        .env("E2FSPROGS_FAKE_TIME", EPOCH)
        .args(&a)
        .arg("32M")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    if inode_size != "128" {
        debugfs_write(&img, "sif /d/b projid 7").expect("set a project id");
    }
    img
}

/// `dumpe2fs -h`'s feature and quota inode lines.
fn quota_lines(img: &Path) -> Vec<String> {
    let out = Command::new("dumpe2fs").arg("-h").arg(img).output().expect("dumpe2fs");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains("quota inode") || l.starts_with("Filesystem features"))
        .map(str::to_string)
        .collect()
}

/// Every quota file's bytes, by the inode `dumpe2fs` names.
fn quota_files(img: &Path, scratch: &Path) -> Vec<Vec<u8>> {
    quota_lines(img)
        .iter()
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u32>().ok())
        .map(|ino| {
            let out = scratch.join("dump");
            let _ = std::fs::remove_file(&out);
            debugfs(img, &format!("dump <{ino}> {}", out.display())).expect("debugfs dump");
            std::fs::read(&out).expect("dumped file")
        })
        .collect()
}

#[test]
fn quota_switches_match_tune2fs() {
    if !tools() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let base = populated(tmp.path(), "256");
    let (theirs, mine) = (tmp.path().join("theirs.img"), tmp.path().join("mine.img"));
    std::fs::copy(&base, &theirs).unwrap();
    std::fs::copy(&base, &mine).unwrap();
    let steps: [&[&str]; 5] = [
        &["-O", "quota"],
        &["-O", "project"],
        &["-Q", "^usrquota"],
        &["-Q", "usrquota,^prjquota"],
        &["-O", "^quota"],
    ];
    for step in steps {
        let (ok, out) = run("tune2fs", step, &theirs);
        assert!(ok, "tune2fs {step:?}: {out}");
        let (ok, out) = ours(step, &mine);
        assert!(ok, "ext4kit tune {step:?}: {out}");
        assert_fsck_clean(&theirs).expect("tune2fs's image is e2fsck -fn clean");
        assert_fsck_clean(&mine).unwrap_or_else(|e| panic!("after tune {step:?}: {e}"));
        assert_eq!(quota_lines(&mine), quota_lines(&theirs), "after {step:?}");
        assert_eq!(
            quota_files(&mine, tmp.path()),
            quota_files(&theirs, tmp.path()),
            "quota files after {step:?}"
        );
        for t in ["user", "group", "project"] {
            let l = |img: &Path| debugfs(img, &format!("list_quota {t}")).unwrap_or_default();
            assert_eq!(l(&mine), l(&theirs), "{t} quota after {step:?}");
        }
    }
    let (ok, out) = ours(&["-O", "quota", "-L", "x"], &mine);
    assert!(!ok && out.contains("go alone"), "{out}");
}

#[test]
fn project_quota_needs_large_inodes() {
    if !tools() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let img = populated(tmp.path(), "128");
    let before = std::fs::read(&img).unwrap();
    for step in [&["-O", "project"][..], &["-Q", "prjquota"], &["-O", "quota,project"]] {
        let (ok, out) = ours(step, &img);
        assert!(!ok && out.contains("too small for i_projid"), "{step:?}: {out}");
        assert!(
            std::fs::read(&img).unwrap() == before,
            "{step:?} left the image as it was"
        );
    }
    let (ok, out) = ours(&["-O", "quota"], &img);
    assert!(ok, "{out}");
    assert_fsck_clean(&img).expect("e2fsck -fn clean with user and group quota");
    assert!(debugfs(&img, "list_quota user").unwrap().contains("1001"));
}
