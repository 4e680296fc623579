//! ext2/ext3 block maps (`ifork.rst`, "Direct/Indirect Block Addressing"):
//! twelve direct pointers, then single, double and triple indirect blocks.
//! Every pointer must name a block inside the file system.

use crate::problem::{self as p, Finding};
use crate::walk::{Event, Walker};

fn ptr(b: &[u8], i: usize) -> u64 {
    u64::from(u32::from_le_bytes([b[i * 4], b[i * 4 + 1], b[i * 4 + 2], b[i * 4 + 3]]))
}

/// Walks the block map in `i_block`.
pub fn walk(w: &mut Walker, i_block: &[u8]) {
    let per = (w.fs.bs() / 4) as u64;
    for i in 0..12 {
        data(w, ptr(i_block, i), i as u64);
    }
    let mut base = 12u64;
    for (level, slot) in [(1u8, 12usize), (2, 13), (3, 14)] {
        let b = ptr(i_block, slot);
        if b != 0 {
            indirect(w, b, level, base, per);
        }
        base = base.saturating_add(per.saturating_pow(u32::from(level)));
    }
}

fn data(w: &mut Walker, b: u64, lblk: u64) {
    if b == 0 {
        return;
    }
    if !w.fs.valid_block(b) {
        w.problem(
            Finding::new(
                p::P1_ILLEGAL_BLOCK_NUM,
                format!("illegal block {b} at logical {lblk}"),
                "clear the pointer",
            )
            .blk(b),
        );
        return;
    }
    w.emit(Event::Data {
        lblk,
        pblk: b,
        len: 1,
        unwritten: false,
    });
}

/// An indirect block of `level` (1 single, 2 double, 3 triple) mapping
/// logical blocks from `base`.
fn indirect(w: &mut Walker, b: u64, level: u8, base: u64, per: u64) {
    if !w.fs.valid_block(b) {
        w.problem(
            Finding::new(
                p::P1_ILLEGAL_BLOCK_NUM,
                format!("illegal indirect block {b} (level {level})"),
                "clear the pointer",
            )
            .blk(b),
        );
        return;
    }
    if !w.first_visit(b) {
        w.problem(
            Finding::new(
                p::P1_ILLEGAL_BLOCK_NUM,
                format!("indirect block {b} is reached twice"),
                "clear the pointer",
            )
            .blk(b),
        );
        return;
    }
    w.emit(Event::Meta { pblk: b, level });
    let Ok(buf) = w.fs.read_block(b) else {
        w.problem(
            Finding::new(
                p::P1_ILLEGAL_BLOCK_NUM,
                format!("cannot read indirect block {b}"),
                "clear the pointer",
            )
            .blk(b),
        );
        return;
    };
    let span = per.saturating_pow(u32::from(level) - 1);
    for i in 0..per as usize {
        let c = ptr(&buf, i);
        if c == 0 {
            continue;
        }
        let lblk = base.saturating_add((i as u64).saturating_mul(span));
        if level == 1 {
            data(w, c, lblk);
        } else {
            indirect(w, c, level - 1, lblk, per);
        }
    }
}
