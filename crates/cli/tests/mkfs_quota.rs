//! `ext4kit mkfs -O quota[,project] [-E quotatype=…] [-d DIR]` against
//! mke2fs 1.47.0 on the same options, UUID and time: the quota files byte
//! for byte and in the same blocks (every group's free ranges equal),
//! `debugfs list_quota` and the `dumpe2fs -h` quota lines equal,
//! `e2fsck -fn` clean. With `-d`, mke2fs 1.47.0 leaves usage stale (it
//! makes the quota files before copying the tree); ours must equal what
//! `e2fsck -fy` writes into mke2fs's image.

use std::path::Path;
use std::process::Command;

use ext4kit_testkit::tools::{assert_fsck_clean, debugfs, require_tools, skip_unless};

const UUID: &str = "11111111-2222-3333-4444-555555555555";
const SEED: &str = "66666666-7777-8888-9999-aaaaaaaaaaaa";
const EPOCH: &str = "1700000000";

/// Runs `program` with `args`, the fixed UUID and time, and one `-E` of
/// the hash seed and `ext` (mke2fs keeps only its last `-E`).
fn run(program: &str, img: &Path, args: &[&str], ext: &str) {
    let out = Command::new(program)
        .env("SOURCE_DATE_EPOCH", EPOCH)
        .env("E2FSPROGS_FAKE_TIME", EPOCH)
        .args(args)
        .args(["-U", UUID, "-E", &format!("hash_seed={SEED}{ext}")])
        .arg(img)
        .arg("32M")
        .output()
        .expect("run mkfs");
    assert!(
        out.status.success(),
        "{program} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn ours(img: &Path, args: &[&str], ext: &str) {
    let mut a = vec!["mkfs", "-q"];
    a.extend_from_slice(args);
    run(env!("CARGO_BIN_EXE_ext4kit"), img, &a, ext);
}

fn theirs(img: &Path, args: &[&str], ext: &str) {
    let mut a = vec!["-q", "-F", "-t", "ext4"];
    a.extend_from_slice(args);
    run("mke2fs", img, &a, ext);
}

fn quota_lines(img: &Path) -> Vec<String> {
    let out = Command::new("dumpe2fs").arg("-h").arg(img).output().expect("dumpe2fs");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains("quota inode") || l.starts_with("Filesystem features"))
        .map(str::to_string)
        .collect()
}

/// Every group's free block and inode ranges, as dumpe2fs lists them.
fn free_ranges(img: &Path) -> Vec<String> {
    let out = Command::new("dumpe2fs").arg(img).output().expect("dumpe2fs");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.trim_start().starts_with("Free ") || l.starts_with("Group "))
        .map(|l| l.split(" csum").next().unwrap_or(l).to_string())
        .collect()
}

fn listing(img: &Path, t: &str) -> String {
    debugfs(img, &format!("list_quota {t}")).unwrap_or_else(|e| format!("no {t} quota: {e}"))
}

fn quota_inodes(img: &Path) -> Vec<u32> {
    quota_lines(img)
        .iter()
        .filter_map(|l| l.rsplit(' ').next()?.parse().ok())
        .collect()
}

fn tools() -> bool {
    let ok = skip_unless(require_tools(&["mke2fs", "e2fsck", "debugfs", "dumpe2fs"])).is_some();
    assert!(ok || std::env::var_os("CI").is_none(), "CI must have e2fsprogs");
    ok
}

#[test]
fn empty_file_systems_match_mke2fs() {
    if !tools() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let cases: [(&[&str], &str); 6] = [
        (&["-O", "quota"], ""),
        (&["-O", "quota,project", "-I", "256"], ""),
        (&["-O", "quota"], ",quotatype=usrquota"),
        (&["-O", "quota"], ",quotatype=prjquota:grpquota,root_owner=1000:100"),
        (
            &["-O", "quota,^has_journal", "-b", "1024"],
            ",quotatype=usrquota:grpquota:prjquota",
        ),
        (&["-O", "quota,project", "-b", "4096"], ""),
    ];
    for (args, ext) in cases {
        let (a, b) = (tmp.path().join("ours"), tmp.path().join("theirs"));
        let _ = std::fs::remove_file(&a);
        ours(&a, args, ext);
        theirs(&b, args, ext);
        assert_fsck_clean(&a).expect("e2fsck -fn clean");
        assert_eq!(quota_lines(&a), quota_lines(&b), "{args:?} {ext}");
        assert_eq!(
            free_ranges(&a),
            free_ranges(&b),
            "{args:?} {ext}: quota blocks placed elsewhere"
        );
        for t in ["user", "group", "project"] {
            assert_eq!(listing(&a, t), listing(&b, t), "{args:?} {t}");
        }
        let inos = quota_inodes(&a);
        assert!(!inos.is_empty(), "{args:?}: quota inodes named");
        for ino in inos {
            let dump = |img: &Path, to: &str| {
                let out = tmp.path().join(to);
                debugfs(img, &format!("dump <{ino}> {}", out.display())).expect("dump");
                std::fs::read(out).expect("dumped")
            };
            assert_eq!(dump(&a, "qa"), dump(&b, "qb"), "{args:?}: quota file in inode {ino}");
        }
    }
}

#[test]
fn a_copied_tree_is_charged_as_e2fsck_counts_it() {
    if !tools() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("src");
    std::fs::create_dir_all(src.join("d/e")).unwrap();
    std::fs::write(src.join("a"), b"hi").unwrap();
    std::fs::write(src.join("d/big"), vec![5u8; 300_000]).unwrap();
    std::fs::write(src.join("d/e/c"), vec![6u8; 5000]).unwrap();
    // Other owners where the test may give them (root).
    let _ = std::os::unix::fs::chown(src.join("a"), Some(1000), Some(100));
    let _ = std::os::unix::fs::chown(src.join("d/e"), Some(1001), Some(101));
    let args = ["-O", "quota,project", "-I", "256", "-d", src.to_str().unwrap()];
    let (a, b) = (tmp.path().join("ours"), tmp.path().join("theirs"));
    ours(&a, &args, "");
    theirs(&b, &args, "");
    assert_fsck_clean(&a).expect("e2fsck -fn clean");
    // e2fsck -fy corrects mke2fs's stale usage: the oracle.
    let fixed = Command::new("e2fsck").arg("-fy").arg(&b).status().expect("e2fsck -fy");
    assert!(fixed.code().is_some_and(|c| c <= 1), "e2fsck -fy: {fixed:?}");
    assert_eq!(quota_lines(&a), quota_lines(&b));
    for t in ["user", "group", "project"] {
        assert_eq!(listing(&a, t), listing(&b, t), "{t}");
    }
}
