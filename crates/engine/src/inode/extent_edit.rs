//! Editing the leaf extents of a file as a list (`ifork.rst`, "Extent
//! Tree"): splitting extents at range edges (`ext4_split_extent`), flipping
//! a range between initialized and unwritten (`ext4_ext_convert_to_initialized`,
//! the `CONVERT_UNWRITTEN` path of `ext4_ext_map_blocks`), cutting a range
//! out (`ext4_ext_remove_space`), finding the holes of a range, and storing
//! the edited list back as a tree.
//!
//! The list functions are pure; [`Txn::replace_extents`] writes the result
//! by rebuilding the tree (old tree blocks freed first, in the same
//! transaction), which keeps every tree shape valid at the price of
//! rewriting all tree blocks of the file: cheap for the depth-0 and depth-1
//! trees of typical files, linear in the extent count for heavily
//! fragmented ones. Unwritten extents: `ee_len` above 32768 carries the flag,
//! so one holds at most 32767 blocks (`EXT_UNWRITTEN_MAX_LEN`).

use ext4kit_format::extent::{EXT_INIT_MAX_LEN, Extent};

use crate::error::Result;
use crate::inode::Inode;
use crate::inode::extent_write::{charge_blocks, init_root};
use crate::txn::Txn;

/// Longest unwritten extent (`EXT_UNWRITTEN_MAX_LEN`).
pub(crate) const UNWRITTEN_MAX_LEN: u16 = EXT_INIT_MAX_LEN - 1;

/// One past the last logical block of `e`.
pub(crate) fn end_of(e: &Extent) -> u64 {
    u64::from(e.logical) + u64::from(e.len)
}

fn max_len(unwritten: bool) -> u64 {
    if unwritten {
        u64::from(UNWRITTEN_MAX_LEN)
    } else {
        u64::from(EXT_INIT_MAX_LEN)
    }
}

/// Splits the sorted, disjoint `exts` into the parts outside and inside
/// logical blocks `lo..hi`; an extent straddling an edge is cut in two
/// (same physical run, same flag).
pub(crate) fn partition(exts: &[Extent], lo: u64, hi: u64) -> (Vec<Extent>, Vec<Extent>) {
    let (mut outside, mut inside) = (Vec::new(), Vec::new());
    for e in exts {
        let (s, t) = (u64::from(e.logical), end_of(e));
        let piece = |a: u64, b: u64| Extent {
            logical: a as u32,
            len: (b - a) as u16,
            physical: e.physical + (a - s),
            unwritten: e.unwritten,
        };
        let (a, b) = (s.max(lo), t.min(hi));
        if a >= b {
            outside.push(*e);
            continue;
        }
        if s < a {
            outside.push(piece(s, a));
        }
        inside.push(piece(a, b));
        if b < t {
            outside.push(piece(b, t));
        }
    }
    outside.sort_by_key(|e| e.logical);
    (outside, inside)
}

/// `exts` with every block of `lo..hi` that is mapped marked unwritten
/// (`true`) or initialized (`false`); holes stay holes.
pub(crate) fn mark(exts: &[Extent], lo: u64, hi: u64, unwritten: bool) -> Vec<Extent> {
    let (mut out, inside) = partition(exts, lo, hi);
    out.extend(inside.into_iter().map(|e| Extent { unwritten, ..e }));
    normalize(out)
}

/// The holes of `lo..hi` in the sorted `exts`, as (first block, count).
pub(crate) fn holes(exts: &[Extent], lo: u64, hi: u64) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    let mut at = lo;
    for e in exts {
        let (s, t) = (u64::from(e.logical), end_of(e));
        if t <= at {
            continue;
        }
        if s >= hi {
            break;
        }
        if s > at {
            out.push((at, s - at));
        }
        at = t;
    }
    if at < hi {
        out.push((at, hi - at));
    }
    out
}

/// Sorts `exts`, merges neighbours that are contiguous in both logical and
/// physical space and share the flag (`ext4_ext_try_to_merge`), and splits
/// unwritten extents longer than 32767 blocks.
pub(crate) fn normalize(mut exts: Vec<Extent>) -> Vec<Extent> {
    exts.sort_by_key(|e| e.logical);
    let mut out: Vec<Extent> = Vec::with_capacity(exts.len());
    for e in exts {
        let mut e = e;
        if let Some(p) = out.last_mut() {
            let joins = p.unwritten == e.unwritten
                && end_of(p) == u64::from(e.logical)
                && p.physical + u64::from(p.len) == e.physical;
            if joins {
                let room = max_len(p.unwritten)
                    .saturating_sub(u64::from(p.len))
                    .min(u64::from(e.len));
                p.len += room as u16;
                e.len -= room as u16;
                e.logical += room as u32;
                e.physical += room;
            }
        }
        let cap = max_len(e.unwritten) as u16;
        while e.len > 0 {
            let take = e.len.min(cap);
            out.push(Extent { len: take, ..e });
            e.len -= take;
            e.logical += u32::from(take);
            e.physical += u64::from(take);
        }
    }
    out
}

impl Txn<'_> {
    /// Stores `exts` (sorted, disjoint, each within its length limit) as
    /// `inode`'s whole extent tree. The old tree blocks are freed first, so
    /// the new tree needs new space only when it has more nodes than the
    /// old one; `i_blocks` follows the tree-block count. Data blocks are
    /// the caller's to free or charge. The caller writes the inode.
    pub(crate) fn replace_extents(&mut self, inode: &mut Inode, exts: Vec<Extent>) -> Result<()> {
        let (old, tree_blocks) = self.tree_contents(inode)?;
        if old == exts {
            return Ok(());
        }
        for &b in &tree_blocks {
            self.free_blocks(b, 1)?;
            self.forget_block(b);
        }
        let tree = self.meta_charge(tree_blocks.len() as i64);
        charge_blocks(&mut inode.raw, -tree, self.fs.geo.block_size);
        init_root(&mut inode.raw);
        exts.into_iter().try_for_each(|e| self.insert_extent(inode, e))
    }

    /// Allocates unwritten extents over the holes of `lo..hi` in `exts`
    /// (kept sorted), each at most 32767 blocks, near the preceding
    /// extent; charges them to `i_blocks`. Nothing is stored yet. Under
    /// bigalloc the file's data policy sizes and places the clusters (its
    /// window under mballoc, as the kernel's fallocate goes through
    /// `ext4_mb_normalize_request`), so a large range is as contiguous as
    /// a file written in order.
    ///
    /// # Errors
    /// [`crate::Error::NoSpace`] (the transaction is then dropped whole).
    pub(crate) fn alloc_unwritten(
        &mut self,
        inode: &mut Inode,
        exts: &mut Vec<Extent>,
        lo: u64,
        hi: u64,
    ) -> Result<()> {
        let bs = self.fs.geo.block_size;
        for (start, count) in holes(exts, lo, hi) {
            let mut goal = match exts.iter().rev().find(|e| u64::from(e.logical) < start) {
                Some(p) => p.physical + (start - u64::from(p.logical)),
                None => self
                    .fs
                    .geo
                    .group_first_block((inode.ino - 1) / self.fs.geo.inodes_per_group),
            };
            let mut at = start;
            while at < start + count {
                let want = (start + count - at).min(u64::from(UNWRITTEN_MAX_LEN)) as u32;
                let (phys, got, charge) = if self.bigalloc() {
                    let req = crate::alloc::ClusterRequest {
                        lblk: at,
                        want,
                        goal,
                        left: exts
                            .iter()
                            .filter(|e| u64::from(e.logical) < at && e.len > 0)
                            .map(|e| (u64::from(e.logical) + u64::from(e.len) - 1).min(at - 1))
                            .max(),
                        next: exts.iter().map(|e| u64::from(e.logical)).filter(|&l| l > at).min(),
                    };
                    self.alloc_clustered_for(inode, exts, req)?
                } else {
                    let (phys, got) = self.alloc_blocks(goal, want)?;
                    (phys, got, i64::from(got))
                };
                exts.push(Extent {
                    logical: at as u32,
                    len: got as u16,
                    physical: phys,
                    unwritten: true,
                });
                charge_blocks(&mut inode.raw, charge, bs);
                at += u64::from(got);
                goal = phys + u64::from(got);
            }
        }
        exts.sort_by_key(|e| e.logical);
        Ok(())
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
    fn partition_cuts_straddling_extents() {
        let v = [ext(0, 10, 100, false), ext(20, 10, 200, true)];
        let (out, inside) = partition(&v, 5, 25);
        assert_eq!(out, vec![ext(0, 5, 100, false), ext(25, 5, 205, true)]);
        assert_eq!(inside, vec![ext(5, 5, 105, false), ext(20, 5, 200, true)]);
    }

    #[test]
    fn mark_splits_into_three_and_merges_back() {
        let v = [ext(0, 10, 100, true)];
        let m = mark(&v, 3, 6, false);
        assert_eq!(
            m,
            vec![ext(0, 3, 100, true), ext(3, 3, 103, false), ext(6, 4, 106, true)]
        );
        assert_eq!(mark(&m, 0, 10, true), vec![ext(0, 10, 100, true)]);
    }

    #[test]
    fn normalize_respects_unwritten_limit() {
        let v = vec![ext(0, 32768, 1000, false)];
        let m = mark(&v, 0, 32768, true);
        assert_eq!(m, vec![ext(0, 32767, 1000, true), ext(32767, 1, 33767, true)]);
        assert_eq!(mark(&m, 0, 32768, false), v);
    }

    #[test]
    fn holes_between_and_around() {
        let v = [ext(2, 2, 50, false), ext(6, 1, 60, true)];
        assert_eq!(holes(&v, 0, 10), vec![(0, 2), (4, 2), (7, 3)]);
        assert_eq!(holes(&v, 2, 4), vec![]);
        assert_eq!(holes(&v, 3, 7), vec![(4, 2)]);
    }
}
