//! Pass 1, one inode's fields (`inodes.rst`): checksum, `i_extra_isize`,
//! `i_dtime` on a live inode, flags that need a feature or a file type,
//! device/fifo/socket oddities, fast symlinks, and `i_size`/`i_blocks`
//! against what the block mapping holds.

use ext4kit_format::features::{CompatFeatures, IncompatFeatures, RoCompatFeatures};
use ext4kit_format::inode::{RawInode, flags, mode, verify_inode_checksum};

use crate::pass1::Tally;
use crate::problem::{self as p, Finding};
use crate::state::Ctx;

const CASEFOLD: u32 = flags::CASEFOLD;

/// Field checks; returns whether `i_extra_isize` is usable.
pub fn check(ctx: &mut Ctx, ino: u32, raw: &RawInode, rec: &[u8]) -> bool {
    let geo = &ctx.fs.geo;
    let f = geo.features;
    let mut out = Vec::new();
    let add = |out: &mut Vec<Finding>, c, m: String, w| out.push(Finding::new(c, m, w).ino(ino));
    if f.metadata_csum() && verify_inode_checksum(rec, ctx.fs.seed, ino).is_err() {
        add(
            &mut out,
            p::P1_INODE_ONLY_CSUM_INVALID,
            "inode checksum does not match".into(),
            "recompute it",
        );
    }
    let extra = raw.i_extra_isize.get();
    let max = geo.inode_size.saturating_sub(128);
    let extra_ok = rec.len() <= 128 || extra == 0 || (extra >= 4 && extra <= max && extra.is_multiple_of(4));
    if !extra_ok {
        add(
            &mut out,
            p::P1_EXTRA_ISIZE,
            format!("i_extra_isize {extra} is invalid"),
            "set it to the default",
        );
    }
    let m = raw.i_mode.get() & mode::S_IFMT;
    let is_dir = m == mode::S_IFDIR;
    let special = matches!(m, mode::S_IFCHR | mode::S_IFBLK | mode::S_IFIFO | mode::S_IFSOCK);
    let dtime = raw.i_dtime.get();
    if ino == 2 {
        if !is_dir {
            add(
                &mut out,
                p::P1_ROOT_NO_DIR,
                "root inode is not a directory".into(),
                "clear it",
            );
        }
        if dtime != 0 {
            add(
                &mut out,
                p::P1_ROOT_DTIME,
                "root inode has dtime set".into(),
                "clear dtime",
            );
        }
    } else if dtime != 0 {
        add(
            &mut out,
            p::P1_SET_DTIME,
            "inode is in use but has dtime set".into(),
            "clear dtime",
        );
    }
    let fl = raw.flags();
    if fl & flags::INDEX != 0 {
        if !f.compat.contains(CompatFeatures::DIR_INDEX) {
            add(
                &mut out,
                p::P1_HTREE_SET,
                "INDEX_FL set without dir_index".into(),
                "clear the flag",
            );
        } else if !is_dir {
            add(
                &mut out,
                p::P1_HTREE_NODIR,
                "INDEX_FL set on a non-directory".into(),
                "clear the flag",
            );
        }
    }
    if fl & flags::EXTENTS != 0 && !f.incompat.contains(IncompatFeatures::EXTENTS) {
        add(
            &mut out,
            p::P1_EXTENTS_SET,
            "EXTENTS_FL set without the extent feature".into(),
            "clear the inode",
        );
    }
    if fl & flags::INLINE_DATA != 0 && !f.incompat.contains(IncompatFeatures::INLINE_DATA) {
        add(
            &mut out,
            p::P1_INLINE_DATA_FEATURE,
            "INLINE_DATA_FL set without inline_data".into(),
            "clear the inode",
        );
    }
    if fl & CASEFOLD != 0 {
        if !f.incompat.contains(IncompatFeatures::CASEFOLD) {
            add(
                &mut out,
                p::P1_CASEFOLD_FEATURE,
                "CASEFOLD_FL set without casefold".into(),
                "clear the flag",
            );
        } else if !is_dir {
            add(
                &mut out,
                p::P1_CASEFOLD_NONDIR,
                "CASEFOLD_FL set on a non-directory".into(),
                "clear the flag",
            );
        }
    }
    if fl & ITREE_FL != 0 && !f.ro_compat.contains(RoCompatFeatures::ITREE) {
        out.push(
            Finding::new(
                p::own::P2_ITREE_FLAG_WITHOUT_FEATURE,
                "itree flag set without the itree feature",
                "clear the flag",
            )
            .ino(ino),
        );
    }
    if (special || m == mode::S_IFLNK) && fl & (flags::IMMUTABLE | flags::APPEND) != 0 {
        let msg = "special file or symlink has immutable or append-only set";
        out.push(Finding::new(p::P1_SET_IMMUTABLE, msg, "clear the flags").ino(ino));
    }
    if fl & IMAGIC_FL != 0 && !f.compat.contains(CompatFeatures::IMAGIC_INODES) {
        out.push(Finding::new(p::P1_SET_IMAGIC, "imagic flag set without imagic_inodes", "clear it").ino(ino));
    }
    if special {
        if raw.size() != 0 {
            add(
                &mut out,
                p::P1_SET_NONZSIZE,
                "special file has a nonzero size".into(),
                "set size to 0",
            );
        }
        if fl & (flags::EXTENTS | flags::INLINE_DATA) != 0 {
            add(
                &mut out,
                p::P1_SPECIAL_EXTENTS_IDATA,
                "special file has extent or inline-data flags".into(),
                "clear the flags",
            );
        }
    }
    obsolete_fields(raw, &f, &mut out, ino);
    if m == mode::S_IFLNK && !crate::symlink::valid(&ctx.fs, ino, raw, rec) {
        out.push(Finding::new(p::P2_INVALID_SYMLINK, "symlink is invalid", "clear the inode").ino(ino));
    }
    if special && !device_ok(raw) {
        let code = match m {
            mode::S_IFCHR => p::P2_BAD_CHAR_DEV,
            mode::S_IFBLK => p::P2_BAD_BLOCK_DEV,
            mode::S_IFIFO => p::P2_BAD_FIFO,
            _ => p::P2_BAD_SOCKET,
        };
        out.push(
            Finding::new(
                code,
                "special file has index/extent/inline flags or block pointers",
                "clear the inode",
            )
            .ino(ino),
        );
    }
    for x in out {
        ctx.add(x);
    }
    extra_ok
}

/// Fields that must be zero (e2fsck's `process_bad_inode`, reported in
/// pass 2): the obsolete fragment address, and the high halves of
/// `i_file_acl` and `i_blocks` without 64bit and huge_file.
fn obsolete_fields(raw: &RawInode, f: &ext4kit_format::features::Features, out: &mut Vec<Finding>, ino: u32) {
    if raw.i_obso_faddr.get() != 0 {
        out.push(
            Finding::new(
                p::P2_FADDR_ZERO,
                format!("i_faddr is {}, should be zero", raw.i_obso_faddr.get()),
                "clear it",
            )
            .ino(ino),
        );
    }
    if raw.i_file_acl_high.get() != 0 && !f.incompat.contains(IncompatFeatures::BIT64) {
        out.push(Finding::new(p::P2_I_FILE_ACL_HI_ZERO, "i_file_acl_hi is not zero", "clear it").ino(ino));
    }
    if raw.i_blocks_high.get() != 0 && !f.ro_compat.contains(RoCompatFeatures::HUGE_FILE) {
        out.push(Finding::new(p::P2_BLOCKS_HI_ZERO, "i_blocks_hi is not zero", "clear it").ino(ino));
    }
}

/// `EXT2_IMAGIC_FL`: AFS "imagic" inode.
const IMAGIC_FL: u32 = 0x2000;

/// ext4kit's itree directory flag (see `docs/itree.md`).
pub const ITREE_FL: u32 = 0x0080_0000;

/// A device, fifo or socket keeps its device number in `i_block[0..1]`
/// and nothing else (e2fsck's `e2fsck_pass1_check_device_inode`).
fn device_ok(raw: &RawInode) -> bool {
    if raw.flags() & (flags::INDEX | flags::EXTENTS | flags::INLINE_DATA) != 0 {
        return false;
    }
    raw.i_block[16..].iter().all(|&b| b == 0)
}

/// `i_size` and `i_blocks` against the mapping (e2fsck's end of `check_blocks`).
pub fn check_sizes(ctx: &mut Ctx, ino: u32, raw: &RawInode, t: &Tally, sectors: u64) {
    let geo = ctx.fs.geo.clone();
    let bs = u64::from(geo.block_size);
    let size = raw.size();
    let m = raw.i_mode.get() & mode::S_IFMT;
    let bad_size = if !t.walked || raw.has_flag(flags::VERITY) {
        false
    } else if m == mode::S_IFDIR {
        let nblock = size / bs;
        let want = t.last.map_or(0, |l| l + 1);
        !size.is_multiple_of(bs)
            || nblock > want
            || (nblock < want && want - nblock > u64::from(ctx.fs.sb.s_prealloc_dir_blocks))
    } else if m == mode::S_IFREG {
        let max = if raw.has_flag(flags::EXTENTS) {
            (1u64 << (32 + geo.block_size_log2)) - 1
        } else {
            let per = bs / 4;
            (12 + per + per * per + per * per * per).saturating_mul(bs)
        };
        t.last_init.is_some_and(|l| size < l * bs) || size > max
    } else {
        false
    };
    if bad_size {
        let f = Finding::new(
            p::P1_BAD_I_SIZE,
            format!("i_size is {size}, the blocks say otherwise"),
            "set i_size",
        )
        .ino(ino);
        ctx.add(f);
    }
    if !t.walked && sectors == 0 && raw.i_blocks_lo.get() == 0 {
        return;
    }
    let huge = geo.features.ro_compat.contains(RoCompatFeatures::HUGE_FILE);
    let stored = raw.blocks_512(huge, geo.block_size);
    let want = sectors;
    if stored != want && !geo.features.ro_compat.contains(RoCompatFeatures::BIGALLOC) {
        let f = Finding::new(
            p::P1_BAD_I_BLOCKS,
            format!("i_blocks is {stored}, should be {want}"),
            "set i_blocks",
        )
        .ino(ino);
        ctx.add(f);
    }
}
