//! ext2/ext3 block maps (`ifork.rst`, "Direct/Indirect Block Addressing"):
//! twelve direct pointers, then single, double and triple indirect blocks.
//! Every pointer must name a block inside the file system.
//!
//! Repairs (pass 1 with a [`crate::map_fix::Fixer`]): an illegal pointer
//! is zeroed, in `i_block` or in the indirect block holding it, as
//! e2fsck's `process_block` does; at every twelfth illegal pointer the
//! inode is cleared instead ("Too many illegal blocks").

use crate::map_fix::ILLEGAL_PER_ASK;
use crate::problem::{self as p, Finding};
use crate::walk::{Event, Walker};

fn ptr(b: &[u8], i: usize) -> u64 {
    u64::from(u32::from_le_bytes([b[i * 4], b[i * 4 + 1], b[i * 4 + 2], b[i * 4 + 3]]))
}

fn zero_ptr(b: &mut [u8], i: usize) {
    b[i * 4..i * 4 + 4].fill(0);
}

/// Walks the block map in `i_block`.
pub fn walk(w: &mut Walker, i_block: &[u8]) {
    let per = (w.fs.bs() / 4) as u64;
    let mut root = [0u8; 60];
    root.copy_from_slice(&i_block[..60]);
    let mut changed = false;
    for i in 0..12 {
        if data(w, ptr(&root, i), i as u64) {
            zero_ptr(&mut root, i);
            changed = true;
        }
        if w.stopped() {
            return;
        }
    }
    let mut base = 12u64;
    for (level, slot) in [(1u8, 12usize), (2, 13), (3, 14)] {
        let b = ptr(&root, slot);
        if b != 0 && indirect(w, b, level, base, per) {
            zero_ptr(&mut root, slot);
            changed = true;
        }
        if w.stopped() {
            return;
        }
        base = base.saturating_add(per.saturating_pow(u32::from(level)));
    }
    if changed && let Some(fx) = w.fixer.as_mut() {
        fx.root = root;
        fx.root_dirty = true;
    }
}

/// An illegal pointer: counts it, asks to clear the inode at every
/// twelfth, then reports it. True when the pointer is to be zeroed.
fn illegal(w: &mut Walker, f: Finding) -> bool {
    if let Some(fx) = w.fixer.as_mut() {
        fx.illegal += 1;
        if fx.illegal.is_multiple_of(ILLEGAL_PER_ASK) && fx.decide(p::P1_TOO_MANY_BAD_BLOCKS) {
            fx.clear = true;
            let mut t = Finding::new(p::P1_TOO_MANY_BAD_BLOCKS, "too many illegal blocks", "clear the inode");
            t.fixed = true;
            w.problem(t);
            return false;
        }
    }
    let mut f = f;
    f.fixed = w.fixing(f.code);
    let zero = f.fixed;
    w.problem(f);
    zero
}

/// A data pointer; true when it is to be zeroed.
fn data(w: &mut Walker, b: u64, lblk: u64) -> bool {
    if b == 0 {
        return false;
    }
    if !w.fs.valid_block(b) {
        let f = Finding::new(
            p::P1_ILLEGAL_BLOCK_NUM,
            format!("illegal block {b} at logical {lblk}"),
            "clear the pointer",
        );
        return illegal(w, f.blk(b));
    }
    if w.dir_limit.is_some_and(|m| lblk > m) {
        let msg = format!("block {b} at logical {lblk} makes the directory too big");
        let mut f = Finding::new(p::P1_TOOBIG_DIR, msg, "clear the pointer").blk(b);
        f.fixed = w.fixing(f.code);
        let zero = f.fixed;
        w.problem(f);
        return zero;
    }
    w.emit(Event::Data {
        lblk,
        pblk: b,
        len: 1,
        unwritten: false,
    });
    false
}

/// An indirect block of `level` (1 single, 2 double, 3 triple) mapping
/// logical blocks from `base`; true when the pointer to it is to be zeroed.
fn indirect(w: &mut Walker, b: u64, level: u8, base: u64, per: u64) -> bool {
    if !w.fs.valid_block(b) {
        let f = Finding::new(
            p::P1_ILLEGAL_BLOCK_NUM,
            format!("illegal indirect block {b} (level {level})"),
            "clear the pointer",
        );
        return illegal(w, f.blk(b));
    }
    let unfixed = |m: String| Finding::new(p::P1_ILLEGAL_BLOCK_NUM, m, "clear the pointer").blk(b);
    if !w.first_visit(b) {
        w.problem(unfixed(format!("indirect block {b} is reached twice")));
        return false;
    }
    w.emit(Event::Meta { pblk: b, level });
    let Ok(mut buf) = w.fs.read_block(b) else {
        w.problem(unfixed(format!("cannot read indirect block {b}")));
        return false;
    };
    let span = per.saturating_pow(u32::from(level) - 1);
    let mut changed = false;
    for i in 0..per as usize {
        let c = ptr(&buf, i);
        if c == 0 {
            continue;
        }
        let lblk = base.saturating_add((i as u64).saturating_mul(span));
        let zero = if level == 1 {
            data(w, c, lblk)
        } else {
            indirect(w, c, level - 1, lblk, per)
        };
        if zero {
            zero_ptr(&mut buf, i);
            changed = true;
        }
        if w.stopped() {
            return false;
        }
    }
    if changed {
        // A failed write leaves the pointer; the next run finds it again.
        let _ = w.fs.write_block(b, &buf);
    }
    false
}
