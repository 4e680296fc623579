//! The editing subcommands end to end: each changes the image as asked, the
//! image stays `e2fsck -fn` clean, and `ext4kit cat`/`ls` (and the kernel,
//! as root) read the result back.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

use ext4kit_testkit::mount::{LoopMount, can_loop_mount};
use ext4kit_testkit::tools::{e2fsck_fn, require_tool, skip_unless};

fn ext4kit(img: &Path, args: &[&str], stdin: Option<&[u8]>) -> String {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ext4kit"));
    cmd.arg(args[0])
        .arg(img)
        .args(&args[1..])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("spawn ext4kit");
    let mut input = child.stdin.take().expect("stdin");
    if let Some(data) = stdin {
        input.write_all(data).expect("feed stdin");
    }
    drop(input);
    let out = child.wait_with_output().expect("wait");
    assert!(
        out.status.success(),
        "ext4kit {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn edit_commands_keep_the_image_clean() {
    if skip_unless(require_tool("mkfs.ext4")).is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("img");
    let out = Command::new("mkfs.ext4")
        .args(["-q", "-F"])
        .arg(&img)
        .arg("32M")
        .output()
        .unwrap();
    assert!(out.status.success());
    let data: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
    ext4kit(&img, &["mkdir", "-p", "/a/b/c"], None);
    ext4kit(&img, &["write", "/a/b/data"], Some(&data));
    ext4kit(&img, &["write", "/a/b/data", "--offset", "10"], Some(b"PATCH"));
    ext4kit(&img, &["ln", "/a/b/data", "/a/hard"], None);
    ext4kit(&img, &["ln", "-s", "b/data", "/a/soft"], None);
    ext4kit(&img, &["touch", "/a/empty"], None);
    ext4kit(&img, &["chmod", "600", "/a/empty"], None);
    ext4kit(&img, &["chown", "123:456", "/a/empty"], None);
    ext4kit(&img, &["mkdir", "/gone"], None);
    ext4kit(&img, &["write", "/gone/x"], Some(b"x"));
    ext4kit(&img, &["rm", "-r", "/gone"], None);
    ext4kit(&img, &["mkdir", "/m"], None);
    ext4kit(&img, &["mv", "/a/b/c", "/m"], None);
    ext4kit(&img, &["mv", "/a/empty", "/m/renamed"], None);
    let fsck = e2fsck_fn(&img).unwrap();
    assert!(fsck.is_clean(), "e2fsck -fn:\n{}", fsck.output);
    let mut want = data.clone();
    want[10..15].copy_from_slice(b"PATCH");
    let cat = Command::new(env!("CARGO_BIN_EXE_ext4kit"))
        .args(["cat"])
        .arg(&img)
        .arg("/a/soft")
        .output()
        .unwrap();
    assert_eq!(cat.stdout, want);
    let ls = ext4kit(&img, &["ls", "-l", "/a"], None);
    assert!(!ls.contains("empty"), "{ls}");
    let stat = ext4kit(&img, &["stat", "/a/hard"], None);
    assert!(stat.contains("Size: 3000000   Links: 2"), "{stat}");
    assert!(!ext4kit(&img, &["ls", "/"], None).contains("gone"));
    let m = ext4kit(&img, &["ls", "/m"], None);
    assert_eq!(m.lines().collect::<Vec<_>>(), vec!["c", "renamed"], "{m}");
    if skip_unless(can_loop_mount()).is_some() {
        let mnt = LoopMount::ro(&img).unwrap();
        assert_eq!(std::fs::read(mnt.path().join("a/hard")).unwrap(), want);
        assert!(mnt.path().join("m/c").is_dir());
        let renamed = std::fs::metadata(mnt.path().join("m/renamed")).unwrap();
        use std::os::unix::fs::MetadataExt;
        assert_eq!(
            (renamed.mode() & 0o777, renamed.uid(), renamed.gid()),
            (0o600, 123, 456)
        );
        mnt.unmount().unwrap();
    }
}

/// Runs `ext4kit CMD IMG ARGS…` and returns its output, whatever its status.
fn try_ext4kit(img: &Path, args: &[&str], stdin: Option<&[u8]>) -> std::process::Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_ext4kit"))
        .arg(args[0])
        .arg(img)
        .args(&args[1..])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn ext4kit");
    let mut input = child.stdin.take().expect("stdin");
    if let Some(data) = stdin {
        // The command may stop reading at an error: a broken pipe is expected then.
        let _ = input.write_all(data);
    }
    drop(input);
    child.wait_with_output().expect("wait")
}

/// A fresh `mkfs.ext4` image of `size`; `None` (skipped) without mkfs.ext4.
fn mke2fs(dir: &Path, size: &str) -> Option<std::path::PathBuf> {
    skip_unless(require_tool("mkfs.ext4"))?;
    let img = dir.join("img");
    let out = Command::new("mkfs.ext4")
        .args(["-q", "-F"])
        .arg(&img)
        .arg(size)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    Some(img)
}

fn assert_fsck_clean(img: &Path) {
    let fsck = e2fsck_fn(img).unwrap();
    assert!(fsck.is_clean(), "e2fsck -fn:\n{}", fsck.output);
}

/// `rm` of a path ending in `.` or `..`, or of `/`, is refused before the
/// image is touched — alone or after valid paths (GNU rm: "refusing to
/// remove '.' or '..' directory"); it used to empty the directory first.
#[test]
fn rm_refuses_dot_dotdot_and_root_before_any_change() {
    let dir = tempfile::tempdir().unwrap();
    let Some(img) = mke2fs(dir.path(), "16M") else { return };
    ext4kit(&img, &["mkdir", "-p", "/d/e/f"], None);
    ext4kit(&img, &["write", "/d/e/file"], Some(b"kept"));
    ext4kit(&img, &["write", "/top"], Some(b"kept too"));
    let before = std::fs::read(&img).unwrap();
    for args in [
        &["rm", "-r", "/.."][..],
        &["rm", "-r", "/."],
        &["rm", "-r", "/d/."],
        &["rm", "-r", "/d/e/.."],
        &["rm", "-r", "/d/e/../"],
        &["rm", "-r", "/"],
        &["rm", "-rd", "/d/e/f/.."],
        &["rm", "-r", "/top", "/d/e", "/.."],
        &["rm", "/top", "/missing"],
        &["rm", "/top", "/d"],
    ] {
        let out = try_ext4kit(&img, args, None);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} succeeded");
        assert!(err.starts_with("ext4kit: "), "{args:?}: {err}");
        if args.iter().any(|a| a.ends_with('.') || a.ends_with("./")) {
            assert!(err.contains("refusing to remove '.' or '..'"), "{args:?}: {err}");
        }
        assert!(
            std::fs::read(&img).unwrap() == before,
            "{args:?} changed the image: {err}"
        );
    }
    assert_fsck_clean(&img);
    // Nested and repeated paths are fine: what an earlier one removed is done.
    ext4kit(&img, &["rm", "-r", "/d", "/d/e", "/d/e/file", "/top", "/top"], None);
    assert_eq!(ext4kit(&img, &["ls", "/"], None).trim(), "lost+found");
    assert_fsck_clean(&img);
}

/// Each edit command resolves every path before its first change: a bad
/// path anywhere in the request leaves the image as it was.
#[test]
fn edits_check_every_path_before_the_first_change() {
    let dir = tempfile::tempdir().unwrap();
    let Some(img) = mke2fs(dir.path(), "16M") else { return };
    ext4kit(&img, &["write", "/f"], Some(b"f"));
    let before = std::fs::read(&img).unwrap();
    for args in [
        &["mkdir", "/x", "/y/z"][..],
        &["mkdir", "/x", "/x"],
        &["mkdir", "/x", "/f"],
        &["mkdir", "-p", "/x/y", "/f/g"],
        &["mkdir", "/x/.."],
        &["touch", "/new", "/missing/z"],
        &["touch", "/new", "/f/.."],
        &["chmod", "600", "/f", "/missing"],
        &["chmod", "600", "/f", "/."],
        &["chown", "1:1", "/f", "/missing"],
        &["ln", "-s", "t", "/f/.."],
        &["ln", "/f", "/."],
        &["mv", "/f", "/.."],
        &["mv", "/.", "/g"],
        &["write", "/f/.."],
    ] {
        let out = try_ext4kit(&img, args, Some(b"data"));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} succeeded");
        assert!(err.starts_with("ext4kit: "), "{args:?}: {err}");
        assert!(
            std::fs::read(&img).unwrap() == before,
            "{args:?} changed the image: {err}"
        );
    }
    // A path made earlier in the same request counts as there.
    ext4kit(&img, &["mkdir", "/p", "/p/q", "/p/q/r"], None);
    assert!(ext4kit(&img, &["ls", "/p/q"], None).contains('r'));
    assert_fsck_clean(&img);
}

/// Free blocks and inodes as `ext4kit info` reports them.
fn free_counts(img: &Path) -> (String, String) {
    let info = ext4kit(img, &["info"], None);
    let line = |key: &str| {
        info.lines()
            .find(|l| l.trim_start().starts_with(key))
            .unwrap_or_else(|| panic!("no {key} in info:\n{info}"))
            .to_string()
    };
    (line("Free blocks:"), line("Free inodes:"))
}

/// `write` is all or nothing: more data than the image holds fails with
/// ENOSPC named, leaves no partial file, and gives back every block; at
/// `--offset` into an existing file the size is restored. Both for data
/// that fits one batch commit and for more (several commits).
#[test]
fn write_that_runs_out_of_space_leaves_no_partial_file() {
    for (size, data_mib) in [("8M", 20usize), ("80M", 100)] {
        let dir = tempfile::tempdir().unwrap();
        let Some(img) = mke2fs(dir.path(), size) else { return };
        ext4kit(&img, &["write", "/small"], Some(b"0123456789"));
        let before = free_counts(&img);
        let data = vec![b'x'; data_mib << 20];
        let out = try_ext4kit(&img, &["write", "/big"], Some(&data));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "a {data_mib} MiB write into {size} succeeded");
        assert!(err.contains("ENOSPC"), "{err}");
        let ls = ext4kit(&img, &["ls", "/"], None);
        assert!(!ls.contains("big"), "{size}: a partial file is left:\n{ls}\n{err}");
        assert_eq!(free_counts(&img), before, "{size}: {err}");
        assert_fsck_clean(&img);

        let out = try_ext4kit(&img, &["write", "/small", "--offset", "5"], Some(&data));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success());
        let undone = err.contains("the file is unchanged") || err.contains("the size is 10 as before");
        assert!(err.contains("ENOSPC") && undone, "{err}");
        let stat = ext4kit(&img, &["stat", "/small"], None);
        assert!(stat.contains("Size: 10 "), "{stat}");
        assert_eq!(free_counts(&img), before, "{size}: {err}");
        assert_fsck_clean(&img);
    }
}

/// `rm -r` of a tree whose directory is linked inside itself (a corrupt
/// image: debugfs `ln` makes the loop) stops with the loop named and
/// removes nothing; with the loop unlinked again the image is clean.
#[test]
fn rm_r_of_a_directory_loop_removes_nothing() {
    if skip_unless(require_tool("debugfs")).is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let Some(img) = mke2fs(dir.path(), "8M") else { return };
    ext4kit(&img, &["mkdir", "-p", "/a/b"], None);
    ext4kit(&img, &["write", "/a/b/f"], Some(b"f"));
    let debugfs = |req: &str| ext4kit_testkit::tools::debugfs_write(&img, req).unwrap();
    debugfs("ln /a /a/b/loop");
    let before = std::fs::read(&img).unwrap();
    let out = try_ext4kit(&img, &["rm", "-r", "/a"], None);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("a/b/loop") && err.contains("directory loop") && err.contains("nothing was removed"),
        "{err}"
    );
    assert_eq!(err.matches("directory loop").count(), 1, "{err}");
    assert!(std::fs::read(&img).unwrap() == before, "{err}");
    debugfs("unlink /a/b/loop");
    assert_fsck_clean(&img);
}

/// `stat` of a fast symlink (issue 19's false alarm) shows its target and
/// no mapping: the text in `i_block` is not read as block numbers.
#[test]
fn stat_of_a_fast_symlink_reads_no_block_map() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    std::fs::create_dir(&src).unwrap();
    std::os::unix::fs::symlink("target-name", src.join("link")).unwrap();
    std::os::unix::fs::symlink("a", src.join("short")).unwrap();
    let img = dir.path().join("s.img");
    let Some(mkfs) = skip_unless(require_tool("mkfs.ext4")) else {
        return;
    };
    let out = Command::new(mkfs)
        .args(["-q", "-F", "-d"])
        .arg(&src)
        .arg(&img)
        .arg("16M")
        .output()
        .unwrap();
    assert!(out.status.success());
    for (path, target) in [("/link", "target-name"), ("/short", "a")] {
        let out = try_ext4kit(&img, &["stat", path], None);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{path}: {}", String::from_utf8_lossy(&out.stderr));
        assert!(text.contains(&format!("Link target: {target}")), "{text}");
        assert!(text.contains("Fast symlink") && !text.contains("Block map"), "{text}");
    }
    assert_fsck_clean(&img);
}

/// `ext4kit fallocate` with fallocate(1)'s options: collapse and insert
/// range (which a FUSE mount cannot pass), punch hole and keep-size
/// preallocation change the file as the kernel would; a collapse that is
/// not block-aligned is refused; the image stays clean.
#[test]
fn fallocate_collapses_and_inserts_ranges() {
    if skip_unless(require_tool("mkfs.ext4")).is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("img");
    let out = Command::new("mkfs.ext4")
        .args(["-q", "-F", "-b", "4096"])
        .arg(&img)
        .arg("32M")
        .output()
        .unwrap();
    assert!(out.status.success());
    let block = |i: u8| vec![i; 4096];
    let data: Vec<u8> = (1..=8).flat_map(block).collect();
    ext4kit(&img, &["write", "/f"], Some(&data));
    ext4kit(&img, &["fallocate", "/f", "-c", "-o", "4096", "-l", "8K"], None);
    ext4kit(
        &img,
        &["fallocate", "/f", "--insert-range", "-o", "0", "-l", "4096"],
        None,
    );
    ext4kit(&img, &["fallocate", "/f", "-p", "-o", "8192", "-l", "4096"], None);
    ext4kit(&img, &["fallocate", "/f", "-n", "-o", "1M", "-l", "1M"], None);
    let refused = Command::new(env!("CARGO_BIN_EXE_ext4kit"))
        .args(["fallocate"])
        .arg(&img)
        .args(["/f", "-c", "-o", "100", "-l", "4096"])
        .output()
        .unwrap();
    assert!(!refused.status.success());
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(err.contains("multiples of the cluster size"), "{err}");
    let fsck = e2fsck_fn(&img).unwrap();
    assert!(fsck.is_clean(), "e2fsck -fn:\n{}", fsck.output);
    let mut want = vec![0u8; 4096];
    for i in [1, 0, 5, 6, 7, 8] {
        want.extend(if i == 0 { vec![0; 4096] } else { block(i) });
    }
    let cat = Command::new(env!("CARGO_BIN_EXE_ext4kit"))
        .arg("cat")
        .arg(&img)
        .arg("/f")
        .output()
        .unwrap();
    assert!(cat.stdout == want, "contents after collapse, insert and punch");
}
