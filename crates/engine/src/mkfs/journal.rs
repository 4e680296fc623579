//! The internal journal of a new file system, as pure functions over the
//! geometry, so mkfs and a checker recreating a deleted journal (e2fsck's
//! "Recreate journal") make the same one: its default length
//! (`ext2fs_default_journal_size`), the goal near the middle of the file
//! system (`get_midpoint_journal_block`), and its empty jbd2 superblock
//! (`ext2fs_create_journal_superblock2`).
//!
//! See `Documentation/filesystems/ext4/journal.rst`.

use ext4kit_format::journal::JBD2_MAGIC;

use crate::error::{Error, Result};
use ext4kit_format::journal::superblock::{JOURNAL_SUPERBLOCK_SIZE, RawJournalSuperblock};

/// `h_blocktype` of a version-2 journal superblock.
const JBD2_SUPERBLOCK_V2: u32 = 4;

/// Log blocks per fast-commit block (`EXT2_JOURNAL_TO_FC_BLKS_RATIO`).
pub const JOURNAL_TO_FC_BLOCKS_RATIO: u32 = 64;

/// `JBD2_MIN_JOURNAL_BLOCKS`: the smallest journal a requested size may give.
pub const MIN_JOURNAL_BLOCKS: u32 = 1024;
/// `JBD2_MAX_JOURNAL_BLOCKS`: the largest.
pub const MAX_JOURNAL_BLOCKS: u32 = MIN_JOURNAL_BLOCKS * 10000;

/// A journal size asked for with `-J size=` (MiB) and `-J
/// fast_commit_size=` (KiB), as mke2fs and tune2fs read them; `None` or 0
/// takes the default for the file system's size.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct JournalSize {
    /// `size=`: the log, in MiB.
    pub size_mib: Option<u32>,
    /// `fast_commit_size=`: the fast-commit area, in KiB (only with the
    /// fast_commit feature).
    pub fc_kib: Option<u32>,
}

impl JournalSize {
    /// Parses one `-J` item (`size=N`, `fast_commit_size=N`); `Ok(false)`
    /// for an item that is not a size (`device=`, which the caller handles).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a size that is not a number.
    pub fn parse_item(&mut self, item: &str) -> Result<bool> {
        let (key, value) = item.split_once('=').unwrap_or((item, ""));
        let slot = match key {
            "size" => &mut self.size_mib,
            "fast_commit_size" => &mut self.fc_kib,
            _ => return Ok(false),
        };
        *slot = Some(value.parse().map_err(|_| {
            Error::InvalidArgument(format!(
                "bad journal option {item:?}: size= takes MiB and fast_commit_size= KiB, as whole numbers"
            ))
        })?);
        Ok(true)
    }
}

/// `figure_journal_size`: (log blocks, fast-commit blocks) for a file
/// system of `blocks` blocks of `block_size` bytes with `free` free blocks
/// (as `ext2fs_initialize` or the bitmaps count them). The default is
/// [`default_journal_blocks`] plus a 64th for fast commits; a requested
/// size must total 1024 to 10240000 blocks and at most half the free
/// blocks, as e2fsprogs requires. (0, 0) when the file system is too
/// small for any journal.
///
/// # Errors
/// [`Error::InvalidArgument`] with e2fsprogs' reason for a size out of range.
pub fn figure_journal_blocks(
    req: &JournalSize,
    blocks: u64,
    block_size: u32,
    fast_commit: bool,
    free: u64,
) -> Result<(u32, u32)> {
    let mut log = default_journal_blocks(blocks);
    if log == 0 {
        return Ok((0, 0));
    }
    let mut fc = if fast_commit {
        log / JOURNAL_TO_FC_BLOCKS_RATIO
    } else {
        0
    };
    let size = req.size_mib.unwrap_or(0);
    let fc_kib = req.fc_kib.filter(|_| fast_commit).unwrap_or(0);
    if size == 0 && fc_kib == 0 {
        return Ok((log, fc));
    }
    let to_blocks = |bytes: u64| u32::try_from(bytes / u64::from(block_size)).unwrap_or(u32::MAX);
    if size > 0 {
        log = to_blocks(u64::from(size) << 20);
    }
    if fc_kib > 0 {
        fc = to_blocks(u64::from(fc_kib) << 10);
    }
    let total = u64::from(log) + u64::from(fc);
    if total < u64::from(MIN_JOURNAL_BLOCKS) || total > u64::from(MAX_JOURNAL_BLOCKS) {
        return Err(Error::InvalidArgument(format!(
            "the total requested journal size is {total} blocks; it must be between \
             {MIN_JOURNAL_BLOCKS} and {MAX_JOURNAL_BLOCKS} blocks"
        )));
    }
    if total > free / 2 {
        return Err(Error::InvalidArgument(format!(
            "total journal size too big for the file system: {total} blocks, more than half of the \
             {free} free blocks"
        )));
    }
    Ok((log, fc))
}

/// `ext2fs_default_journal_size`: journal blocks for a file system of
/// `blocks` blocks, whatever the block size; 0 below 2048 blocks, where
/// no journal fits.
pub fn default_journal_blocks(blocks: u64) -> u32 {
    match blocks {
        n if n < 2048 => 0,
        n if n < 32768 => 1024,
        n if n < 256 * 1024 => 4096,
        n if n < 512 * 1024 => 8192,
        n if n < 4096 * 1024 => 16384,
        n if n < 8192 * 1024 => 32768,
        n if n < 16384 * 1024 => 65536,
        n if n < 32768 * 1024 => 131072,
        _ => 262144,
    }
}

/// What the journal's goal depends on.
#[derive(Debug, Clone, Copy)]
pub struct GroupLayout {
    /// `s_blocks_count`.
    pub blocks_count: u64,
    /// `s_first_data_block`.
    pub first_data_block: u32,
    /// `s_blocks_per_group`.
    pub blocks_per_group: u32,
    /// Number of groups.
    pub group_count: u32,
    /// `s_log_groups_per_flex` (0 without flex_bg).
    pub log_groups_per_flex: u8,
}

impl GroupLayout {
    fn group_of(&self, blk: u64) -> u32 {
        let g = blk.saturating_sub(u64::from(self.first_data_block)) / u64::from(self.blocks_per_group.max(1));
        u32::try_from(g)
            .unwrap_or(u32::MAX)
            .min(self.group_count.saturating_sub(1))
    }
}

/// `get_midpoint_journal_block`: the group to start the journal in — of
/// the group holding the middle block and its neighbours, the one with
/// the most free blocks (`free(g)`); with flex_bg, from the start of the
/// middle flex group, skipping full groups.
pub fn midpoint_group(l: &GroupLayout, free: &dyn Fn(u32) -> u64) -> u32 {
    let mut group = l.group_of((l.blocks_count - u64::from(l.first_data_block)) / 2);
    let flex = 1u32 << l.log_groups_per_flex.min(31);
    let start = if l.log_groups_per_flex > 0 && group > flex {
        group &= !(flex - 1);
        while group < l.group_count && free(group) == 0 {
            group += 1;
        }
        if group == l.group_count {
            group = 0;
        }
        group
    } else {
        group.saturating_sub(1)
    };
    let end = if group + 1 < l.group_count { group + 1 } else { group };
    let mut best = start;
    for g in start + 1..=end {
        if free(g) > free(best) {
            best = g;
        }
    }
    best
}

/// The first block of an empty internal journal of `blocks` log blocks
/// and `fc_blocks` fast-commit blocks after them: a version-2 superblock with first block 1, sequence 1, start 0 (nothing
/// to replay), no features, the file system's UUID and one user; the
/// rest of the block zero. The kernel turns on the jbd2 features it
/// wants (checksums, 64bit) when it mounts.
pub fn empty_superblock_block(block_size: u32, blocks: u32, fc_blocks: u32, uuid: &[u8; 16]) -> Vec<u8> {
    let mut head = [0u8; JOURNAL_SUPERBLOCK_SIZE];
    head[0..4].copy_from_slice(&JBD2_MAGIC.to_be_bytes());
    head[4..8].copy_from_slice(&JBD2_SUPERBLOCK_V2.to_be_bytes());
    let mut jsb = RawJournalSuperblock::parse(&head).expect("a v2 header parses");
    jsb.s_blocksize.set(block_size);
    jsb.s_maxlen.set(blocks.saturating_add(fc_blocks));
    jsb.s_num_fc_blks.set(fc_blocks);
    jsb.s_first.set(1);
    jsb.s_sequence.set(1);
    jsb.s_uuid = *uuid;
    jsb.s_nr_users.set(1);
    let mut buf = vec![0u8; (block_size as usize).max(JOURNAL_SUPERBLOCK_SIZE)];
    buf[..JOURNAL_SUPERBLOCK_SIZE].copy_from_slice(&jsb.encode());
    buf
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_follow_e2fsprogs_table() {
        assert_eq!(default_journal_blocks(2047), 0);
        assert_eq!(default_journal_blocks(8192), 1024);
        assert_eq!(default_journal_blocks(65536), 4096);
        assert_eq!(default_journal_blocks(1 << 30), 262144);
    }

    #[test]
    fn requested_sizes_as_figure_journal_size() {
        let req = |size, fc| JournalSize {
            size_mib: size,
            fc_kib: fc,
        };
        // 64 MiB of 1 KiB blocks: default 4096; size=8 gives 8192.
        assert_eq!(
            figure_journal_blocks(&req(None, None), 65536, 1024, false, 60000).unwrap(),
            (4096, 0)
        );
        assert_eq!(
            figure_journal_blocks(&req(None, None), 65536, 1024, true, 60000).unwrap(),
            (4096, 64)
        );
        assert_eq!(
            figure_journal_blocks(&req(Some(8), None), 65536, 1024, false, 60000).unwrap(),
            (8192, 0)
        );
        assert_eq!(
            figure_journal_blocks(&req(Some(8), Some(256)), 65536, 1024, true, 60000).unwrap(),
            (8192, 256)
        );
        // fast_commit_size= without the feature is ignored, as mke2fs does.
        assert_eq!(
            figure_journal_blocks(&req(None, Some(256)), 65536, 1024, false, 60000).unwrap(),
            (4096, 0)
        );
        let small = figure_journal_blocks(&req(Some(1), None), 16384, 4096, false, 16000).unwrap_err();
        assert!(small.to_string().contains("256 blocks"), "{small}");
        let big = figure_journal_blocks(&req(Some(40), None), 16384, 4096, false, 16000).unwrap_err();
        assert!(big.to_string().contains("too big"), "{big}");
        assert_eq!(
            figure_journal_blocks(&req(Some(8), None), 1000, 1024, false, 900).unwrap(),
            (0, 0)
        );
    }

    #[test]
    fn empty_superblock_parses_as_clean_v2() {
        let b = empty_superblock_block(4096, 1024, 0, &[7; 16]);
        let j = RawJournalSuperblock::parse(&b).expect("parses");
        assert!(j.is_v2());
        assert_eq!((j.s_maxlen.get(), j.s_first.get(), j.s_start.get()), (1024, 1, 0));
        assert_eq!((j.s_sequence.get(), j.s_nr_users.get()), (1, 1));
        assert_eq!(j.s_uuid, [7; 16]);
    }

    #[test]
    fn no_superblock_checksum_without_checksum_features() {
        // As jbd2_superblock_csum_set: e2fsck's replay of f_ext_journal
        // leaves s_checksum 0 on a journal without csum v2/v3.
        let b = empty_superblock_block(4096, 1024, 0, &[7; 16]);
        let mut j = RawJournalSuperblock::parse(&b).expect("parses");
        j.set_checksum();
        assert_eq!(j.s_checksum.get(), 0);
    }

    #[test]
    fn midpoint_prefers_the_freer_neighbour() {
        let l = GroupLayout {
            blocks_count: 8 * 8192,
            first_data_block: 0,
            blocks_per_group: 8192,
            group_count: 8,
            log_groups_per_flex: 0,
        };
        assert_eq!(midpoint_group(&l, &|g| if g == 5 { 100 } else { 10 }), 5);
        assert_eq!(midpoint_group(&l, &|_| 10), 3);
    }
}
