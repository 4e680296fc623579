//! Quota files rewritten from the counted usage (e2fsck's "Update quota
//! info"): ids new to the file get entries (the tree grows, moving the
//! file to new blocks when its own are too few), stale usage is
//! corrected, stored limits survive, and `e2fsck -fn` agrees.

mod support;

use support::*;

use std::process::Command;

/// An ext4 image with user, group and project quotas, `bs`-byte blocks.
fn quota_fs(bs: &str) -> Vec<u8> {
    let f = tempfile::NamedTempFile::new().unwrap();
    let out = Command::new("mkfs.ext4")
        .args(["-q", "-F", "-O", "quota,project", "-I", "256", "-b", bs])
        .args(["-E", "root_owner=0:0", "-U", "0f2d7e1a-9a3b-4c55-8e61-2b7c5d9e0a11"])
        .arg(f.path())
        .arg("32M")
        .output()
        .expect("mkfs.ext4 is installed (apt-get install e2fsprogs)");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    std::fs::read(f.path()).unwrap()
}

/// Runs debugfs requests (`-w`), returning the image and the last output.
fn debugfs(bytes: &[u8], requests: &[&str]) -> (Vec<u8>, String) {
    let f = temp_image(bytes);
    let src = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(src.path(), vec![b'q'; 20_000]).unwrap();
    let mut last = String::new();
    for r in requests {
        let r = r.replace("SRC", &src.path().display().to_string());
        let out = Command::new("debugfs")
            .args(["-w", "-R", &r])
            .arg(f.path())
            .output()
            .unwrap();
        assert!(out.status.success(), "debugfs {r}");
        last = String::from_utf8_lossy(&out.stdout).into_owned();
    }
    (std::fs::read(f.path()).unwrap(), last)
}

/// Files owned by ids the quota files do not know.
fn new_ids(img: &[u8]) -> Vec<u8> {
    debugfs(
        img,
        &[
            "write SRC f1",
            "sif f1 uid 1000",
            "sif f1 gid 2000",
            "sif f1 projid 77",
            "write SRC f2",
            "sif f2 uid 70000",
        ],
    )
    .0
}

fn repaired(broken: &[u8]) -> Vec<u8> {
    let (code, text) = e2fsck_fn(broken);
    assert_ne!(code, Some(0), "e2fsck sees the stale quota:\n{text}");
    let (out, after) = repair_yes(broken);
    assert!(
        fixed_codes(&out).contains(&"P6_UPDATE_QUOTAS"),
        "{:?}",
        fixed_codes(&out)
    );
    assert_eq!(out.verdict.unfixed_errors(), 0, "{:?}", out.verdict.findings);
    e2fsck_clean(&after);
    after
}

#[test]
fn new_ids_are_added_growing_the_file_on_1k_blocks() {
    repaired(&new_ids(&quota_fs("1024")));
}

#[test]
fn new_ids_are_added_on_4k_blocks() {
    repaired(&new_ids(&quota_fs("4096")));
}

#[test]
fn stale_usage_is_corrected_and_limits_are_kept() {
    let img = new_ids(&quota_fs("4096"));
    let img = repaired(&img);
    // f1 changes hands: uid 1000's entry is left with usage it no longer has.
    let (img, _) = debugfs(&img, &["sif f1 uid 1001"]);
    let img = set_root_limit(img, 12345);
    let after = repaired(&img);
    assert_eq!(root_limit(&after), 12345, "the stored limit survives");
}

/// The user quota file's bytes and, for each quota block, where it is.
fn user_quota_file(img: &[u8]) -> (Vec<u8>, Vec<u64>) {
    let f = temp_image(img);
    let dump = tempfile::NamedTempFile::new().unwrap();
    let req = format!("dump <3> {}", dump.path().display());
    Command::new("debugfs")
        .args(["-R", &req])
        .arg(f.path())
        .output()
        .unwrap();
    let bytes = std::fs::read(dump.path()).unwrap();
    let bs = u32::from_le_bytes(img[1024 + 24..1024 + 28].try_into().unwrap());
    let bs = 1024u64 << bs;
    let mut at = Vec::new();
    for q in 0..bytes.len() as u64 / 1024 {
        let req = format!("bmap <3> {}", q * 1024 / bs);
        let out = Command::new("debugfs")
            .args(["-R", &req])
            .arg(f.path())
            .output()
            .unwrap();
        let pblk: u64 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
        at.push(pblk * bs + q * 1024 % bs);
    }
    (bytes, at)
}

/// Byte offset in the image of uid 0's entry.
fn root_entry(img: &[u8]) -> usize {
    let (file, at) = user_quota_file(img);
    let word =
        |q: usize, i: usize| u32::from_le_bytes(file[q * 1024 + i * 4..q * 1024 + i * 4 + 4].try_into().unwrap());
    let mut q = 1usize;
    for _ in 0..4 {
        q = word(q, 0) as usize;
    }
    let slot = (0..14)
        .find(|k| {
            let e = &file[q * 1024 + 16 + k * 72..q * 1024 + 16 + (k + 1) * 72];
            e[..4] == [0; 4] && e.iter().any(|&b| b != 0)
        })
        .expect("uid 0 has an entry");
    at[q] as usize + 16 + slot * 72
}

fn set_root_limit(mut img: Vec<u8>, v: u64) -> Vec<u8> {
    let e = root_entry(&img);
    img[e + 32..e + 40].copy_from_slice(&v.to_le_bytes());
    img
}

fn root_limit(img: &[u8]) -> u64 {
    let e = root_entry(img);
    u64::from_le_bytes(img[e + 32..e + 40].try_into().unwrap())
}
