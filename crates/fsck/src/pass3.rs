//! Pass 3: connectivity. Every directory must reach the root through the
//! parents pass 2 found, its `..` must name that parent, and
//! `/lost+found` must exist as a directory.
//!
//! Repairs, as e2fsck's pass3.c: a missing root is made anew; the top of
//! each chain of directories that does not reach the root (or a directory
//! of a parent loop) is linked into `/lost+found` as `#<ino>`; a wrong `..`
//! is rewritten; a missing `/lost+found` is made.

use std::collections::HashSet;

use crate::Progress;
use crate::dir_link;
use crate::lost_found::{self, ROOT, adjust_count};
use crate::problem::{self as p, Finding};
use crate::state::Ctx;

/// Runs pass 3.
pub fn run(ctx: &mut Ctx, progress: &mut dyn FnMut(Progress)) {
    progress(Progress {
        pass: 3,
        done: 0,
        total: 1,
    });
    check_root(ctx);
    let root_ok = ctx.is_dir(ROOT);
    let dirs: Vec<u32> = ctx.dirs.keys().copied().collect();
    // Directories known to reach the root, or already offered to /lost+found.
    let mut done: HashSet<u32> = HashSet::new();
    let mut unconnected: HashSet<u32> = HashSet::new();
    if root_ok {
        done.insert(ROOT);
    }
    for &d in &dirs {
        if d == ROOT {
            continue;
        }
        let mut path = HashSet::new();
        let mut cur = d;
        while !done.contains(&cur) {
            if !path.insert(cur) || path.len() > dirs.len() {
                if !connect(ctx, cur, true) {
                    unconnected.insert(cur);
                }
                break;
            }
            let parent = ctx.dirs.get(&cur).map_or(0, |i| i.parent);
            if parent == 0 {
                if !connect(ctx, cur, false) {
                    unconnected.insert(cur);
                }
                break;
            }
            cur = parent;
        }
        done.extend(path);
    }
    for &d in &dirs {
        if unconnected.contains(&d) || (d == ROOT && !root_ok) {
            continue;
        }
        check_dotdot(ctx, d);
    }
    lost_found_exists(ctx);
}

/// P3_NO_ROOT_INODE: the root is made anew when it is free.
fn check_root(ctx: &mut Ctx) {
    if ctx.is_dir(ROOT) {
        return;
    }
    let f = Finding::new(p::P3_NO_ROOT_INODE, "root inode is not allocated", "reallocate it").ino(ROOT);
    if ctx.fix(f)
        && let Err(e) = lost_found::make_root(ctx)
    {
        ctx.not_fixed(e);
    }
}

/// Offers to link directory `d`, which does not reach the root, into
/// `/lost+found`; true when it now does.
fn connect(ctx: &mut Ctx, d: u32, looped: bool) -> bool {
    let dotdot = ctx.dirs.get(&d).map_or(0, |i| i.dotdot);
    let f = if looped {
        Finding::new(
            p::P3_LOOPED_DIR,
            format!("directory inode {d} is in a loop of parents"),
            "connect it to /lost+found",
        )
    } else {
        Finding::new(
            p::P3_UNCONNECTED_DIR,
            format!("unconnected directory inode {d} (was in {dotdot})"),
            "connect it to /lost+found",
        )
    };
    if !ctx.fix(f.ino(d)) {
        return false;
    }
    let lf = match lost_found::reconnect(ctx, d) {
        Ok(lf) => lf,
        Err(e) => {
            ctx.not_fixed(e);
            return false;
        }
    };
    if let Some(i) = ctx.dirs.get_mut(&d) {
        i.parent = lf;
    }
    if let Err(e) = fix_dotdot(ctx, d, lf) {
        let msg = format!("could not fix '..' of directory {d}: {e}");
        ctx.add(Finding::new(p::P3_FIX_PARENT_NOFIND, msg, "nothing").ino(d));
    }
    true
}

/// P3_BAD_DOT_DOT: `..` must name the parent (the root's, the root).
fn check_dotdot(ctx: &mut Ctx, d: u32) {
    let Some(info) = ctx.dirs.get(&d) else { return };
    let want = if d == ROOT { ROOT } else { info.parent };
    let dotdot = info.dotdot;
    if dotdot == want {
        return;
    }
    let f = Finding::new(
        p::P3_BAD_DOT_DOT,
        format!("'..' in directory {d} is {dotdot}, should be {want}"),
        "fix '..'",
    );
    if ctx.fix(f.ino(d))
        && let Err(e) = fix_dotdot(ctx, d, want)
    {
        ctx.not_fixed(e);
    }
}

/// Rewrites `..` of `d` to `parent`, moving a link from the inode it named
/// to `parent` (e2fsck's `fix_dotdot`).
fn fix_dotdot(ctx: &mut Ctx, d: u32, parent: u32) -> Result<(), String> {
    if parent == 0 {
        return Err("no parent to name".into());
    }
    let old = dir_link::set_dotdot(ctx, d, parent)?;
    if old != 0 && ctx.in_use(old) {
        adjust_count(ctx, old, -1);
    }
    adjust_count(ctx, parent, 1);
    if let Some(i) = ctx.dirs.get_mut(&d) {
        i.dotdot = parent;
    }
    Ok(())
}

/// `/lost+found` must be a directory; a repair run makes it when missing.
/// e2fsck makes it in any run that may write, even on an image with
/// nothing else wrong; here only a run that repairs something else does,
/// so a clean image is left byte for byte as it was (and until pass 5
/// rewrites the bitmaps, the new inode and block would be the only
/// difference between them and the image).
fn lost_found_exists(ctx: &mut Ctx) {
    if ctx.repairing() {
        if ctx.is_dir(ROOT) && ctx.report.fixed() > 0 {
            lost_found::get(ctx);
        }
        return;
    }
    match ctx.lost_found {
        // e2fsck -n says "Create? no" and leaves the exit status clean.
        None => ctx.add(Finding::new(p::P3_NO_LF_DIR, "/lost+found not found", "create it").warning()),
        Some(l) if !ctx.is_dir(l) => {
            ctx.add(Finding::new(p::P3_LPF_NOTDIR, "/lost+found is not a directory", "replace it").ino(l))
        }
        Some(_) => {}
    }
}
