//! Planning a defrag: which files qualify (e4defrag's checks), the fewest
//! extents a file's holes allow, the destination runs the allocator would
//! give a donor of the file's size, and how the file's mapped blocks fall
//! into chunks and onto those runs. The list functions are pure; only
//! [`Txn::plan_destination`] asks the allocator, in a transaction that is
//! dropped, so planning changes nothing.

use ext4kit_format::extent::{EXT_INIT_MAX_LEN, Extent};
use ext4kit_format::inode::{FileType, flags as fl};

use super::DefragSkip;
use crate::error::{Error, Result};
use crate::frag::FileFrag;
use crate::inode::Inode;
use crate::inode::extent_edit::end_of;
use crate::txn::Txn;

/// Why `inode` cannot be defragmented, if it cannot: what e4defrag refuses
/// (not a regular file, immutable or append-only, no extents) plus the
/// files whose blocks other structures point at (the journal, quota and
/// orphan-file inodes below or named by the superblock, xattr inodes).
pub(super) fn ineligible(txn: &Txn<'_>, inode: &Inode) -> Result<Option<DefragSkip>> {
    let sb = txn.superblock();
    let special = [
        sb.s_journal_inum.get(),
        sb.s_usr_quota_inum.get(),
        sb.s_grp_quota_inum.get(),
        sb.s_prj_quota_inum.get(),
        sb.s_orphan_file_inum.get(),
    ];
    let raw = &inode.raw;
    let skip = if inode.ino < txn.fs.geo.first_ino || special.contains(&inode.ino) || raw.has_flag(fl::EA_INODE) {
        DefragSkip::Special
    } else if inode.file_type()? != FileType::Regular {
        DefragSkip::NotRegular
    } else if raw.links() == 0 {
        DefragSkip::Removed
    } else if raw.has_flag(fl::IMMUTABLE) || raw.has_flag(fl::VERITY) {
        // A verity file's tree lies past EOF, where a move would not look.
        DefragSkip::Immutable
    } else if raw.has_flag(fl::APPEND) {
        DefragSkip::AppendOnly
    } else if inode.has_inline_data() {
        DefragSkip::InlineData
    } else if !inode.uses_extents() {
        DefragSkip::BlockMapped
    } else {
        return Ok(None);
    };
    Ok(Some(skip))
}

/// `exts` measured as `ext4kit frag` measures a file.
pub(super) fn measure(exts: &[Extent]) -> FileFrag {
    FileFrag::measure(
        exts.iter()
            .map(|e| (u64::from(e.logical), e.physical, u64::from(e.len))),
    )
}

/// The fewest extents the holes of `exts` allow: one per 32768 blocks of
/// each logically contiguous stretch (a hole always starts a new extent,
/// and no single free run the allocator hands out is longer).
pub(super) fn fewest(exts: &[Extent]) -> u64 {
    let max = u64::from(EXT_INIT_MAX_LEN);
    let (mut total, mut open) = (0u64, None::<(u64, u64)>);
    for e in exts {
        open = match open {
            Some((start, end)) if end == u64::from(e.logical) => Some((start, end_of(e))),
            Some((start, end)) => {
                total += (end - start).div_ceil(max);
                Some((u64::from(e.logical), end_of(e)))
            }
            None => Some((u64::from(e.logical), end_of(e))),
        };
    }
    total + open.map_or(0, |(s, e)| (e - s).div_ceil(max))
}

/// Blocks mapped by `exts`.
pub(super) fn mapped(exts: &[Extent]) -> u64 {
    exts.iter().map(|e| u64::from(e.len)).sum()
}

/// Pairs each block of `pieces` (in logical order) with the next block of
/// `dest`: (old piece, the same logical blocks at their destination),
/// pieces split where a destination run ends. `None` when `dest` is short.
pub(super) fn assign(pieces: &[Extent], dest: &[(u64, u64)]) -> Option<Vec<(Extent, Extent)>> {
    let mut runs = dest.iter().copied().filter(|r| r.1 > 0);
    let mut cur = runs.next();
    let mut out = Vec::new();
    for &p in pieces {
        let mut p = p;
        while p.len > 0 {
            let (start, n) = cur?;
            let take = u64::from(p.len).min(n);
            let old = Extent { len: take as u16, ..p };
            out.push((old, Extent { physical: start, ..old }));
            p.logical += take as u32;
            p.physical += take;
            p.len -= take as u16;
            cur = if take < n {
                Some((start + take, n - take))
            } else {
                runs.next()
            };
        }
    }
    Some(out)
}

/// The part of `runs` that mapped blocks `from..to` (counted across the
/// concatenated runs) take.
pub(super) fn slice(runs: &[(u64, u64)], from: u64, to: u64) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    let mut at = 0u64;
    for &(start, n) in runs {
        let (lo, hi) = (from.max(at), to.min(at + n));
        if lo < hi {
            out.push((start + (lo - at), hi - lo));
        }
        at += n;
    }
    out
}

/// One chunk: logical blocks `lo..hi`, holding `blocks` mapped blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Chunk {
    pub lo: u64,
    pub hi: u64,
    pub blocks: u64,
}

/// Cuts the logical space of `exts` into ranges of `per` mapped blocks each
/// (the last one takes the rest); the first starts at 0, the last ends at
/// 2^32, so every mapped block falls in exactly one.
pub(super) fn chunks(exts: &[Extent], per: u64) -> Vec<Chunk> {
    let total = mapped(exts);
    let mut cuts = vec![0u64];
    let mut count = 0u64;
    for e in exts {
        let mut off = 0u64;
        while off < u64::from(e.len) {
            let take = (per - count % per).min(u64::from(e.len) - off);
            (off, count) = (off + take, count + take);
            if count.is_multiple_of(per) && count < total {
                cuts.push(u64::from(e.logical) + off);
            }
        }
    }
    let n = cuts.len() as u64;
    (0..cuts.len())
        .map(|i| Chunk {
            lo: cuts[i],
            hi: cuts.get(i + 1).copied().unwrap_or(crate::inode::map::MAX_LOGICAL),
            blocks: if (i as u64) + 1 < n { per } else { total - per * (n - 1) },
        })
        .collect()
}

impl Txn<'_> {
    /// The runs a donor of `blocks` blocks near `goal` would get
    /// (`EXT4_IOC_MOVE_EXT`'s donor file, fallocated by e4defrag):
    /// requests of up to 32768 blocks — the longest initialized extent —
    /// each taken at the end of the one before when the space there holds
    /// it, else from the first free run of that length, else the longest
    /// ([`Txn::find_free_run`]). `None` when the free space is short of a
    /// copy. The caller drops the transaction.
    pub(super) fn plan_destination(&mut self, goal: u64, blocks: u64) -> Result<Option<Vec<(u64, u64)>>> {
        let (mut runs, mut goal, mut left) = (Vec::new(), goal, blocks);
        while left > 0 {
            let want = left.min(u64::from(EXT_INIT_MAX_LEN)) as u32;
            let at_goal =
                goal < self.fs.geo.blocks_count && self.free_run_at(goal, u64::from(want))? == u64::from(want);
            let found = if at_goal {
                Some((goal, want))
            } else {
                self.find_free_run(goal, want)?
            };
            let Some((start, got)) = found else {
                return Ok(None);
            };
            if !self.take_exact(start, u64::from(got))? {
                return Err(Error::inconsistent(
                    crate::error::Location::Block { block: start, inode: 0 },
                    "a free run just found is taken",
                ));
            }
            runs.push((start, u64::from(got)));
            goal = start + u64::from(got);
            left -= u64::from(got);
        }
        Ok(Some(runs))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ext(logical: u32, len: u16, physical: u64, unwritten: bool) -> Extent {
        Extent {
            logical,
            len,
            physical,
            unwritten,
        }
    }

    #[test]
    fn fewest_counts_stretches_between_holes() {
        let v = [ext(0, 4, 100, false), ext(4, 4, 300, true), ext(20, 2, 50, false)];
        assert_eq!(fewest(&v), 2);
        let big = [
            ext(0, 32768, 0, false),
            ext(32768, 32768, 90000, false),
            ext(65536, 1, 5, false),
        ];
        assert_eq!(fewest(&big), 3);
        assert_eq!(fewest(&[]), 0);
    }

    #[test]
    fn assign_splits_pieces_at_run_ends_and_keeps_flags() {
        let pieces = [ext(0, 3, 100, false), ext(10, 2, 200, true)];
        let pairs = assign(&pieces, &[(500, 4), (900, 10)]).unwrap();
        let new: Vec<Extent> = pairs.iter().map(|p| p.1).collect();
        assert_eq!(
            new,
            vec![ext(0, 3, 500, false), ext(10, 1, 503, true), ext(11, 1, 900, true)]
        );
        assert_eq!(pairs[2].0, ext(11, 1, 201, true));
        assert!(assign(&pieces, &[(500, 4)]).is_none());
    }

    #[test]
    fn slices_and_chunks_cover_every_block_once() {
        let runs = [(100, 5), (200, 5)];
        assert_eq!(slice(&runs, 3, 7), vec![(103, 2), (200, 2)]);
        assert_eq!(slice(&runs, 7, 10), vec![(202, 3)]);
        let v = [ext(0, 3, 1, false), ext(5, 4, 9, false)];
        let c = chunks(&v, 4);
        assert_eq!(
            c,
            vec![
                Chunk {
                    lo: 0,
                    hi: 6,
                    blocks: 4
                },
                Chunk {
                    lo: 6,
                    hi: 1 << 32,
                    blocks: 3
                }
            ]
        );
        assert_eq!(chunks(&v, 7).len(), 1);
        assert_eq!(chunks(&v, 1).len(), 7);
    }
}
