//! Pass 0, the orphan list (`Documentation/filesystems/ext4/
//! special_inodes.rst`, "Orphan list"): inodes unlinked or truncated while
//! open, chained from `s_last_orphan` through `i_dtime`, which e2fsck
//! releases or truncates before pass 1 (`release_orphan_inodes`).

use std::collections::HashSet;

use crate::pass1::decode;
use crate::problem::{self as p, Finding};
use crate::state::Ctx;

/// The classic orphan list: `s_last_orphan`, then each inode's `i_dtime`.
/// Only its shape is checked; a read-only check does not release orphans.
pub fn check(ctx: &mut Ctx) {
    let mut ino = ctx.fs.sb.s_last_orphan.get();
    let mut seen = HashSet::new();
    let mut first = true;
    while ino != 0 {
        if ino > ctx.fs.geo.inodes_count || (ino < ctx.fs.geo.first_ino && ino != 0) || !seen.insert(ino) {
            let code = if first {
                p::P0_ORPHAN_ILLEGAL_HEAD_INODE
            } else {
                p::P0_ORPHAN_ILLEGAL_INODE
            };
            ctx.add(
                Finding::new(
                    code,
                    format!("illegal inode {ino} in the orphan list"),
                    "clear the orphan list",
                )
                .ino(ino),
            );
            return;
        }
        first = false;
        if seen.len() <= 1000 {
            let f = Finding::new(
                p::P0_ORPHAN_CLEAR_INODE,
                format!("orphaned inode {ino} (a repair would release it)"),
                "release it",
            );
            ctx.add(f.ino(ino).warning());
        }
        let Ok(rec) = ctx.fs.inode_record(ino) else { return };
        ino = decode(&rec).i_dtime.get();
    }
    if !seen.is_empty() {
        ctx.report.note(format!(
            "{} inode(s) on the orphan list (not released by a read-only check)",
            seen.len()
        ));
    }
}
