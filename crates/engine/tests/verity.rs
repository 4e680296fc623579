//! fs-verity (`-O verity`): `enable_verity` builds the Merkle tree and
//! descriptor past EOF; reads verify every block (EIO naming the file and
//! block when a data or tree block is changed behind our back); the file
//! digest matches one computed independently in Python's `hashlib` from
//! fsverity.rst's definition; verity files refuse data changes with EPERM
//! while the rest of the image writes normally; deleting one frees its
//! tree. Every image ends e2fsck-clean.

mod common;

use std::os::unix::fs::FileExt;
use std::path::Path;

use common::{mkfs, open_rw, run};
use ext4kit_engine::verity::VerityOptions;
use ext4kit_engine::{Attr, Error, FallocMode, Filesystem, NodeKind, ROOT_INO, SetAttr};
use ext4kit_format::verity::HashAlgorithm;
use ext4kit_testkit::tools::assert_fsck_clean;

const ATTR: Attr = Attr {
    perm: 0o644,
    uid: 0,
    gid: 0,
};

/// Deterministic, block-distinct content.
fn content(len: usize, seed: u32) -> Vec<u8> {
    let mut x = seed.wrapping_mul(2_654_435_761).max(1);
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect()
}

/// An image with `-O verity` and files `big` (600000 bytes), `one` (one
/// block), `small` (6 bytes), `empty`.
fn image(dir: &Path, block: &str) -> Option<std::path::PathBuf> {
    let src = dir.join("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("big"), content(600_000, 1)).unwrap();
    std::fs::write(src.join("one"), content(block.parse().unwrap(), 2)).unwrap();
    std::fs::write(src.join("small"), b"hello\n").unwrap();
    std::fs::write(src.join("empty"), b"").unwrap();
    std::fs::write(src.join("other"), b"plain file").unwrap();
    mkfs(dir, Some(&src), &["-O", "verity", "-b", block], "32M")
}

fn ino(fs: &Filesystem, name: &str) -> u32 {
    fs.resolve(format!("/{name}").as_bytes()).unwrap().ino
}

fn read_all(fs: &Filesystem, ino: u32) -> Result<Vec<u8>, Error> {
    let mut out = Vec::new();
    let mut buf = vec![0u8; 5000]; // not a block multiple: partial blocks at both ends
    loop {
        let n = fs.read_file_at(ino, out.len() as u64, &mut buf)?;
        if n == 0 {
            return Ok(out);
        }
        out.extend_from_slice(&buf[..n]);
    }
}

/// The fs-verity digest of `data` by fsverity.rst's definition, in Python.
fn python_digest(data: &Path, block: u32, salt: &str, alg: &str) -> Option<String> {
    const SCRIPT: &str = r#"
import hashlib, struct, sys
data = open(sys.argv[1], 'rb').read(); bs = int(sys.argv[2]); salt = bytes.fromhex(sys.argv[3])
alg = getattr(hashlib, sys.argv[4]); num = 1 if sys.argv[4] == 'sha256' else 2
pad = salt + b'\0' * (-len(salt) % alg().block_size) if salt else b''
h = lambda b: alg(pad + b).digest()
blocks = [data[i:i + bs].ljust(bs, b'\0') for i in range(0, len(data), bs)]
level = [h(b) for b in blocks]
while len(level) > 1:
    raw = b''.join(level)
    level = [h(raw[i:i + bs].ljust(bs, b'\0')) for i in range(0, len(raw), bs)]
root = level[0] if level else b''
desc = struct.pack('<BBBBIQ64s32s144x', 1, num, bs.bit_length() - 1, len(salt), 0, len(data), root, salt)
print(alg(desc).hexdigest())
"#;
    let out = std::process::Command::new("python3")
        .args(["-c", SCRIPT, data.to_str()?, &block.to_string(), salt, alg])
        .output()
        .ok()?;
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    Some(String::from_utf8(out.stdout).unwrap().trim().to_string())
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[test]
fn enable_then_read_and_digest() {
    let dir = tempfile::tempdir().unwrap();
    let Some(img) = image(dir.path(), "4096") else { return };
    let fs = open_rw(&img);
    assert_eq!(fs.read_only_reason(), None, "a verity image opens read-write");
    let salted = VerityOptions {
        salt: vec![0xab, 0xcd, 0x01],
        ..VerityOptions::default()
    };
    for (name, opts) in [
        ("big", &salted),
        ("one", &VerityOptions::default()),
        ("small", &VerityOptions::default()),
        ("empty", &VerityOptions::default()),
    ] {
        fs.enable_verity(ino(&fs, name), opts).unwrap();
    }
    let e = fs.enable_verity(ino(&fs, "big"), &salted).unwrap_err();
    assert_eq!(e.errno(), libc::EEXIST, "{e}");
    fs.unmount().unwrap();
    assert_fsck_clean(&img).unwrap();
    let stat = run("debugfs", &["-R", "stat /big", img.to_str().unwrap()]);
    let flags = stat
        .split("Flags: 0x")
        .nth(1)
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap();
    assert_ne!(u32::from_str_radix(flags, 16).unwrap() & 0x10_0000, 0, "{stat}");

    let fs = open_rw(&img);
    for name in ["big", "one", "small", "empty"] {
        let want = std::fs::read(dir.path().join("src").join(name)).unwrap();
        let i = ino(&fs, name);
        assert_eq!(read_all(&fs, i).unwrap(), want, "{name}");
        let (alg, d) = fs.verity_digest(i).unwrap();
        assert_eq!(alg, HashAlgorithm::Sha256);
        let salt = if name == "big" { "abcd01" } else { "" };
        let Some(py) = python_digest(&dir.path().join("src").join(name), 4096, salt, "sha256") else {
            ext4kit_testkit::skipped!("python3 is not installed");
            assert!(std::env::var_os("CI").is_none(), "CI must have python3");
            return;
        };
        assert_eq!(hex(&d), py, "{name}");
    }
    fs.unmount().unwrap();
    assert_fsck_clean(&img).unwrap();
}

/// Physical block of logical block `lblk` of `/name` (debugfs `bmap`).
fn bmap(img: &Path, name: &str, lblk: u64) -> u64 {
    let out = run(
        "debugfs",
        &["-R", &format!("bmap /{name} {lblk}"), img.to_str().unwrap()],
    );
    out.trim().parse().unwrap()
}

fn flip(img: &Path, byte: u64) {
    let f = std::fs::OpenOptions::new().read(true).write(true).open(img).unwrap();
    let mut b = [0u8];
    f.read_exact_at(&mut b, byte).unwrap();
    f.write_all_at(&[b[0] ^ 0x5a], byte).unwrap();
}

#[test]
fn changed_data_or_tree_block_reads_eio() {
    let dir = tempfile::tempdir().unwrap();
    let Some(img) = image(dir.path(), "1024") else { return };
    let fs = open_rw(&img);
    let big = ino(&fs, "big");
    fs.enable_verity(big, &VerityOptions::default()).unwrap();
    fs.unmount().unwrap();
    let want = std::fs::read(dir.path().join("src/big")).unwrap();

    // Data block 3 changed: reading it fails, reading before it works.
    let data = bmap(&img, "big", 3) * 1024 + 100;
    flip(&img, data);
    let fs = open_rw(&img);
    let mut buf = vec![0u8; 3072];
    assert_eq!(fs.read_file_at(big, 0, &mut buf).unwrap(), 3072);
    assert_eq!(buf, want[..3072]);
    let e = fs.read_file_at(big, 3000, &mut buf).unwrap_err();
    assert_eq!(e.errno(), libc::EIO, "{e}");
    let msg = e.to_string();
    assert!(
        msg.contains(&format!("inode {big}")) && msg.contains("data block 3"),
        "{msg}"
    );
    drop(fs);
    flip(&img, data);

    // 600000 bytes / 1 KiB = 586 blocks, 32 hashes a block: levels of 19
    // and 1 blocks; tree block 0 (the root-most level) at the first
    // 64 KiB boundary past the data, byte 655360.
    let tree = bmap(&img, "big", 640) * 1024 + 7;
    flip(&img, tree);
    let fs = open_rw(&img);
    let e = fs.read_file_at(big, 0, &mut buf).unwrap_err();
    assert_eq!(e.errno(), libc::EIO, "{e}");
    assert!(e.to_string().contains("in Merkle tree block 0"), "{e}");
    drop(fs);
    flip(&img, tree);
    let fs = open_rw(&img);
    assert_eq!(read_all(&fs, big).unwrap(), want);
    drop(fs);
    assert_fsck_clean(&img).unwrap();
}

#[test]
fn verity_file_is_immutable_rest_writes() {
    let dir = tempfile::tempdir().unwrap();
    let Some(img) = image(dir.path(), "4096") else { return };
    let fs = open_rw(&img);
    let free_before = fs.statfs().blocks_free;
    let big = ino(&fs, "big");
    fs.enable_verity(big, &VerityOptions::default()).unwrap();
    let eperm = |r: Result<(), Error>, what: &str| {
        let e = r.expect_err(what);
        assert_eq!(e.errno(), libc::EPERM, "{what}: {e}");
    };
    eperm(fs.write(big, 0, b"x").map(drop), "write");
    eperm(fs.write(big, 600_000, b"x").map(drop), "append");
    eperm(fs.truncate(big, 10), "truncate");
    eperm(fs.fallocate(big, 0, 4096, FallocMode::PunchHole), "punch");
    let inode = fs.inode(big).unwrap();
    eperm(fs.check_open(&inode, true, false, false), "open for writing");
    fs.check_open(&inode, false, false, false).unwrap();
    let perm = SetAttr {
        perm: Some(0o600),
        ..SetAttr::default()
    };
    fs.setattr(big, &perm).unwrap();
    let other = ino(&fs, "other");
    fs.write(other, 0, b"rewritten").unwrap();
    let new = fs.create(ROOT_INO, b"new", NodeKind::Regular, ATTR).unwrap();
    fs.write(new.ino, 0, &content(10_000, 3)).unwrap();
    fs.unlink(ROOT_INO, b"new").unwrap();
    fs.unlink(ROOT_INO, b"big").unwrap();
    assert!(
        fs.statfs().blocks_free > free_before,
        "the data and tree blocks of big are free"
    );
    fs.unmount().unwrap();
    assert_fsck_clean(&img).unwrap();
}

#[test]
fn enable_needs_the_feature() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("f"), b"data").unwrap();
    let Some(img) = mkfs(dir.path(), Some(&src), &[], "8M") else {
        return;
    };
    let fs = open_rw(&img);
    let e = fs.enable_verity(ino(&fs, "f"), &VerityOptions::default()).unwrap_err();
    assert_eq!(e.errno(), libc::EOPNOTSUPP, "{e}");
    fs.unmount().unwrap();
    assert_fsck_clean(&img).unwrap();
}

#[test]
fn sha512_with_1k_blocks() {
    let dir = tempfile::tempdir().unwrap();
    let Some(img) = image(dir.path(), "1024") else { return };
    let fs = open_rw(&img);
    let opts = VerityOptions {
        hash: HashAlgorithm::Sha512,
        salt: vec![7; 32],
    };
    let big = ino(&fs, "big");
    fs.enable_verity(big, &opts).unwrap();
    fs.unmount().unwrap();
    assert_fsck_clean(&img).unwrap();
    let fs = open_rw(&img);
    let src = dir.path().join("src/big");
    assert_eq!(read_all(&fs, big).unwrap(), std::fs::read(&src).unwrap());
    let (alg, d) = fs.verity_digest(big).unwrap();
    assert_eq!(alg, HashAlgorithm::Sha512);
    let Some(py) = python_digest(&src, 1024, &"07".repeat(32), "sha512") else {
        ext4kit_testkit::skipped!("python3 is not installed");
        assert!(std::env::var_os("CI").is_none(), "CI must have python3");
        return;
    };
    assert_eq!(hex(&d), py);
}
