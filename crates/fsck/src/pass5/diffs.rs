//! Bitmap differences, gathered into runs and reported as e2fsck prints
//! them ("Block bitmap differences: -(100--120) +200").

use crate::problem::{self as p, Code, Finding};
use crate::state::Ctx;

/// Runs of differing bits, reported as ranges like e2fsck's
/// "Block bitmap differences: -(100--120) +200".
#[derive(Default)]
pub(super) struct Diffs {
    open: Option<(Code, u64, u64)>,
    out: Vec<(Code, u64, u64)>,
}

impl Diffs {
    pub(super) fn push(&mut self, code: Code, n: u64) {
        self.push_step(code, n, 1);
    }
    /// A difference at `n`, continuing a run whose last member is `n - step`
    /// (clusters of a bigalloc block bitmap are `step` blocks apart).
    pub(super) fn push_step(&mut self, code: Code, n: u64, step: u64) {
        if let Some((c, _, end)) = &mut self.open
            && *c == code
            && *end + step == n
        {
            *end = n;
            return;
        }
        if let Some(o) = self.open.take() {
            self.out.push(o);
        }
        self.open = Some((code, n, n));
    }
    pub(super) fn flush(&mut self, ctx: &mut Ctx) {
        if let Some(o) = self.open.take() {
            self.out.push(o);
        }
        for (code, a, b) in self.out.drain(..) {
            let inode = code == p::P5_INODE_USED || code == p::P5_INODE_UNUSED;
            let (code, what) = match (code == p::P5_BLOCK_USED || code == p::P5_INODE_USED, a == b, inode) {
                (true, true, _) => (code, "in use but not marked in the bitmap"),
                (false, true, _) => (code, "marked in the bitmap but not in use"),
                (true, false, false) => (p::P5_BLOCK_RANGE_USED, "in use but not marked in the bitmap"),
                (false, false, false) => (p::P5_BLOCK_RANGE_UNUSED, "marked in the bitmap but not in use"),
                (true, false, true) => (p::P5_INODE_RANGE_USED, "in use but not marked in the bitmap"),
                (false, false, true) => (p::P5_INODE_RANGE_UNUSED, "marked in the bitmap but not in use"),
            };
            let noun = if inode { "inode" } else { "block" };
            let range = if a == b { format!("{a}") } else { format!("{a}-{b}") };
            let f = Finding::new(code, format!("{noun} {range} {what}"), "fix the bitmap");
            // The group's bitmap was rewritten when repairing (`rewrite`).
            ctx.fix(if inode { f.ino(a as u32) } else { f.blk(a) });
        }
    }
}
