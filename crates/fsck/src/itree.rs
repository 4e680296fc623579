//! Pass 2, ext4kit's itree (`docs/itree.md`): the inode-ordered tree a
//! directory with ITREE_FL keeps beside its htree, linked from the last two
//! `dx_entry` slots of the htree root. Checks the link, every node (magic,
//! owner, level, key order, checksum — `Node::parse`), that node keys stay
//! inside their parent's range, that nodes lie in unclaimed blocks (they
//! are charged to no inode, so pass 1 did not see them: they are claimed
//! here for pass 5), and that the leaves hold exactly the directory's
//! names (as (inode, hash) keys).

use std::collections::HashSet;

use ext4kit_format::itree::{Node, NodeContext, read_link};

use crate::problem::{Finding, own};
use crate::state::Ctx;

/// Walk state for one directory's itree.
struct Walk {
    dir: u32,
    seed: u32,
    visited: HashSet<u64>,
    keys: Vec<u64>,
    problems: Vec<String>,
}

/// Checks the itree of directory `dir` whose htree root block is `root`;
/// `names` holds the (inode, hash) keys of the directory's live entries.
pub fn check(ctx: &mut Ctx, dir: u32, csum_seed: u32, root: &[u8], mut names: Vec<u64>) {
    let bs = ctx.fs.geo.block_size;
    let link = match read_link(root, bs, ctx.fs.geo.features.metadata_csum()) {
        Ok(Some(l)) => l,
        Ok(None) => {
            return report(
                ctx,
                dir,
                vec!["ITREE_FL is set but the htree root has no itree link".into()],
            );
        }
        Err(e) => return report(ctx, dir, vec![format!("bad itree link: {e}")]),
    };
    let mut w = Walk {
        dir,
        seed: csum_seed,
        visited: HashSet::new(),
        keys: Vec::new(),
        problems: Vec::new(),
    };
    node(ctx, &mut w, link.root, link.levels, 0, u64::MAX);
    w.keys.sort_unstable();
    names.sort_unstable();
    if w.problems.is_empty() && w.keys != names {
        let a: HashSet<u64> = w.keys.iter().copied().collect();
        let b: HashSet<u64> = names.iter().copied().collect();
        let (extra, missing) = (a.difference(&b).count(), b.difference(&a).count());
        w.problems.push(format!(
            "itree holds {} names, the directory {}: {extra} only in the itree, {missing} missing from it",
            w.keys.len(),
            names.len()
        ));
    }
    report(ctx, dir, w.problems);
}

fn report(ctx: &mut Ctx, dir: u32, problems: Vec<String>) {
    for m in problems.into_iter().take(16) {
        ctx.add(Finding::new(own::P2_ITREE_BAD, m, "rebuild the itree").ino(dir));
    }
}

/// One node at `blk` that must be at `level` and hold keys in `[lo, hi)`.
fn node(ctx: &mut Ctx, w: &mut Walk, blk: u64, level: u8, lo: u64, hi: u64) {
    if !ctx.fs.valid_block(blk) || !w.visited.insert(blk) {
        w.problems
            .push(format!("itree node block {blk} is invalid or reached twice"));
        return;
    }
    if !ctx.claim(blk) {
        w.problems
            .push(format!("itree node block {blk} is also used by something else"));
    }
    let Ok(buf) = ctx.fs.read_block(blk) else {
        w.problems.push(format!("cannot read itree node {blk}"));
        return;
    };
    let nctx = NodeContext {
        block_size: ctx.fs.geo.block_size,
        dir_ino: w.dir,
        inode_seed: w.seed,
        block: blk,
    };
    let parsed = match Node::parse(&buf, &nctx) {
        Ok(n) => n,
        Err(e) => {
            w.problems.push(format!("itree node {blk} is invalid: {e}"));
            return;
        }
    };
    if parsed.level() != level {
        w.problems.push(format!(
            "itree node {blk} is at level {}, its parent expects {level}",
            parsed.level()
        ));
        return;
    }
    match parsed {
        Node::Leaf(entries) => {
            for e in entries {
                let k = e.key();
                if k < lo || k >= hi {
                    w.problems
                        .push(format!("itree leaf {blk} holds a key outside its parent's range"));
                    return;
                }
                w.keys.push(k);
            }
        }
        Node::Index { entries, .. } => {
            for (i, e) in entries.iter().enumerate() {
                let start = if i == 0 { lo } else { e.key };
                let end = entries.get(i + 1).map_or(hi, |n| n.key);
                if start < lo || end > hi || level == 0 {
                    w.problems
                        .push(format!("itree index {blk} has keys outside its parent's range"));
                    return;
                }
                node(ctx, w, e.block, level - 1, start, end);
            }
        }
    }
}
