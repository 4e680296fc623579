//! Pass 1 of a check-only run with the inode tables read by worker
//! threads ([`crate::itable_scan`]). The tables are cut into spans in
//! group order; this thread takes the pieces in that order and checks
//! each inode with the serial scan's code, skipping the same blocks
//! (bad-block-list blocks) and noting the same read errors, so the report
//! is the serial scan's.

use crate::Progress;
use crate::itable_scan::{self, Piece, Source, Span};
use crate::pass1::{check_inode, scan_limit};
use crate::state::Ctx;
use crate::xattr::EaBlocks;

/// Scans every group; false when cancelled.
pub fn scan(ctx: &mut Ctx, ea: &mut EaBlocks, progress: &mut dyn FnMut(Progress)) -> bool {
    let groups = ctx.fs.geo.group_count;
    let per_block = (ctx.fs.bs() / usize::from(ctx.fs.geo.inode_size)) as u64;
    let mut spans = Vec::new();
    for g in 0..groups {
        let limit = scan_limit(ctx, g);
        if limit != 0 && crate::groups::table_ok(&ctx.fs, &ctx.fs.groups[g as usize]) {
            itable_scan::spans_of(g, limit, per_block, &mut spans);
        }
    }
    let tables: Vec<u64> = ctx.fs.groups.iter().map(|gd| gd.inode_table()).collect();
    let src = Source {
        dev: ctx.fs.dev,
        blocks_count: ctx.fs.geo.blocks_count,
        block_size: ctx.fs.geo.block_size,
        inode_size: ctx.fs.geo.inode_size,
        inodes_per_group: ctx.fs.geo.inodes_per_group,
        csum: ctx.fs.geo.features.metadata_csum().then_some(ctx.fs.seed),
    };
    let threads = ctx.threads;
    itable_scan::run(src, &tables, &spans, threads, |mut pieces| {
        let mut next = spans.iter().peekable();
        for g in 0..groups {
            if ctx.cancelled() {
                return false;
            }
            progress(Progress {
                pass: 1,
                done: u64::from(g),
                total: u64::from(groups),
            });
            ctx.scanned[g as usize] = scan_limit(ctx, g);
            while let Some(span) = next.next_if(|s| s.group == g) {
                let Some(piece) = pieces.next() else {
                    return false;
                };
                check_piece(ctx, ea, tables[g as usize], span, &piece);
            }
        }
        true
    })
}

/// The inodes of one piece, block by block as the serial scan goes.
fn check_piece(ctx: &mut Ctx, ea: &mut EaBlocks, table: u64, span: &Span, piece: &Piece) {
    let isz = usize::from(ctx.fs.geo.inode_size);
    let per_block = ctx.fs.bs() / isz;
    let ipg = ctx.fs.geo.inodes_per_group;
    let g = span.group;
    for b in 0..span.blocks as usize {
        let bi = span.first as usize + b;
        let blk = table + bi as u64;
        if ctx.bad_itable.contains(&blk) {
            continue;
        }
        if let Some(e) = &piece.failed[b] {
            ctx.report
                .note(format!("cannot read inode table block {blk} of group {g}: {e}"));
            continue;
        }
        for k in 0..per_block {
            let idx = (bi * per_block + k) as u32;
            if idx >= span.limit {
                break;
            }
            let r = b * per_block + k;
            let rec = &piece.data[r * isz..(r + 1) * isz];
            check_inode(ctx, ea, g * ipg + idx + 1, rec, piece.records[r]);
        }
    }
}
