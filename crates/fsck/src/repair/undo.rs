//! `fsck -z FILE`: before a repair touches the image, every block it will
//! change is saved, as it was, in an undo file that e2fsprogs' `e2undo`
//! replays (`lib/ext2fs/undo_io.c` and `misc/e2undo.c` define the
//! format, "E2UNDO02"):
//!
//! - the file is cut into blocks of the file system's block size;
//! - block 0: the header (magic, key count, where the superblock copy and
//!   the first key block are, both block sizes, the superblock's crc32c,
//!   the "finished" state, the header's own crc32c over its first 508 bytes);
//! - block 1: the superblock the image will have after the repair, with its
//!   magic inverted, so `e2undo` refuses to apply the file to anything else;
//! - from block 2: a key block (magic `0xCADECADE`, its crc32c, then 16-byte
//!   keys: file-system block, crc32c of the saved bytes, their length),
//!   followed by the saved bytes of its keys, then the next key block.
//!
//! Every crc32c here is the raw one seeded with `!0` (`ext2fs_crc32c_le`).

use std::collections::BTreeSet;
use std::fs::File;
use std::io::{self, Write};
use std::path::Path;

use ext4kit_engine::BlockDevice;
use ext4kit_format::superblock::{RawSuperblock, SUPERBLOCK_OFFSET, SUPERBLOCK_SIZE};
use ext4kit_format::undo::{
    E2UNDO_MAX_EXTENT_BLOCKS, E2UNDO_STATE_FINISHED, HEADER_SIZE, UndoHeader, UndoKey, data_crc, encode_key_block,
    keys_per_block, superblock_copy,
};

use super::overlay::{Overlay, PAGE};

/// Longest run of blocks one key may cover.
const MAX_EXTENT_BLOCKS: u64 = E2UNDO_MAX_EXTENT_BLOCKS as u64;

/// What the undo file holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Saved {
    /// File-system blocks saved.
    pub blocks: u64,
    /// Keys (runs of consecutive blocks).
    pub keys: u64,
}

/// Writes to `path` (replacing it) an undo file for the changes in `o`,
/// and makes it durable.
///
/// # Errors
/// Reading the image or writing the file.
pub fn write(path: &Path, o: &Overlay) -> io::Result<Saved> {
    let mut sb_bytes = [0u8; SUPERBLOCK_SIZE];
    o.read_at(SUPERBLOCK_OFFSET, &mut sb_bytes)?;
    let sb = RawSuperblock::parse(&sb_bytes).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))?;
    let bs = 1024u64 << sb.s_log_block_size.get().min(6);
    let runs = runs(&changed_blocks(o, bs));
    let mut out = io::BufWriter::new(File::create(path)?);
    let mut file = vec![vec![0u8; bs as usize]; 2];
    let per_key_block = keys_per_block(bs as u32);
    let mut saved = Saved::default();
    for chunk in runs.chunks(per_key_block) {
        let key_at = file.len();
        file.push(vec![0u8; bs as usize]);
        let mut keys = Vec::with_capacity(chunk.len());
        for &(first, count) in chunk {
            let data = original(o, first * bs, count * bs)?;
            keys.push(UndoKey {
                fs_block: first,
                crc: data_crc(&data),
                size: data.len() as u32,
            });
            file.extend(data.chunks(bs as usize).map(|c| {
                let mut b = c.to_vec();
                b.resize(bs as usize, 0);
                b
            }));
            saved.blocks += count;
        }
        saved.keys += keys.len() as u64;
        file[key_at] = encode_key_block(&keys, bs as u32);
    }
    let (sb_copy, sb_crc) = superblock_copy(&sb_bytes);
    file[1][..SUPERBLOCK_SIZE].copy_from_slice(&sb_copy);
    let header = UndoHeader {
        num_keys: saved.keys,
        super_offset: 1,
        key_offset: 2,
        block_size: bs as u32,
        fs_block_size: bs as u32,
        sb_crc,
        state: E2UNDO_STATE_FINISHED,
        ..UndoHeader::default()
    };
    file[0][..HEADER_SIZE].copy_from_slice(&header.encode());
    for b in &file {
        out.write_all(b)?;
    }
    out.into_inner().map_err(io::IntoInnerError::into_error)?.sync_all()?;
    Ok(saved)
}

/// File-system blocks that hold a changed byte.
fn changed_blocks(o: &Overlay, bs: u64) -> BTreeSet<u64> {
    let len = o.len();
    let mut out = BTreeSet::new();
    for (&p, data) in &o.pages() {
        let (start, end) = (p * PAGE, (p * PAGE + data.len() as u64).min(len));
        out.extend(start / bs..end.div_ceil(bs));
    }
    out
}

/// Consecutive blocks as (first, count), no run longer than one key allows.
fn runs(blocks: &BTreeSet<u64>) -> Vec<(u64, u64)> {
    let mut out: Vec<(u64, u64)> = Vec::new();
    for &b in blocks {
        match out.last_mut() {
            Some((first, count)) if *first + *count == b && *count < MAX_EXTENT_BLOCKS => *count += 1,
            _ => out.push((b, 1)),
        }
    }
    out
}

/// The image's bytes before the repair (short at the end of the device).
fn original(o: &Overlay, at: u64, len: u64) -> io::Result<Vec<u8>> {
    let len = len.min(o.len().saturating_sub(at));
    let mut buf = vec![0u8; len as usize];
    o.base().read_at(at, &mut buf)?;
    Ok(buf)
}

#[cfg(test)]
mod tests {
    use super::runs;

    #[test]
    fn runs_join_neighbours_and_split_long_ones() {
        let blocks = [3u64, 4, 5, 9].into_iter().chain(100..100 + 600).collect();
        assert_eq!(runs(&blocks), vec![(3, 3), (9, 1), (100, 512), (612, 88)]);
    }
}
