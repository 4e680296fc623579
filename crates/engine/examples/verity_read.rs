//! Reading a verity file against reading the same bytes from a plain one,
//! for timing the whole process from outside.
//!
//! `verity_read make IMG MIB` writes an image (4 KiB blocks) with `/v`
//! (verity) and `/p` (plain), MIB MiB each of the same bytes;
//! `verity_read read IMG v|p CHUNK_KIB` reads one of them through
//! `read_file_at` in CHUNK_KIB pieces and prints a checksum.
//!
//! `cargo build -p ext4kit-engine --example verity_read`

use ext4kit_engine::device::FileDevice;
use ext4kit_engine::mkfs::{MkfsOptions, mkfs};
use ext4kit_engine::verity::VerityOptions;
use ext4kit_engine::{Attr, Filesystem, NodeKind, OpenOptions, ROOT_INO};

const ATTR: Attr = Attr {
    perm: 0o644,
    uid: 0,
    gid: 0,
};

fn make(img: &str, mib: usize) {
    let f = std::fs::File::create(img).unwrap();
    f.set_len(((2 * mib + 64) << 20) as u64).unwrap();
    drop(f);
    let dev = FileDevice::open(std::path::Path::new(img), true).unwrap();
    let opts = MkfsOptions {
        block_size: Some(4096),
        feature_edits: vec![("verity".into(), true)],
        ..MkfsOptions::default()
    };
    mkfs(&dev, &opts).unwrap();
    let fs = Filesystem::open(Box::new(dev), OpenOptions::default()).unwrap();
    let data: Vec<u8> = (0..mib << 20).map(|i| (i * 7 % 251) as u8).collect();
    for name in [&b"v"[..], b"p"] {
        let ino = fs.create(ROOT_INO, name, NodeKind::Regular, ATTR).unwrap().ino;
        fs.write(ino, 0, &data).unwrap();
    }
    let v = fs.resolve(b"/v").unwrap().ino;
    fs.enable_verity(v, &VerityOptions::default()).unwrap();
    fs.unmount().unwrap();
}

fn read(img: &str, name: &str, chunk_kib: usize) {
    let dev = FileDevice::open(std::path::Path::new(img), false).unwrap();
    let fs = Filesystem::open(Box::new(dev), OpenOptions::default()).unwrap();
    let ino = fs.resolve(format!("/{name}").as_bytes()).unwrap().ino;
    let mut buf = vec![0u8; chunk_kib << 10];
    let (mut off, mut sum) = (0u64, 0u64);
    loop {
        let n = fs.read_file_at(ino, off, &mut buf).unwrap();
        if n == 0 {
            break;
        }
        sum = buf[..n]
            .iter()
            .fold(sum, |s, &b| s.wrapping_mul(31).wrapping_add(u64::from(b)));
        off += n as u64;
    }
    println!("{off} bytes, sum {sum:x}");
}

fn main() {
    let a: Vec<String> = std::env::args().collect();
    match a.get(1).map(String::as_str) {
        Some("make") => make(&a[2], a[3].parse().unwrap()),
        Some("read") => read(&a[2], &a[3], a[4].parse().unwrap()),
        _ => eprintln!("usage: verity_read make IMG MIB | read IMG v|p CHUNK_KIB"),
    }
}
