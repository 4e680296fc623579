//! The file device's gathered write (`pwritev`), which journal commits and
//! checkpoints use for runs of blocks: the bytes land exactly as the joined
//! pieces would, past the kernel's 1,024-buffer limit too, and a read-only
//! device refuses it.

use std::sync::Arc;

use ext4kit_engine::BlockDevice;
use ext4kit_engine::device::FileDevice;

/// Pieces of sizes 1..=4096 from a simple generator, `n` of them.
fn pieces(n: usize) -> Vec<Vec<u8>> {
    let mut x: u32 = 0x9e37_79b9;
    (0..n)
        .map(|i| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            let len = 1 + (x as usize % 4096);
            vec![(i % 251) as u8; len]
        })
        .collect()
}

#[test]
fn gathered_write_equals_joined_pieces() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dev.img");
    std::fs::File::create(&path).unwrap().set_len(16 << 20).unwrap();
    let dev: Arc<dyn BlockDevice> = Arc::new(FileDevice::open(&path, true).unwrap());
    let parts = pieces(2_500);
    let refs: Vec<&[u8]> = parts.iter().map(|p| &p[..]).collect();
    let joined = parts.concat();
    let at = 12_345;
    dev.write_gather(at, &refs).unwrap();
    let mut back = vec![0u8; joined.len()];
    dev.read_at(at, &mut back).unwrap();
    assert!(back == joined, "the gathered write differs from the joined pieces");
    let mut before = vec![1u8; at as usize];
    dev.read_at(0, &mut before).unwrap();
    assert!(before.iter().all(|&b| b == 0), "bytes before the write changed");
    dev.write_gather(0, &[]).unwrap();
}

#[test]
fn read_only_device_refuses_a_gathered_write() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ro.img");
    std::fs::File::create(&path).unwrap().set_len(1 << 20).unwrap();
    let dev = FileDevice::open(&path, false).unwrap();
    let err = dev.write_gather(0, &[&[1u8; 512][..], &[2u8; 512][..]]).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EROFS), "{err}");
    let mut back = [9u8; 1024];
    dev.read_at(0, &mut back).unwrap();
    assert!(back.iter().all(|&b| b == 0), "a refused write changed the file");
}
