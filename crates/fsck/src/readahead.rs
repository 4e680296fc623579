//! Read-ahead for pass 2 and pass 5 of a check-only run (issue 17's
//! cold-cache speed). Pass 2 reads every directory block one at a time,
//! in the order pass 1 recorded them (inode, then logical block); pass 5
//! reads every group's block and inode bitmap. With a cold cache each
//! read waits for the disk. While pass 2 runs, [`READERS`] threads read
//! the same blocks in the same order — runs of adjacent blocks in one
//! request — so that they are in the page cache when pass 2 gets there
//! (e2fsck does the same with `posix_fadvise`, in `readahead.c`), then
//! the bitmaps for pass 5. The readers keep nothing: what they read goes
//! to one reused buffer each; the kernel's page cache holds the blocks.
//! A reader that fails to read a run goes on with the next one (pass 2
//! then meets the error itself and reports it).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use ext4kit_engine::BlockDevice;

use crate::state::{Ctx, Mode};

/// Threads reading ahead. Each mostly waits for the disk, so there may
/// be more than cores: they keep that many requests in flight.
const READERS: usize = 4;
/// Most blocks one request reads.
const MAX_RUN: u64 = 64;

/// A run of adjacent blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Run {
    start: u64,
    len: u64,
}

/// Runs pass 2's body `f` with the read-ahead going, when the run is a
/// check on more than one thread ([`Ctx::threads`]). When `f` is done the
/// readers skip what is left of the directory blocks and finish the
/// bitmaps (unless the check was cancelled).
pub fn during_pass2<R>(ctx: &mut Ctx, f: impl FnOnce(&mut Ctx) -> R) -> R {
    if ctx.mode != Mode::Check || ctx.threads < 2 {
        return f(ctx);
    }
    let mut runs = coalesce(ctx.dblocks.iter().map(|b| b.pblk), ctx.fs.geo.blocks_count);
    let dir_runs = runs.len();
    let mut bitmaps: Vec<u64> = ctx
        .fs
        .groups
        .iter()
        .flat_map(|gd| [gd.block_bitmap(), gd.inode_bitmap()])
        .collect();
    bitmaps.sort_unstable();
    runs.extend(coalesce(bitmaps.into_iter(), ctx.fs.geo.blocks_count));
    let dev = ctx.fs.dev;
    let bs = ctx.fs.geo.block_size;
    let next = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        for _ in 0..READERS {
            s.spawn(|| read_runs(dev, bs, &runs, &next, &stop));
        }
        let r = f(ctx);
        next.fetch_max(dir_runs, Ordering::Relaxed);
        if ctx.cancelled() {
            stop.store(true, Ordering::Relaxed);
        }
        r
    })
}

/// Blocks `blocks` (0 is a hole; past `blocks_count` is skipped) as runs
/// of adjacent blocks, in the order given.
fn coalesce(blocks: impl Iterator<Item = u64>, blocks_count: u64) -> Vec<Run> {
    let mut out: Vec<Run> = Vec::new();
    for b in blocks.filter(|&b| b != 0 && b < blocks_count) {
        match out.last_mut() {
            Some(r) if r.start + r.len == b && r.len < MAX_RUN => r.len += 1,
            _ => out.push(Run { start: b, len: 1 }),
        }
    }
    out
}

/// Takes runs off the shared list in order until it is done or `stop`.
fn read_runs(dev: &dyn BlockDevice, bs: u32, runs: &[Run], next: &AtomicUsize, stop: &AtomicBool) {
    let mut buf = vec![0u8; (MAX_RUN * u64::from(bs)) as usize];
    while !stop.load(Ordering::Relaxed) {
        let Some(r) = runs.get(next.fetch_add(1, Ordering::Relaxed)) else {
            return;
        };
        let n = (r.len * u64::from(bs)) as usize;
        let _ = dev.read_at(r.start * u64::from(bs), &mut buf[..n]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adjacent_blocks_make_one_run_up_to_the_cap() {
        let runs = coalesce([5, 6, 7, 0, 9, 8, 100].into_iter(), 50);
        let want = [
            Run { start: 5, len: 3 },
            Run { start: 9, len: 1 },
            Run { start: 8, len: 1 },
        ];
        assert_eq!(runs, want);
        let long = coalesce(1..=MAX_RUN + 1, 1000);
        assert_eq!(
            long,
            [
                Run { start: 1, len: MAX_RUN },
                Run {
                    start: MAX_RUN + 1,
                    len: 1
                }
            ]
        );
    }
}
