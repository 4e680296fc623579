//! Pass 4: reference counts. Each inode's `i_links_count` against the
//! directory entries pass 2 counted (`.` and `..` included); inodes no
//! directory names are unattached.

use ext4kit_format::features::RoCompatFeatures;

use crate::Progress;
use crate::problem::{self as p, Finding};
use crate::state::{Ctx, KIND_FREE, KIND_RESERVED};

/// Above this many links a directory stores 1 (`dir_nlink`).
const LINK_MAX: u16 = 65000;

/// Runs pass 4.
pub fn run(ctx: &mut Ctx, progress: &mut dyn FnMut(Progress)) {
    let n = ctx.fs.geo.inodes_count;
    let dir_nlink = ctx.fs.geo.features.ro_compat.contains(RoCompatFeatures::DIR_NLINK);
    for ino in 1..=n {
        if ino % 65536 == 0 {
            progress(Progress {
                pass: 4,
                done: u64::from(ino),
                total: u64::from(n),
            });
        }
        let k = ctx.kind[ino as usize];
        if k == KIND_FREE || k == KIND_RESERVED || ctx.ea_inode.get(u64::from(ino)) {
            continue;
        }
        let (links, refs) = (ctx.links[ino as usize], ctx.refs[ino as usize]);
        if refs == 0 {
            let (code, what) = if ctx.empty.get(u64::from(ino)) {
                (p::P4_ZERO_LEN_INODE, "unattached zero-length inode")
            } else {
                (p::P4_UNATTACHED_INODE, "unattached inode")
            };
            ctx.add(Finding::new(code, what, "connect it to /lost+found").ino(ino));
            continue;
        }
        let mut counted = refs;
        if ctx.is_dir(ino) && refs > LINK_MAX {
            if !dir_nlink {
                ctx.add(
                    Finding::new(
                        p::P4_DIR_NLINK_FEATURE,
                        "directory has more than 65000 links without dir_nlink",
                        "set dir_nlink",
                    )
                    .ino(ino),
                );
            }
            counted = 1;
        }
        if links != counted {
            ctx.add(
                Finding::new(
                    p::P4_BAD_REF_COUNT,
                    format!("inode {ino} ref count is {links}, should be {counted}"),
                    "set it",
                )
                .ino(ino),
            );
        }
    }
}
