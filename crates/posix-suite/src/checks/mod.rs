//! The checks, one module per area; [`all`] lists them in run order.

mod acl;
mod attrs;
mod dirs;
mod flags;
mod io;
mod links;
mod locks;
mod open;
mod perms;
mod rename;
mod space;
mod xattr;

use crate::suite::Check;

macro_rules! checks {
    ($($name:literal => $f:path),* $(,)?) => {
        vec![$(Check { name: $name, run: $f }),*]
    };
}

/// Every check, by name.
pub fn all() -> Vec<Check> {
    checks![
        "open_creat_excl" => open::creat_excl,
        "open_trunc" => open::trunc,
        "open_append" => open::append,
        "open_directory" => open::directory,
        "open_nofollow" => open::nofollow,
        "open_path_errors" => open::path_errors,
        "io_read_write" => io::read_write,
        "io_truncate" => io::truncate,
        "io_unlinked_open" => io::unlinked_open,
        "dir_mkdir_rmdir" => dirs::mkdir_rmdir,
        "dir_unlink_dir" => dirs::unlink_dir,
        "dir_readdir_basic" => dirs::readdir_basic,
        "dir_readdir_many_seekdir" => dirs::readdir_many,
        "dir_readdir_unlink_during" => dirs::readdir_unlink_during,
        "rename_basic" => rename::basic,
        "rename_noreplace" => rename::noreplace,
        "rename_exchange" => rename::exchange,
        "rename_dir_errors" => rename::dir_errors,
        "link_hardlinks" => links::hardlinks,
        "link_symlinks" => links::symlinks,
        "link_mknod" => links::mknod_nodes,
        "attr_stat_fields" => attrs::stat_fields,
        "attr_time_updates" => attrs::time_updates,
        "attr_utimensat" => attrs::utimens,
        "attr_chmod_chown" => attrs::chmod_chown,
        "attr_statfs" => attrs::statfs,
        "attr_fsync" => attrs::fsync,
        "xattr_user" => xattr::user_xattrs,
        "xattr_posix_acl" => acl::posix_acl,
        "space_falloc_default" => space::falloc_default,
        "space_falloc_keep_size" => space::falloc_keep_size,
        "space_falloc_punch_hole" => space::falloc_punch,
        "space_falloc_zero_range" => space::falloc_zero_range,
        "space_seek_data_hole" => space::seek_data_hole,
        "space_copy_file_range" => space::copy_range,
        "lock_flock" => locks::flock,
        "lock_posix" => locks::posix_locks,
        "lock_ofd" => locks::ofd_locks,
        "flags_immutable" => flags::immutable,
        "flags_append_only" => flags::append_only,
        "perm_mode_bits" => perms::mode_bits,
        "perm_dir_access" => perms::dir_access,
        "perm_sticky" => perms::sticky,
        "perm_setgid_dir" => perms::setgid_dir,
        "perm_suid_cleared_on_write" => perms::suid_cleared,
        "perm_owner_ops" => perms::owner_ops,
        "perm_excl_race" => perms::excl_race,
    ]
}
