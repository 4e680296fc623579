//! The field tables: debugfs's names, placed by the raw structures.

use core::mem::offset_of;

use super::{Field, Kind, Part};
use crate::group_desc::RawGroupDesc as G;
use crate::inode::RawInode as I;
use crate::superblock::RawSuperblock as S;

const fn f(name: &'static str, offset: usize, len: usize, kind: Kind) -> Field {
    Field {
        name,
        lo: Part { offset, len },
        hi: None,
        kind,
        count: 1,
    }
}

impl Field {
    const fn hi(mut self, offset: usize, len: usize) -> Self {
        self.hi = Some(Part { offset, len });
        self
    }

    const fn array(mut self, count: usize) -> Self {
        self.count = count;
        self
    }
}

use Kind::{Checksum, HashAlg, InodeTime, Int, SbTime, Text, Uint, Uuid};

/// `struct ext4_super_block`, as `set_super_value` names it (no `magic`).
pub static SUPERBLOCK: &[Field] = &[
    f("inodes_count", offset_of!(S, s_inodes_count), 4, Uint),
    f("blocks_count", offset_of!(S, s_blocks_count_lo), 4, Uint).hi(offset_of!(S, s_blocks_count_hi), 4),
    f("r_blocks_count", offset_of!(S, s_r_blocks_count_lo), 4, Uint).hi(offset_of!(S, s_r_blocks_count_hi), 4),
    f("free_blocks_count", offset_of!(S, s_free_blocks_count_lo), 4, Uint).hi(offset_of!(S, s_free_blocks_count_hi), 4),
    f("free_inodes_count", offset_of!(S, s_free_inodes_count), 4, Uint),
    f("first_data_block", offset_of!(S, s_first_data_block), 4, Uint),
    f("log_block_size", offset_of!(S, s_log_block_size), 4, Uint),
    f("log_cluster_size", offset_of!(S, s_log_cluster_size), 4, Int),
    f("blocks_per_group", offset_of!(S, s_blocks_per_group), 4, Uint),
    f("clusters_per_group", offset_of!(S, s_clusters_per_group), 4, Uint),
    f("inodes_per_group", offset_of!(S, s_inodes_per_group), 4, Uint),
    f("mtime", offset_of!(S, s_mtime), 4, SbTime).hi(offset_of!(S, s_mtime_hi), 1),
    f("wtime", offset_of!(S, s_wtime), 4, SbTime).hi(offset_of!(S, s_wtime_hi), 1),
    f("mnt_count", offset_of!(S, s_mnt_count), 2, Uint),
    f("max_mnt_count", offset_of!(S, s_max_mnt_count), 2, Int),
    f("state", offset_of!(S, s_state), 2, Uint),
    f("errors", offset_of!(S, s_errors), 2, Uint),
    f("minor_rev_level", offset_of!(S, s_minor_rev_level), 2, Uint),
    f("lastcheck", offset_of!(S, s_lastcheck), 4, SbTime).hi(offset_of!(S, s_lastcheck_hi), 1),
    f("checkinterval", offset_of!(S, s_checkinterval), 4, Uint),
    f("creator_os", offset_of!(S, s_creator_os), 4, Uint),
    f("rev_level", offset_of!(S, s_rev_level), 4, Uint),
    f("def_resuid", offset_of!(S, s_def_resuid), 2, Uint),
    f("def_resgid", offset_of!(S, s_def_resgid), 2, Uint),
    f("first_ino", offset_of!(S, s_first_ino), 4, Uint),
    f("inode_size", offset_of!(S, s_inode_size), 2, Uint),
    f("block_group_nr", offset_of!(S, s_block_group_nr), 2, Uint),
    f("feature_compat", offset_of!(S, s_feature_compat), 4, Uint),
    f("feature_incompat", offset_of!(S, s_feature_incompat), 4, Uint),
    f("feature_ro_compat", offset_of!(S, s_feature_ro_compat), 4, Uint),
    f("uuid", offset_of!(S, s_uuid), 16, Uuid),
    f("volume_name", offset_of!(S, s_volume_name), 16, Text),
    f("last_mounted", offset_of!(S, s_last_mounted), 64, Text),
    f(
        "algorithm_usage_bitmap",
        offset_of!(S, s_algorithm_usage_bitmap),
        4,
        Uint,
    ),
    f("prealloc_blocks", offset_of!(S, s_prealloc_blocks), 1, Uint),
    f("prealloc_dir_blocks", offset_of!(S, s_prealloc_dir_blocks), 1, Uint),
    f("reserved_gdt_blocks", offset_of!(S, s_reserved_gdt_blocks), 2, Uint),
    f("journal_uuid", offset_of!(S, s_journal_uuid), 16, Uuid),
    f("journal_inum", offset_of!(S, s_journal_inum), 4, Uint),
    f("journal_dev", offset_of!(S, s_journal_dev), 4, Uint),
    f("last_orphan", offset_of!(S, s_last_orphan), 4, Uint),
    f("hash_seed", offset_of!(S, s_hash_seed), 16, Uuid),
    f("def_hash_version", offset_of!(S, s_def_hash_version), 1, HashAlg),
    f("jnl_backup_type", offset_of!(S, s_jnl_backup_type), 1, Uint),
    f("desc_size", offset_of!(S, s_desc_size), 2, Uint),
    f("default_mount_opts", offset_of!(S, s_default_mount_opts), 4, Uint),
    f("first_meta_bg", offset_of!(S, s_first_meta_bg), 4, Uint),
    f("mkfs_time", offset_of!(S, s_mkfs_time), 4, SbTime).hi(offset_of!(S, s_mkfs_time_hi), 1),
    f("jnl_blocks", offset_of!(S, s_jnl_blocks), 4, Uint).array(17),
    f("min_extra_isize", offset_of!(S, s_min_extra_isize), 2, Uint),
    f("want_extra_isize", offset_of!(S, s_want_extra_isize), 2, Uint),
    f("flags", offset_of!(S, s_flags), 4, Uint),
    f("raid_stride", offset_of!(S, s_raid_stride), 2, Uint),
    f("mmp_interval", offset_of!(S, s_mmp_update_interval), 2, Uint),
    f("mmp_block", offset_of!(S, s_mmp_block), 8, Uint),
    f("raid_stripe_width", offset_of!(S, s_raid_stripe_width), 4, Uint),
    f("log_groups_per_flex", offset_of!(S, s_log_groups_per_flex), 1, Uint),
    f("checksum_type", offset_of!(S, s_checksum_type), 1, Uint),
    f("encryption_level", offset_of!(S, s_encryption_level), 1, Uint),
    f("kbytes_written", offset_of!(S, s_kbytes_written), 8, Uint),
    f("snapshot_inum", offset_of!(S, s_snapshot_inum), 4, Uint),
    f("snapshot_id", offset_of!(S, s_snapshot_id), 4, Uint),
    f(
        "snapshot_r_blocks_count",
        offset_of!(S, s_snapshot_r_blocks_count),
        8,
        Uint,
    ),
    f("snapshot_list", offset_of!(S, s_snapshot_list), 4, Uint),
    f("error_count", offset_of!(S, s_error_count), 4, Uint),
    f("first_error_time", offset_of!(S, s_first_error_time), 4, SbTime).hi(offset_of!(S, s_first_error_time_hi), 1),
    f("first_error_ino", offset_of!(S, s_first_error_ino), 4, Uint),
    f("first_error_block", offset_of!(S, s_first_error_block), 8, Uint),
    f("first_error_func", offset_of!(S, s_first_error_func), 32, Text),
    f("first_error_line", offset_of!(S, s_first_error_line), 4, Uint),
    f("last_error_time", offset_of!(S, s_last_error_time), 4, SbTime).hi(offset_of!(S, s_last_error_time_hi), 1),
    f("last_error_ino", offset_of!(S, s_last_error_ino), 4, Uint),
    f("last_error_line", offset_of!(S, s_last_error_line), 4, Uint),
    f("last_error_block", offset_of!(S, s_last_error_block), 8, Uint),
    f("last_error_func", offset_of!(S, s_last_error_func), 32, Text),
    f("mount_opts", offset_of!(S, s_mount_opts), 64, Text),
    f("usr_quota_inum", offset_of!(S, s_usr_quota_inum), 4, Uint),
    f("grp_quota_inum", offset_of!(S, s_grp_quota_inum), 4, Uint),
    f("prj_quota_inum", offset_of!(S, s_prj_quota_inum), 4, Uint),
    f("overhead_clusters", offset_of!(S, s_overhead_clusters), 4, Uint),
    f("backup_bgs", offset_of!(S, s_backup_bgs), 4, Uint).array(2),
    f("encrypt_algos", offset_of!(S, s_encrypt_algos), 1, Uint).array(4),
    f("encrypt_pw_salt", offset_of!(S, s_encrypt_pw_salt), 16, Uuid),
    f("lpf_ino", offset_of!(S, s_lpf_ino), 4, Uint),
    f("checksum_seed", offset_of!(S, s_checksum_seed), 4, Uint),
    f("first_error_errcode", offset_of!(S, s_first_error_errcode), 1, Uint),
    f("last_error_errcode", offset_of!(S, s_last_error_errcode), 1, Uint),
    f("encoding", offset_of!(S, s_encoding), 2, Uint),
    f("encoding_flags", offset_of!(S, s_encoding_flags), 2, Uint),
    f("orphan_file_inum", offset_of!(S, s_orphan_file_inum), 4, Uint),
    f("checksum", offset_of!(S, s_checksum), 4, Checksum),
];

/// `struct ext4_inode`, as `set_inode_field` names it.
pub static INODE: &[Field] = &[
    f("mode", offset_of!(I, i_mode), 2, Uint),
    f("uid", offset_of!(I, i_uid), 2, Uint).hi(offset_of!(I, i_uid_high), 2),
    f("size", offset_of!(I, i_size_lo), 4, Uint).hi(offset_of!(I, i_size_high), 4),
    f("atime", offset_of!(I, i_atime), 4, InodeTime).hi(offset_of!(I, i_atime_extra), 4),
    f("ctime", offset_of!(I, i_ctime), 4, InodeTime).hi(offset_of!(I, i_ctime_extra), 4),
    f("mtime", offset_of!(I, i_mtime), 4, InodeTime).hi(offset_of!(I, i_mtime_extra), 4),
    f("dtime", offset_of!(I, i_dtime), 4, InodeTime),
    f("gid", offset_of!(I, i_gid), 2, Uint).hi(offset_of!(I, i_gid_high), 2),
    f("links_count", offset_of!(I, i_links_count), 2, Uint),
    f("blocks", offset_of!(I, i_blocks_lo), 4, Uint).hi(offset_of!(I, i_blocks_high), 2),
    f("flags", offset_of!(I, i_flags), 4, Uint),
    f("version", offset_of!(I, i_version_lo), 4, Uint).hi(offset_of!(I, i_version_hi), 4),
    f("block", offset_of!(I, i_block), 4, Uint).array(15),
    f("generation", offset_of!(I, i_generation), 4, Uint),
    f("file_acl", offset_of!(I, i_file_acl_lo), 4, Uint).hi(offset_of!(I, i_file_acl_high), 2),
    f("faddr", offset_of!(I, i_obso_faddr), 4, Uint),
    f("checksum", offset_of!(I, i_checksum_lo), 2, Checksum).hi(offset_of!(I, i_checksum_hi), 2),
    f("extra_isize", offset_of!(I, i_extra_isize), 2, Uint),
    f("ctime_extra", offset_of!(I, i_ctime_extra), 4, Uint),
    f("mtime_extra", offset_of!(I, i_mtime_extra), 4, Uint),
    f("atime_extra", offset_of!(I, i_atime_extra), 4, Uint),
    f("crtime", offset_of!(I, i_crtime), 4, InodeTime).hi(offset_of!(I, i_crtime_extra), 4),
    f("crtime_extra", offset_of!(I, i_crtime_extra), 4, Uint),
    f("projid", offset_of!(I, i_projid), 4, Uint),
];

/// `struct ext4_group_desc`, as `set_bg` names it; the `_hi` halves exist
/// only in 64-byte descriptors.
pub static GROUP_DESC: &[Field] = &[
    f("block_bitmap", offset_of!(G, bg_block_bitmap_lo), 4, Uint).hi(offset_of!(G, bg_block_bitmap_hi), 4),
    f("inode_bitmap", offset_of!(G, bg_inode_bitmap_lo), 4, Uint).hi(offset_of!(G, bg_inode_bitmap_hi), 4),
    f("inode_table", offset_of!(G, bg_inode_table_lo), 4, Uint).hi(offset_of!(G, bg_inode_table_hi), 4),
    f("free_blocks_count", offset_of!(G, bg_free_blocks_count_lo), 2, Uint)
        .hi(offset_of!(G, bg_free_blocks_count_hi), 2),
    f("free_inodes_count", offset_of!(G, bg_free_inodes_count_lo), 2, Uint)
        .hi(offset_of!(G, bg_free_inodes_count_hi), 2),
    f("used_dirs_count", offset_of!(G, bg_used_dirs_count_lo), 2, Uint).hi(offset_of!(G, bg_used_dirs_count_hi), 2),
    f("flags", offset_of!(G, bg_flags), 2, Uint),
    f("exclude_bitmap", offset_of!(G, bg_exclude_bitmap_lo), 4, Uint).hi(offset_of!(G, bg_exclude_bitmap_hi), 4),
    f("block_bitmap_csum", offset_of!(G, bg_block_bitmap_csum_lo), 2, Uint)
        .hi(offset_of!(G, bg_block_bitmap_csum_hi), 2),
    f("inode_bitmap_csum", offset_of!(G, bg_inode_bitmap_csum_lo), 2, Uint)
        .hi(offset_of!(G, bg_inode_bitmap_csum_hi), 2),
    f("itable_unused", offset_of!(G, bg_itable_unused_lo), 2, Uint).hi(offset_of!(G, bg_itable_unused_hi), 2),
    f("checksum", offset_of!(G, bg_checksum), 2, Checksum),
];
