//! `ext4kit import` of the fixture tree into empty images of several kinds:
//! `e2fsck -fn` clean, and the kernel's view of the image equals the source
//! tree — contents and holes, types, modes, owners, nanosecond mtimes,
//! xattrs, symlinks, device numbers and hard-link groups.

use std::path::Path;
use std::process::Command;

use ext4kit_testkit::compare::{CompareOptions, compare_trees, format_differences};
use ext4kit_testkit::fixture::{TreeOptions, build_tree};
use ext4kit_testkit::mount::{LoopMount, can_loop_mount};
use ext4kit_testkit::tools::{e2fsck_fn, require_tool, skip_unless};

fn import_into(dir: &Path, src: &Path, mkfs_args: &[&str]) {
    let img = dir.join(format!("img{}", mkfs_args.join("")));
    let out = Command::new("mkfs.ext4")
        .args(["-q", "-F"])
        .args(mkfs_args)
        .arg(&img)
        .arg("512M")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let out = Command::new(env!("CARGO_BIN_EXE_ext4kit"))
        .arg("import")
        .arg(&img)
        .arg(src)
        .arg("/")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "import {mkfs_args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let fsck = e2fsck_fn(&img).unwrap();
    assert!(fsck.is_clean(), "{mkfs_args:?}: e2fsck -fn:\n{}", fsck.output);
    if skip_unless(can_loop_mount()).is_none() {
        return;
    }
    let mnt = LoopMount::ro(&img).unwrap();
    let nanos = !mkfs_args.contains(&"128");
    let opts = CompareOptions {
        root_metadata: false,
        mtime_nanoseconds: nanos,
        ..CompareOptions::default()
    };
    let diffs = compare_trees(src, mnt.path(), opts);
    assert!(
        diffs.is_empty(),
        "{mkfs_args:?}: {} differences:\n{}",
        diffs.len(),
        format_differences(&diffs)
    );
    mnt.unmount().unwrap();
    std::fs::remove_file(&img).unwrap();
}

#[test]
fn imported_trees_read_back_through_the_kernel() {
    if skip_unless(require_tool("mkfs.ext4")).is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    build_tree(
        &src,
        &TreeOptions {
            hole_only_len: 64 << 20,
            ..TreeOptions::small()
        },
    )
    .unwrap();
    import_into(dir.path(), &src, &["-b", "4096"]);
    import_into(dir.path(), &src, &["-b", "1024", "-O", "^metadata_csum,uninit_bg"]);
    import_into(dir.path(), &src, &["-t", "ext3", "-b", "4096", "-I", "128"]);
}

/// An import that runs out of space inside its first commit leaves the
/// image as it was, and says so.
#[test]
fn an_import_that_does_not_fit_changes_nothing() {
    if skip_unless(require_tool("mkfs.ext4")).is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    std::fs::create_dir_all(src.join("sub")).unwrap();
    for i in 0..12 {
        std::fs::write(src.join("sub").join(format!("f{i:02}")), vec![i as u8; 1 << 20]).unwrap();
    }
    let img = dir.path().join("img");
    let out = Command::new("mkfs.ext4")
        .args(["-q", "-F"])
        .arg(&img)
        .arg("8M")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let before = std::fs::read(&img).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_ext4kit"))
        .arg("import")
        .arg(&img)
        .arg(&src)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "12 MiB fit in 8 MiB");
    assert!(err.contains("nothing was imported, the image is as it was"), "{err}");
    assert!(std::fs::read(&img).unwrap() == before, "the image changed: {err}");
    let fsck = e2fsck_fn(&img).unwrap();
    assert!(fsck.is_clean(), "e2fsck -fn:\n{}", fsck.output);
}
