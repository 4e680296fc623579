//! Pass 0, the superblock's own fields (`super.rst`) and their repairs, as
//! e2fsck's `check_super_block` and `e2fsck_validate_quota_inodes` make
//! them: each repair changes [`crate::fs::RawFs::sb`] and marks it dirty;
//! the end of the run writes it (with every backup when the change is one
//! e2fsck writes to all copies).

use ext4kit_format::features::{CompatFeatures, IncompatFeatures, RoCompatFeatures};

use crate::problem::{self as p, Finding};
use crate::state::Ctx;

/// `sizeof(struct ext2_inode_large) - EXT2_GOOD_OLD_INODE_SIZE`: the extra
/// inode size e2fsck and mke2fs use (`i_extra_isize` through `i_projid`).
const DEFAULT_EXTRA_ISIZE: u16 = 32;

/// Inode numbers a quota file may never have: the reserved inodes with
/// another purpose (bad blocks, root, boot loader, undelete directory,
/// resize, journal, exclude, replica).
const NOT_QUOTA: [u32; 8] = [1, 2, 5, 6, 7, 8, 9, 10];

/// Checks (and repairs) the superblock fields.
pub fn check(ctx: &mut Ctx) {
    features(ctx);
    reserved_gdt(ctx);
    first_meta_bg(ctx);
    extra_isize(ctx);
    quota_inodes(ctx);
    uuid(ctx);
    rev_level(ctx);
}

/// After a feature word changed: the geometry's copy and the checksum seed
/// follow the superblock.
fn features_changed(ctx: &mut Ctx, all_copies: bool) {
    ctx.fs.geo.features = ctx.fs.sb.features();
    ctx.fs.seed = ctx.fs.sb.csum_seed();
    ctx.fs.dirty_sb = true;
    ctx.fs.dirty_backups |= all_copies;
}

/// Feature combinations that cannot be: metadata_csum with uninit_bg (the
/// descriptors then carry crc32c, so uninit_bg goes), metadata_csum_seed
/// without metadata_csum (the seed goes), 64bit without extents (extents
/// is set: 64-bit block numbers need extent-mapped files).
fn features(ctx: &mut Ctx) {
    let f = ctx.fs.geo.features;
    if f.metadata_csum() && f.ro_compat.contains(RoCompatFeatures::GDT_CSUM) {
        let msg = "both metadata_csum and uninit_bg are set";
        if ctx.fix(Finding::new(p::P0_META_AND_GDT_CSUM_SET, msg, "clear uninit_bg")) {
            let v = ctx.fs.sb.s_feature_ro_compat.get() & !RoCompatFeatures::GDT_CSUM.0;
            ctx.fs.sb.s_feature_ro_compat.set(v);
            features_changed(ctx, false);
            ctx.fs.dirty_groups = true;
        }
    }
    let f = ctx.fs.geo.features;
    if f.incompat.contains(IncompatFeatures::CSUM_SEED) && !f.metadata_csum() {
        let msg = "metadata_csum_seed without metadata_csum";
        if ctx.fix(Finding::new(
            p::P0_CSUM_SEED_WITHOUT_META_CSUM,
            msg,
            "clear metadata_csum_seed",
        )) {
            let v = ctx.fs.sb.s_feature_incompat.get() & !IncompatFeatures::CSUM_SEED.0;
            ctx.fs.sb.s_feature_incompat.set(v);
            ctx.fs.sb.s_checksum_seed.set(0);
            features_changed(ctx, false);
        }
    }
    let f = ctx.fs.geo.features;
    if f.incompat.contains(IncompatFeatures::BIT64) && !f.incompat.contains(IncompatFeatures::EXTENTS) {
        let msg = "64bit without extents";
        if ctx.fix(Finding::new(p::P0_64BIT_WITHOUT_EXTENTS, msg, "set extents")) {
            let v = ctx.fs.sb.s_feature_incompat.get() | IncompatFeatures::EXTENTS.0;
            ctx.fs.sb.s_feature_incompat.set(v);
            features_changed(ctx, false);
        }
    }
}

/// Reserved GDT blocks exist only for the resize inode.
fn reserved_gdt(ctx: &mut Ctx) {
    let rsv = ctx.fs.sb.s_reserved_gdt_blocks.get();
    if rsv != 0 && !ctx.fs.geo.features.compat.contains(CompatFeatures::RESIZE_INODE) {
        let msg = format!("s_reserved_gdt_blocks is {rsv} without resize_inode");
        if ctx.fix(Finding::new(p::P0_NONZERO_RESERVED_GDT_BLOCKS, msg, "set it to zero")) {
            ctx.fs.sb.s_reserved_gdt_blocks.set(0);
            ctx.fs.dirty_sb = true;
        }
    }
}

/// `s_first_meta_bg` past the descriptor table: e2fsck clears meta_bg (the
/// table then is old-style, which is where every block of it was read).
/// Left alone, the layout is still readable: `e2fsck -n` keeps its exit
/// status clean (it answers in `check_super_block`, before it marks the
/// file system valid for the passes).
fn first_meta_bg(ctx: &mut Ctx) {
    let first = ctx.fs.sb.s_first_meta_bg.get();
    if ctx.fs.geo.features.incompat.contains(IncompatFeatures::META_BG) && u64::from(first) > ctx.fs.gdt_blocks() {
        let msg = format!("s_first_meta_bg {first} is too big");
        let f = Finding::new(p::P0_FIRST_META_BG_TOO_BIG, msg, "clear meta_bg").warning();
        // The blocks the meta_bg layout reserved are given back by pass 5.
        if ctx.fix(f) {
            let v = ctx.fs.sb.s_feature_incompat.get() & !IncompatFeatures::META_BG.0;
            ctx.fs.sb.s_feature_incompat.set(v);
            ctx.fs.sb.s_first_meta_bg.set(0);
            features_changed(ctx, false);
        }
    }
}

/// `s_min_extra_isize` and `s_want_extra_isize` must fit the inode, be a
/// multiple of 4 and hold at least `i_extra_isize` and `i_checksum_hi`.
fn extra_isize(ctx: &mut Ctx) {
    let isz = ctx.fs.geo.inode_size;
    if isz <= 128 {
        return;
    }
    let max = isz - 128;
    for want in [false, true] {
        let (v, code, field) = if want {
            let v = ctx.fs.sb.s_want_extra_isize.get();
            (v, p::P0_BAD_WANT_EXTRA_ISIZE, "s_want_extra_isize")
        } else {
            let v = ctx.fs.sb.s_min_extra_isize.get();
            (v, p::P0_BAD_MIN_EXTRA_ISIZE, "s_min_extra_isize")
        };
        if v == 0 || (4..=max).contains(&v) && v % 4 == 0 {
            continue;
        }
        // e2fsck -n answers no and leaves the exit status clean.
        let f = Finding::new(code, format!("{field} is {v}"), "set it to the default").warning();
        if ctx.fix(f) {
            let d = DEFAULT_EXTRA_ISIZE.min(max);
            if want {
                ctx.fs.sb.s_want_extra_isize.set(d);
            } else {
                ctx.fs.sb.s_min_extra_isize.set(d);
            }
            ctx.fs.dirty_sb = true;
        }
    }
}

/// Quota inode numbers must name inodes that exist and are not reserved
/// for something else; a bad one is cleared (quota is then rebuilt by
/// whoever turns it on again, as after e2fsck).
fn quota_inodes(ctx: &mut Ctx) {
    if !ctx.fs.geo.features.ro_compat.contains(RoCompatFeatures::QUOTA) {
        return;
    }
    for what in ["user", "group", "project"] {
        let sb = &ctx.fs.sb;
        let ino = match what {
            "user" => sb.s_usr_quota_inum.get(),
            "group" => sb.s_grp_quota_inum.get(),
            _ => sb.s_prj_quota_inum.get(),
        };
        if ino == 0 || (ino <= ctx.fs.geo.inodes_count && !NOT_QUOTA.contains(&ino)) {
            continue;
        }
        let msg = format!("invalid {what} quota inode {ino}");
        if ctx.fix(Finding::new(p::P0_INVALID_QUOTA_INO, msg, "clear it")) {
            let sb = &mut ctx.fs.sb;
            match what {
                "user" => sb.s_usr_quota_inum.set(0),
                "group" => sb.s_grp_quota_inum.set(0),
                _ => sb.s_prj_quota_inum.set(0),
            }
            ctx.fs.dirty_sb = true;
        }
    }
}

/// A file system without a UUID gets one, written to every copy. Not with
/// metadata_csum: every checksum is seeded from the UUID (e2fsck skips it
/// too). With uninit_bg the descriptor checksums, which cover the UUID,
/// are rewritten.
fn uuid(ctx: &mut Ctx) {
    if ctx.fs.sb.s_uuid != [0; 16] || ctx.fs.geo.features.metadata_csum() {
        return;
    }
    // e2fsck generates one without asking and does not count it against
    // the image (its -n run exits 0): a warning.
    let f = Finding::new(p::P0_ADD_UUID, "the file system has no UUID", "generate one").warning();
    if ctx.fix(f) {
        ctx.fs.sb.s_uuid = ext4kit_engine::tune::time_uuid();
        features_changed(ctx, true);
        ctx.fs.dirty_groups = true;
    }
}

/// A revision 0 superblock with feature flags: the kernel may ignore the
/// flags, so the revision is raised to 1 (dynamic), with the fixed values
/// revision 0 implies (first inode 11, 128-byte inodes).
fn rev_level(ctx: &mut Ctx) {
    let f = ctx.fs.geo.features;
    if ctx.fs.sb.s_rev_level.get() != 0 || (f.compat.0 | f.incompat.0 | f.ro_compat.0) == 0 {
        return;
    }
    let msg = "revision 0 file system with feature flags";
    if ctx.fix(Finding::new(p::P0_FS_REV_LEVEL, msg, "raise the revision")) {
        let sb = &mut ctx.fs.sb;
        sb.s_rev_level.set(1);
        sb.s_first_ino.set(11);
        sb.s_inode_size.set(128);
        ctx.fs.dirty_sb = true;
        ctx.fs.dirty_backups = true;
    }
}

/// `ext2fs_needs_large_file_feature`: a size of 2 GiB or more needs
/// large_file (regular files) or large_dir (directories).
pub fn needs_large_file(size: u64) -> bool {
    size >= 0x8000_0000
}

/// What `ext2fs_inode_size_set` does when a repair gives an inode a size
/// that needs large_file (or large_dir for a directory): the feature is
/// set without asking and a revision 0 superblock is raised to 1.
pub fn size_set(ctx: &mut Ctx, dir: bool, size: u64) {
    if !needs_large_file(size) {
        return;
    }
    let (word, bit) = if dir {
        (&mut ctx.fs.sb.s_feature_incompat, IncompatFeatures::LARGEDIR.0)
    } else {
        (&mut ctx.fs.sb.s_feature_ro_compat, RoCompatFeatures::LARGE_FILE.0)
    };
    if word.get() & bit != 0 {
        return;
    }
    word.set(word.get() | bit);
    raise_rev(ctx);
    features_changed(ctx, true);
}

/// `ext2fs_update_dynamic_rev`: revision 1 with the values revision 0 implies.
fn raise_rev(ctx: &mut Ctx) {
    let sb = &mut ctx.fs.sb;
    if sb.s_rev_level.get() == 0 {
        sb.s_rev_level.set(1);
        sb.s_first_ino.set(11);
        sb.s_inode_size.set(128);
    }
}

/// End of pass 2: regular files of 2 GiB or more (counted by pass 1 in
/// [`Ctx::large_files`]) need large_file (e2fsck's
/// `PR_2_FEATURE_LARGE_FILES`), and a revision 0 file system is then
/// raised to revision 1 (`PR_1_FS_REV_LEVEL`).
pub fn large_files(ctx: &mut Ctx) {
    if ctx.large_files == 0 {
        return;
    }
    if !ctx.fs.geo.features.ro_compat.contains(RoCompatFeatures::LARGE_FILE) {
        let msg = format!("{} large files, but no large_file feature", ctx.large_files);
        if ctx.fix(Finding::new(p::P2_FEATURE_LARGE_FILES, msg, "set large_file")) {
            let v = ctx.fs.sb.s_feature_ro_compat.get() | RoCompatFeatures::LARGE_FILE.0;
            ctx.fs.sb.s_feature_ro_compat.set(v);
            features_changed(ctx, true);
        }
    }
    if ctx.fs.sb.s_rev_level.get() == 0 {
        let msg = "revision 0 file system with large files";
        if ctx.fix(Finding::new(p::P1_FS_REV_LEVEL, msg, "raise the revision")) {
            raise_rev(ctx);
            features_changed(ctx, true);
        }
    }
}
