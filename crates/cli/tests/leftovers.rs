//! Commands that fail leave no debris (issue 13, item 7): `mkfs` refuses
//! the sizes and inode counts `mke2fs` cannot make a file system of (the
//! oracle: `mkfs.ext4` fails on them too) before changing anything; a
//! failed `mkfs` or `mount --create` removes the image file it created and
//! never one that existed before, so the retry starts afresh.

use std::path::Path;
use std::process::{Command, Output};

use ext4kit_testkit::fuse::can_fuse_mount;
use ext4kit_testkit::tools::{e2fsck_fn, require_tool, skip_unless};

fn ext4kit(args: &[&str], image: &Path) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_ext4kit"));
    // The image goes where `{}` stands.
    for a in args {
        if *a == "{}" {
            c.arg(image);
        } else {
            c.arg(a);
        }
    }
    c.output().expect("run ext4kit")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn assert_clean(img: &Path) {
    let r = e2fsck_fn(img).expect("run e2fsck");
    assert!(r.is_clean(), "e2fsck -fn {}: {}", img.display(), r.output);
}

/// Sizes and inode counts below what a file system needs (the 11 first
/// inodes are reserved, and `mke2fs`'s rounding can leave only 8) fail
/// with a message and leave no file; `mkfs.ext4` fails on each as well;
/// 104 KiB, mke2fs's smallest default layout, works and is e2fsck-clean.
#[test]
fn mkfs_refuses_what_mke2fs_refuses_and_leaves_no_file() {
    let Some(_) = skip_unless(require_tool("mkfs.ext4")) else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let cases: [(&str, &[&str], &str); 6] = [
        ("8k", &[], "too small"),
        ("32k", &[], "too small"),
        ("64k", &[], "inodes are too few"),
        ("100k", &[], "inodes are too few"),
        ("103k", &[], "inodes are too few"),
        ("1M", &["-N", "11"], "inodes are too few"),
    ];
    for (size, extra, why) in cases {
        let img = work.path().join(format!("ours-{size}.img"));
        let mut args = vec!["mkfs", "-q"];
        args.extend_from_slice(extra);
        args.extend(["{}", size]);
        let o = ext4kit(&args, &img);
        assert_eq!(
            o.status.code(),
            Some(1),
            "mkfs {extra:?} {size} succeeded: {}",
            stderr(&o)
        );
        assert!(stderr(&o).contains(why), "mkfs {extra:?} {size}: {}", stderr(&o));
        assert!(!img.exists(), "mkfs {extra:?} {size} left {}", img.display());

        let oracle = work.path().join(format!("mke2fs-{size}.img"));
        let m = Command::new("mkfs.ext4")
            .arg("-q")
            .args(extra)
            .arg(&oracle)
            .arg(size)
            .output()
            .unwrap();
        assert!(
            !m.status.success(),
            "mke2fs {extra:?} {size} succeeded: ours should too"
        );
    }
    let img = work.path().join("ok.img");
    let o = ext4kit(&["mkfs", "-q", "{}", "104k"], &img);
    assert!(o.status.success(), "mkfs 104k (mke2fs's smallest too): {}", stderr(&o));
    assert_clean(&img);
    let o = ext4kit(&["mkfs", "-q", "-F", "-N", "16", "{}", "1M"], &img);
    assert!(o.status.success(), "mkfs -N 16 1M: {}", stderr(&o));
    assert_clean(&img);
}

/// A refused `mkfs -F` leaves an existing image as it was (it is checked
/// before the image is truncated), and a failed `mkfs` never removes a
/// file it did not create.
#[test]
fn a_failed_mkfs_keeps_an_existing_file_untouched() {
    let work = tempfile::tempdir().unwrap();
    let img = work.path().join("img");
    let o = ext4kit(&["mkfs", "-q", "{}", "16M"], &img);
    assert!(o.status.success(), "{}", stderr(&o));
    let body = work.path().join("body");
    std::fs::write(&body, b"kept across failed mkfs runs").unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_ext4kit"))
        .arg("write")
        .arg(&img)
        .arg("/kept")
        .stdin(std::fs::File::open(&body).unwrap())
        .output()
        .unwrap();
    assert!(o.status.success(), "write: {}", stderr(&o));
    let before = std::fs::read(&img).unwrap();
    for args in [
        &["mkfs", "-q", "-F", "{}", "64k"][..],
        &["mkfs", "-q", "-F", "-N", "5", "{}", "1M"],
        &["mkfs", "-q", "-F", "-d", "/nonexistent/dir", "{}"],
        &["mkfs", "-q", "{}"],
    ] {
        let o = ext4kit(args, &img);
        assert_eq!(o.status.code(), Some(1), "{args:?} succeeded");
        assert!(std::fs::read(&img).unwrap() == before, "{args:?} changed the image");
    }
    assert_clean(&img);

    // Not a file system, so no -F needed: still refused, still there.
    let junk = work.path().join("junk");
    std::fs::write(&junk, vec![0x5a; 65536]).unwrap();
    let o = ext4kit(&["mkfs", "-q", "{}"], &junk);
    assert_eq!(o.status.code(), Some(1), "mkfs of 64 KiB junk succeeded");
    assert_eq!(std::fs::read(&junk).unwrap(), vec![0x5a; 65536]);
}

/// `mkfs -d` with a source that is no directory fails before creating the
/// image; a bad size for `mount --create` leaves no image, and the retry
/// with a good one mounts.
#[test]
fn failed_creations_leave_nothing_behind() {
    let work = tempfile::tempdir().unwrap();
    let img = work.path().join("new.img");
    let o = ext4kit(&["mkfs", "-q", "-d", "/nonexistent/dir", "{}", "16M"], &img);
    assert_eq!(o.status.code(), Some(1), "mkfs -d /nonexistent succeeded");
    assert!(!img.exists(), "mkfs -d left {}", img.display());

    if skip_unless(can_fuse_mount()).is_none() {
        return;
    }
    let mnt = work.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let mnt_s = mnt.to_str().unwrap();
    let o = ext4kit(&["mount", "-d", "--create", "64k", "{}", mnt_s], &img);
    assert_eq!(o.status.code(), Some(1), "mount --create 64k succeeded");
    assert!(!img.exists(), "mount --create 64k left {}", img.display());
    let o = ext4kit(&["mount", "-d", "--create", "16M", "{}", mnt_s], &img);
    assert!(o.status.success(), "mount --create 16M: {}", stderr(&o));
    std::fs::write(mnt.join("f"), b"made").unwrap();
    let o = ext4kit(&["umount", mnt_s], &img);
    assert!(o.status.success(), "umount: {}", stderr(&o));
    assert_clean(&img);
}
