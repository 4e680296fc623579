//! What an image that is not ext2/3/4 looks like, from the signatures
//! other formats keep near the start (the offsets blkid reads), so a
//! refusal can say "an XFS file system" or "a partitioned disk" instead of
//! only "bad magic". A guess for a message, never a decision: nothing here
//! is trusted beyond naming.

/// How many leading bytes [`identify`] looks at.
pub const PROBE_LEN: usize = 72 * 1024;

/// `(offset, signature, what it is)`, checked in order.
const SIGNATURES: &[(usize, &[u8], &str)] = &[
    (0, b"XFSB", "an XFS file system"),
    (0x10040, b"_BHRfS_M", "a Btrfs file system"),
    (0, b"hsqs", "a SquashFS image"),
    (
        0,
        b"LUKS\xba\xbe",
        "a LUKS-encrypted volume (open it with cryptsetup first)",
    ),
    (0x8001, b"CD001", "an ISO 9660 (CD/DVD) image"),
    (3, b"NTFS    ", "an NTFS file system"),
    (3, b"EXFAT   ", "an exFAT file system"),
    (0x52, b"FAT32   ", "a FAT32 file system"),
    (0x36, b"FAT16   ", "a FAT16 file system"),
    (0x36, b"FAT12   ", "a FAT12 file system"),
    (0x1000 - 10, b"SWAPSPACE2", "a Linux swap area"),
    (0x1000 - 10, b"SWAP-SPACE", "a Linux swap area"),
    (
        0,
        b"QFI\xfb",
        "a QCOW2 disk image (convert it with qemu-img convert -O raw)",
    ),
    (
        0,
        b"conectix",
        "a VHD disk image (convert it with qemu-img convert -O raw)",
    ),
    (
        0,
        b"KDMV",
        "a VMDK disk image (convert it with qemu-img convert -O raw)",
    ),
    (
        512,
        b"EFI PART",
        "a disk with a GPT partition table (give the partition, e.g. with losetup -P, not the whole disk)",
    ),
];

/// A name for what `head` (the first [`PROBE_LEN`] bytes of an image, or
/// fewer) holds, when it is recognisably something other than ext2/3/4.
pub fn identify(head: &[u8]) -> Option<&'static str> {
    for &(at, sig, what) in SIGNATURES {
        if head.get(at..at + sig.len()) == Some(sig) {
            return Some(what);
        }
    }
    if has_mbr_partitions(head) {
        return Some(
            "a disk with an MBR partition table (give the partition, e.g. with losetup -P, not the whole disk)",
        );
    }
    if head.len() >= 2048 && head[..2048].iter().all(|&b| b == 0) {
        return Some("zeros where a superblock belongs (an empty or unformatted image: ext4kit mkfs makes one)");
    }
    None
}

/// A boot sector ending in 0x55AA whose partition table has an entry of
/// non-zero type and size (a FAT boot sector has the same ending, so FAT
/// is probed first).
fn has_mbr_partitions(head: &[u8]) -> bool {
    if head.get(510..512) != Some(&[0x55, 0xAA][..]) {
        return false;
    }
    (0..4).any(|i| {
        let e = &head[446 + i * 16..462 + i * 16];
        let sectors = u32::from_le_bytes([e[12], e[13], e[14], e[15]]);
        e[4] != 0 && sectors != 0
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(at: usize, sig: &[u8]) -> Vec<u8> {
        let mut v = vec![0u8; PROBE_LEN];
        v[at..at + sig.len()].copy_from_slice(sig);
        v
    }

    #[test]
    fn other_formats_are_named() {
        assert_eq!(identify(&with(0, b"XFSB")), Some("an XFS file system"));
        assert_eq!(identify(&with(0x10040, b"_BHRfS_M")), Some("a Btrfs file system"));
        assert!(identify(&with(512, b"EFI PART")).unwrap().contains("GPT"));
        let mut mbr = with(510, &[0x55, 0xAA]);
        mbr[446 + 4] = 0x83;
        mbr[446 + 12] = 8;
        assert!(identify(&mbr).unwrap().contains("MBR"));
        assert!(identify(&vec![0u8; 4096]).unwrap().contains("zeros"));
        assert_eq!(identify(&[1u8; 4096]), None);
        assert_eq!(identify(&[]), None, "short input is not indexed past its end");
    }
}
