//! Copying the block set out: sparse raw (`e2image -r`: each block at its
//! own offset, the rest holes) or QCOW2 (`e2image -Q`). Blocks that read as
//! all zeros are left out of both, as e2image leaves them.

use std::fs::File;
use std::os::unix::fs::FileExt;

use ext4kit_format::qcow2::{self, Layout};

use super::scramble::Scrambler;
use super::{ImageStats, MetadataBlocks};
use crate::error::{Error, Result};
use crate::fs::Filesystem;

/// Blocks read from the image at once.
const CHUNK: u64 = 256;

fn out_err(offset: u64) -> impl FnOnce(std::io::Error) -> Error {
    move |source| Error::Io { offset, source }
}

impl Filesystem {
    /// Writes `set` as a sparse raw image into the empty file `out`, which
    /// ends up the file system's size.
    ///
    /// # Errors
    /// I/O errors reading the image or writing `out`.
    pub fn write_raw_image(&self, set: &MetadataBlocks, out: &File) -> Result<ImageStats> {
        let log = self.geo.block_size_log2;
        let mut stats = self.each_image_block(set, |block, data| {
            let at = block << log;
            out.write_all_at(data, at).map_err(out_err(at))
        })?;
        let size = self.geo.blocks_count << log;
        out.set_len(size).map_err(out_err(size))?;
        stats.file_bytes = size;
        Ok(stats)
    }

    /// Writes `set` as a QCOW2 image (clusters of one block) into the
    /// empty file `out`.
    ///
    /// # Errors
    /// I/O errors reading the image or writing `out`; a block size QCOW2
    /// cannot take.
    pub fn write_qcow2_image(&self, set: &MetadataBlocks, out: &File) -> Result<ImageStats> {
        let bits = self.geo.block_size_log2;
        let size = self.geo.blocks_count << bits;
        let layout = Layout::plan(bits, size, &used_l1(set, bits), set.count())
            .map_err(|e| Error::Unsupported(format!("QCOW2 image of this file system: {e}")))?;
        let cs = layout.header.cluster_size();
        let mut cursor = layout.data_offset;
        // The L2 table being filled: (L1 index, table).
        let mut l2: Option<(u64, Vec<u8>)> = None;
        let flush = |l2: &Option<(u64, Vec<u8>)>| -> Result<()> {
            let Some((l1, table)) = l2 else {
                return Ok(());
            };
            let i = layout.l2_tables.partition_point(|t| t.0 < *l1);
            let at = layout.l2_tables.get(i).filter(|t| t.0 == *l1).map(|t| t.1);
            let at = at.ok_or_else(|| Error::InvalidArgument(format!("no L2 table planned for L1 entry {l1}")))?;
            out.write_all_at(table, at).map_err(out_err(at))
        };
        let mut stats = self.each_image_block(set, |block, data| {
            let (l1, l2i) = layout.header.indexes(block);
            if l2.as_ref().is_none_or(|t| t.0 != l1) {
                flush(&l2)?;
                l2 = Some((l1, vec![0u8; cs as usize]));
            }
            if let Some((_, table)) = &mut l2 {
                qcow2::set_l2_entry(table, l2i, cursor);
            }
            out.write_all_at(data, cursor).map_err(out_err(cursor))?;
            cursor += cs;
            Ok(())
        })?;
        flush(&l2)?;
        write_qcow2_tables(&layout, cursor / cs, out)?;
        out.set_len(cursor).map_err(out_err(cursor))?;
        stats.file_bytes = cursor;
        Ok(stats)
    }

    /// Calls `f` with each non-zero block of `set` in ascending order,
    /// scrambled when asked.
    fn each_image_block(
        &self,
        set: &MetadataBlocks,
        mut f: impl FnMut(u64, &[u8]) -> Result<()>,
    ) -> Result<ImageStats> {
        let mut stats = ImageStats {
            blocks: set.count(),
            ..ImageStats::default()
        };
        (stats.names_scrambled, stats.names_kept) = self.each_set_block(set, false, |block, data| {
            if data.iter().any(|&x| x != 0) {
                f(block, data)?;
                stats.written += 1;
            }
            Ok(())
        })?;
        Ok(stats)
    }

    /// Calls `f` with each block of `set` from `s_first_data_block` on, in
    /// ascending order (or descending), scrambled when asked; returns the
    /// names scrambled and kept. Each chunk is read whole before `f` sees
    /// any of it, so `f` may overwrite where the chunk came from.
    pub(super) fn each_set_block(
        &self,
        set: &MetadataBlocks,
        descending: bool,
        mut f: impl FnMut(u64, &[u8]) -> Result<()>,
    ) -> Result<(u64, u64)> {
        let mut scrambler = (!set.dirs.is_empty()).then(|| Scrambler::new(self, &set.dirs));
        let bs = self.block_size();
        let first = u64::from(self.geo.first_data_block);
        let mut buf = vec![0u8; CHUNK as usize * bs];
        let mut chunks = Vec::new();
        for &(start, len) in &set.runs {
            let (mut b, end) = (start.max(first), start + len);
            while b < end {
                let n = (end - b).min(CHUNK);
                chunks.push((b, n));
                b += n;
            }
        }
        if descending {
            chunks.reverse();
        }
        for (b, n) in chunks {
            let chunk = &mut buf[..n as usize * bs];
            self.read_bytes(b << self.geo.block_size_log2, chunk)?;
            let mut blocks: Vec<(usize, &mut [u8])> = chunk.chunks_exact_mut(bs).enumerate().collect();
            if descending {
                blocks.reverse();
            }
            for (i, data) in blocks {
                let block = b + i as u64;
                if let Some(s) = &mut scrambler {
                    s.block(block, data);
                }
                f(block, data)?;
            }
        }
        Ok(scrambler.map_or((0, 0), |s| (s.scrambled, s.kept)))
    }
}

/// The L1 entries whose range holds a block of `set`, ascending.
fn used_l1(set: &MetadataBlocks, cluster_bits: u32) -> Vec<u64> {
    let per_l2 = 1u64 << (cluster_bits - 3);
    let mut out: Vec<u64> = Vec::new();
    for &(s, n) in &set.runs {
        for l1 in s / per_l2..=(s + n - 1) / per_l2 {
            if out.last() != Some(&l1) {
                out.push(l1);
            }
        }
    }
    out
}

/// Header, L1 table, refcount table and refcount blocks of a file of
/// `clusters` clusters.
fn write_qcow2_tables(layout: &Layout, clusters: u64, out: &File) -> Result<()> {
    let (h, cs) = (&layout.header, layout.header.cluster_size());
    let put = |at: u64, bytes: &[u8]| out.write_all_at(bytes, at).map_err(out_err(at));
    put(0, &h.encode())?;
    put(h.l1_table_offset, &layout.l1_table())?;
    put(h.refcount_table_offset, &layout.refcount_table())?;
    for i in 0..layout.refcount_blocks {
        put(
            layout.refcount_blocks_offset + i * cs,
            &layout.refcount_block(i, clusters),
        )?;
    }
    Ok(())
}
