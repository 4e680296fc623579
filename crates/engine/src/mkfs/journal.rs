//! The internal journal of a new file system, as pure functions over the
//! geometry, so mkfs and a checker recreating a deleted journal (e2fsck's
//! "Recreate journal") make the same one: its default length
//! (`ext2fs_default_journal_size`), the goal near the middle of the file
//! system (`get_midpoint_journal_block`), and its empty jbd2 superblock
//! (`ext2fs_create_journal_superblock2`).
//!
//! See `Documentation/filesystems/ext4/journal.rst`.

use ext4kit_format::journal::JBD2_MAGIC;
use ext4kit_format::journal::superblock::{JOURNAL_SUPERBLOCK_SIZE, RawJournalSuperblock};

/// `h_blocktype` of a version-2 journal superblock.
const JBD2_SUPERBLOCK_V2: u32 = 4;

/// Log blocks per fast-commit block (`EXT2_JOURNAL_TO_FC_BLKS_RATIO`).
pub const JOURNAL_TO_FC_BLOCKS_RATIO: u32 = 64;

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
    fn empty_superblock_parses_as_clean_v2() {
        let b = empty_superblock_block(4096, 1024, 0, &[7; 16]);
        let j = RawJournalSuperblock::parse(&b).expect("parses");
        assert!(j.is_v2());
        assert_eq!((j.s_maxlen.get(), j.s_first.get(), j.s_start.get()), (1024, 1, 0));
        assert_eq!((j.s_sequence.get(), j.s_nr_users.get()), (1, 1));
        assert_eq!(j.s_uuid, [7; 16]);
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
