//! Pass 3: connectivity. Every directory must reach the root through the
//! parents pass 2 found, its `..` must name that parent, and
//! `/lost+found` must exist as a directory.

use crate::Progress;
use crate::problem::{self as p, Finding};
use crate::state::Ctx;

const ROOT: u32 = 2;

/// Runs pass 3.
pub fn run(ctx: &mut Ctx, progress: &mut dyn FnMut(Progress)) {
    progress(Progress {
        pass: 3,
        done: 0,
        total: 1,
    });
    let root_ok = ctx.is_dir(ROOT);
    if !root_ok {
        ctx.add(Finding::new(p::P3_NO_ROOT_INODE, "root inode is not allocated", "reallocate it").ino(ROOT));
    }
    // 0 unknown, 1 reaches the root, 2 does not (nothing does without a root).
    let mut state: std::collections::HashMap<u32, u8> =
        std::collections::HashMap::from([(ROOT, if root_ok { 1 } else { 2 })]);
    let dirs: Vec<u32> = ctx.dirs.keys().copied().collect();
    for &d in &dirs {
        let mut path = Vec::new();
        let mut cur = d;
        let verdict = loop {
            if let Some(&s) = state.get(&cur) {
                break s;
            }
            if path.len() > dirs.len() || path.contains(&cur) {
                break 2;
            }
            path.push(cur);
            let parent = ctx.dirs.get(&cur).map_or(0, |i| i.parent);
            if parent == 0 {
                break 2;
            }
            cur = parent;
        };
        for q in path {
            state.insert(q, verdict);
        }
    }
    for &d in &dirs {
        let info = &ctx.dirs[&d];
        let (parent, dotdot) = (info.parent, info.dotdot);
        if d != ROOT && state.get(&d) == Some(&2) {
            ctx.add(
                Finding::new(
                    p::P3_UNCONNECTED_DIR,
                    format!("unconnected directory inode {d} (parent {parent})"),
                    "connect it to /lost+found",
                )
                .ino(d),
            );
            continue;
        }
        let want = if d == ROOT { ROOT } else { parent };
        if dotdot != want {
            ctx.add(
                Finding::new(
                    p::P3_BAD_DOT_DOT,
                    format!("'..' in directory {d} is {dotdot}, should be {want}"),
                    "fix '..'",
                )
                .ino(d),
            );
        }
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
