//! QCOW2 version 2, as e2image writes metadata images (`e2image -Q`,
//! e2fsprogs `lib/ext2fs/qcow2.h`): a 72-byte big-endian header, an L1
//! table of L2-table offsets, L2 tables of cluster offsets (one cluster per
//! file-system block: `cluster_bits` is the block size's log), and a
//! refcount table of refcount blocks holding one 16-bit count per cluster.
//! No compression, encryption, backing file or snapshots.
//!
//! This module encodes and decodes those structures and plans where they
//! lie in the file; the caller does the reads and writes.

use crate::error::{FormatError, Result};

const STRUCT: &str = "qcow2_header";

/// `QFI\xfb`.
pub const QCOW_MAGIC: u32 = 0x5146_49fb;
/// The version e2image writes and reads.
pub const QCOW_VERSION: u32 = 2;
/// Set in L1 and L2 entries whose cluster has refcount 1.
pub const QCOW_OFLAG_COPIED: u64 = 1 << 63;
/// Set in L2 entries of compressed clusters (never written here).
pub const QCOW_OFLAG_COMPRESSED: u64 = 1 << 62;
/// Bytes of the version-2 header (`struct ext2_qcow2_hdr`).
pub const HEADER_SIZE: usize = 72;

/// The version-2 header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Header {
    /// `cluster_bits`: log2 of the cluster size (9 to 21 are accepted).
    pub cluster_bits: u32,
    /// `size`: bytes of the virtual disk (the file system's size).
    pub size: u64,
    /// `crypt_method` (0: none).
    pub crypt_method: u32,
    /// `l1_size`: entries in the L1 table.
    pub l1_size: u32,
    /// `l1_table_offset`.
    pub l1_table_offset: u64,
    /// `refcount_table_offset`.
    pub refcount_table_offset: u64,
    /// `refcount_table_clusters`.
    pub refcount_table_clusters: u32,
}

impl Header {
    /// The header's 72 bytes (no backing file, no snapshots).
    pub fn encode(&self) -> [u8; HEADER_SIZE] {
        let mut b = [0u8; HEADER_SIZE];
        b[0..4].copy_from_slice(&QCOW_MAGIC.to_be_bytes());
        b[4..8].copy_from_slice(&QCOW_VERSION.to_be_bytes());
        b[20..24].copy_from_slice(&self.cluster_bits.to_be_bytes());
        b[24..32].copy_from_slice(&self.size.to_be_bytes());
        b[32..36].copy_from_slice(&self.crypt_method.to_be_bytes());
        b[36..40].copy_from_slice(&self.l1_size.to_be_bytes());
        b[40..48].copy_from_slice(&self.l1_table_offset.to_be_bytes());
        b[48..56].copy_from_slice(&self.refcount_table_offset.to_be_bytes());
        b[56..60].copy_from_slice(&self.refcount_table_clusters.to_be_bytes());
        b
    }

    /// Decodes and checks a header as `qcow2_write_raw_image` does: magic,
    /// version 2, cluster size 512 B to 2 MiB, aligned L1 table, an L1 no
    /// longer than the disk needs, no encryption and no backing file.
    ///
    /// # Errors
    /// The first field that fails, with its byte offset.
    pub fn parse(b: &[u8]) -> Result<Self> {
        if b.len() < HEADER_SIZE {
            return Err(FormatError::truncated(STRUCT, HEADER_SIZE, b.len()));
        }
        let u32_at = |o: usize| u32::from_be_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
        let u64_at = |o: usize| (u64::from(u32_at(o)) << 32) | u64::from(u32_at(o + 4));
        let bad = |field, off, v: u64| FormatError::invalid(STRUCT, field, off, v);
        if u32_at(0) != QCOW_MAGIC {
            return Err(FormatError::bad_magic(STRUCT, "magic", 0, u32_at(0).into()));
        }
        if u32_at(4) != QCOW_VERSION {
            return Err(bad("version", 4, u32_at(4).into()));
        }
        if u64_at(8) != 0 {
            return Err(bad("backing_file_offset", 8, u64_at(8)));
        }
        let h = Self {
            cluster_bits: u32_at(20),
            size: u64_at(24),
            crypt_method: u32_at(32),
            l1_size: u32_at(36),
            l1_table_offset: u64_at(40),
            refcount_table_offset: u64_at(48),
            refcount_table_clusters: u32_at(56),
        };
        if !(9..=21).contains(&h.cluster_bits) {
            return Err(bad("cluster_bits", 20, h.cluster_bits.into()));
        }
        if h.crypt_method != 0 {
            return Err(bad("crypt_method", 32, h.crypt_method.into()));
        }
        if u64::from(h.l1_size) > h.l1_entries_needed() {
            return Err(bad("l1_size", 36, h.l1_size.into()));
        }
        if h.l1_table_offset == 0 || h.l1_table_offset & (h.cluster_size() - 1) != 0 {
            return Err(bad("l1_table_offset", 40, h.l1_table_offset));
        }
        Ok(h)
    }

    /// Bytes of a cluster.
    pub fn cluster_size(&self) -> u64 {
        1 << self.cluster_bits
    }

    /// Entries of one L2 table (a cluster of 8-byte offsets).
    pub fn l2_entries(&self) -> u64 {
        1 << (self.cluster_bits - 3)
    }

    /// L1 entries that cover `size` bytes.
    pub fn l1_entries_needed(&self) -> u64 {
        let shift = 2 * self.cluster_bits - 3;
        self.size.div_ceil(1 << shift)
    }

    /// The L1 and L2 indexes of virtual cluster `cluster`.
    pub fn indexes(&self, cluster: u64) -> (u64, u64) {
        (cluster / self.l2_entries(), cluster % self.l2_entries())
    }
}

/// The file offset an L1 or L2 entry points to: zero for none.
pub fn entry_offset(entry: u64) -> u64 {
    entry & !(QCOW_OFLAG_COPIED | QCOW_OFLAG_COMPRESSED)
}

/// Where each structure of an image lies, planned before any data is
/// written: header (cluster 0), L1 table, refcount table, refcount blocks,
/// the L2 tables of the L1 entries that will be used, then the data
/// clusters in virtual order. L2 tables precede the data so their offsets
/// stay below the disk size, which e2image's reader requires of them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layout {
    /// The header to write.
    pub header: Header,
    /// File offset of each used L1 entry's L2 table, by L1 index.
    pub l2_tables: Vec<(u64, u64)>,
    /// File offset of the first refcount block.
    pub refcount_blocks_offset: u64,
    /// Refcount blocks reserved.
    pub refcount_blocks: u64,
    /// File offset of the first data cluster.
    pub data_offset: u64,
}

impl Layout {
    /// Plans an image of a `size`-byte disk in clusters of `1 << cluster_bits`
    /// bytes whose data will be at most `max_data` clusters in the L1
    /// entries `used_l1` (ascending, each below the L1 size).
    ///
    /// # Errors
    /// A cluster size outside 512 B to 2 MiB, or an L1 index out of range.
    pub fn plan(cluster_bits: u32, size: u64, used_l1: &[u64], max_data: u64) -> Result<Self> {
        let mut header = Header {
            cluster_bits,
            size,
            ..Header::default()
        };
        if !(9..=21).contains(&cluster_bits) {
            return Err(FormatError::invalid(STRUCT, "cluster_bits", 20, cluster_bits.into()));
        }
        let l1_size = header.l1_entries_needed();
        if let Some(&bad) = used_l1.iter().find(|&&i| i >= l1_size) {
            return Err(FormatError::invalid(STRUCT, "l1_size", 36, bad));
        }
        let cs = header.cluster_size();
        header.l1_size = u32::try_from(l1_size).map_err(|_| FormatError::invalid(STRUCT, "l1_size", 36, l1_size))?;
        header.l1_table_offset = cs;
        let l1_clusters = (l1_size * 8).div_ceil(cs).max(1);
        let fixed = 1 + l1_clusters + used_l1.len() as u64 + max_data;
        // Refcount blocks count themselves and the table that lists them.
        let per_block = cs / 2;
        let (mut rb, mut rt) = (1u64, 1u64);
        loop {
            let total = fixed + rb + rt;
            let (need_rb, need_rt) = (total.div_ceil(per_block), (rb * 8).div_ceil(cs));
            if need_rb <= rb && need_rt <= rt {
                break;
            }
            (rb, rt) = (rb.max(need_rb), rt.max(need_rt));
        }
        header.refcount_table_offset = cs * (1 + l1_clusters);
        header.refcount_table_clusters =
            u32::try_from(rt).map_err(|_| FormatError::invalid(STRUCT, "refcount_table_clusters", 56, rt))?;
        let refcount_blocks_offset = header.refcount_table_offset + rt * cs;
        let l2_start = refcount_blocks_offset + rb * cs;
        let l2_tables = (0u64..).zip(used_l1).map(|(i, &l1)| (l1, l2_start + i * cs)).collect();
        Ok(Self {
            header,
            l2_tables,
            refcount_blocks_offset,
            refcount_blocks: rb,
            data_offset: l2_start + used_l1.len() as u64 * cs,
        })
    }

    /// The L1 table: each used entry points at its L2 table.
    pub fn l1_table(&self) -> Vec<u8> {
        let mut out = vec![0u8; self.header.l1_size as usize * 8];
        for &(i, off) in &self.l2_tables {
            let at = i as usize * 8;
            out[at..at + 8].copy_from_slice(&(off | QCOW_OFLAG_COPIED).to_be_bytes());
        }
        out
    }

    /// The refcount table: the reserved refcount blocks in order, padded to
    /// its clusters.
    pub fn refcount_table(&self) -> Vec<u8> {
        let cs = self.header.cluster_size();
        let mut out = vec![0u8; (u64::from(self.header.refcount_table_clusters) * cs) as usize];
        for i in 0..self.refcount_blocks {
            let off = self.refcount_blocks_offset + i * cs;
            out[i as usize * 8..i as usize * 8 + 8].copy_from_slice(&off.to_be_bytes());
        }
        out
    }

    /// Refcount block `index` of a file of `clusters` clusters, every one
    /// of them used once.
    pub fn refcount_block(&self, index: u64, clusters: u64) -> Vec<u8> {
        let per_block = self.header.cluster_size() / 2;
        let mut out = vec![0u8; self.header.cluster_size() as usize];
        let first = index * per_block;
        for c in 0..clusters.saturating_sub(first).min(per_block) {
            out[c as usize * 2..c as usize * 2 + 2].copy_from_slice(&1u16.to_be_bytes());
        }
        out
    }
}

/// Sets L2 entry `index` of `table` to data at file offset `offset`.
pub fn set_l2_entry(table: &mut [u8], index: u64, offset: u64) {
    let at = index as usize * 8;
    if let Some(e) = table.get_mut(at..at + 8) {
        e.copy_from_slice(&(offset | QCOW_OFLAG_COPIED).to_be_bytes());
    }
}

/// Entry `index` of an L1 or L2 table (zero past its end).
pub fn table_entry(table: &[u8], index: u64) -> u64 {
    let at = index as usize * 8;
    table.get(at..at + 8).map_or(0, |e| {
        u64::from_be_bytes([e[0], e[1], e[2], e[3], e[4], e[5], e[6], e[7]])
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trips_and_rejects_bad_fields() {
        let l = Layout::plan(12, 64 << 20, &[0, 3], 100).unwrap();
        let b = l.header.encode();
        assert_eq!(Header::parse(&b).unwrap(), l.header);
        let mut bad = b;
        bad[23] = 40;
        assert!(Header::parse(&bad).is_err());
        let mut bad = b;
        bad[7] = 3;
        assert!(Header::parse(&bad).is_err());
        assert!(Header::parse(&b[..10]).is_err());
    }

    #[test]
    fn layout_places_structures_in_order_and_counts_refcounts() {
        // 64 MiB in 4 KiB clusters: 16384 clusters, 512 per L2 table, 32 L1 entries.
        let l = Layout::plan(12, 64 << 20, &[0, 31], 20_000).unwrap();
        assert_eq!(l.header.l1_size, 32);
        assert_eq!(l.header.l1_table_offset, 4096);
        assert_eq!(l.header.refcount_table_offset, 8192);
        // 1 + 1 + 2 + 20000 clusters plus the refcount blocks: 2048 per block.
        assert_eq!(l.refcount_blocks, 10);
        assert_eq!(l.l2_tables[1].1, l.l2_tables[0].1 + 4096);
        assert_eq!(l.data_offset, l.l2_tables[1].1 + 4096);
        assert_eq!(table_entry(&l.l1_table(), 31), l.l2_tables[1].1 | QCOW_OFLAG_COPIED);
        assert!(Layout::plan(12, 64 << 20, &[32], 1).is_err());
        let last = l.refcount_block(9, 20_100);
        assert_eq!(table_entry(&last, 0) >> 48, 1);
        assert_eq!(last[(20_100 - 9 * 2048) * 2 + 1], 0);
        assert_eq!(last[(20_099 - 9 * 2048) * 2 + 1], 1);
    }
}
