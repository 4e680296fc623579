//! What a new user sees on a mistake (issue 19): the cause in plain words
//! and what to do, not an errno or the path twice.

use std::process::Command;

fn ext4kit(args: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_ext4kit")).args(args).output().unwrap();
    (out.status.success(), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn mistakes_are_named_with_what_to_do() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let img = format!("{d}/i.img");
    assert!(ext4kit(&["mkfs", "-q", &img, "8M"]).0);

    let (ok, err) = ext4kit(&["mount", &img, &format!("{d}/no-such-dir")]);
    assert!(!ok && err.contains("does not exist") && err.contains("mkdir"), "{err}");

    let (ok, err) = ext4kit(&["mount", &format!("{d}/missing.img"), d]);
    assert!(
        !ok && err.contains("no such image") && err.contains("--create"),
        "{err}"
    );
    assert_eq!(err.matches("missing.img").count(), 1, "the path once: {err}");

    let (ok, err) = ext4kit(&["mkfs", "-q", d]);
    assert!(
        !ok && err.contains("is a directory") && !err.contains("os error"),
        "{err}"
    );

    let junk = format!("{d}/junk.img");
    std::fs::write(&junk, vec![0u8; 1 << 20]).unwrap();
    let (ok, err) = ext4kit(&["info", &junk]);
    assert!(
        !ok && err.contains("not an ext2/ext3/ext4 file system") && err.contains("ext4kit mkfs"),
        "zeros: {err}"
    );
    for (at, sig, says) in [(0, &b"XFSB"[..], "XFS"), (512, b"EFI PART", "GPT partition table")] {
        let mut bytes = vec![0u8; 1 << 20];
        bytes[at..at + sig.len()].copy_from_slice(sig);
        std::fs::write(&junk, bytes).unwrap();
        let (ok, err) = ext4kit(&["ls", &junk]);
        assert!(!ok && err.contains(says) && !err.contains("corrupt"), "{says}: {err}");
    }
    let damaged = format!("{d}/damaged.img");
    let mut bytes = std::fs::read(&img).unwrap();
    bytes[1080..1082].fill(0);
    std::fs::write(&damaged, bytes).unwrap();
    let (ok, err) = ext4kit(&["ls", &damaged]);
    assert!(!ok && err.contains("fsck -fy"), "a damaged primary superblock: {err}");

    // The refused mounts left the image as mkfs made it.
    let fsck = Command::new("e2fsck")
        .args(["-fn", &img])
        .output()
        .expect("e2fsck (e2fsprogs)");
    assert_eq!(fsck.status.code(), Some(0), "{}", String::from_utf8_lossy(&fsck.stdout));
}
