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
