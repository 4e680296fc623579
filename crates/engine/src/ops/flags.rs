//! Inode flags as `FS_IOC_GETFLAGS`/`FS_IOC_SETFLAGS` see them
//! (`ext4_fileattr_set`, `ext4_ioctl_setflags`), what `IMMUTABLE` and
//! `APPEND` forbid (the VFS's `may_delete`, `vfs_link`, `xattr_permission`
//! and `ext4_setattr` checks, all `EPERM`), and access-time updates
//! (`touch_atime` with the `noatime`/`relatime`/`strictatime` policies and
//! the per-inode `NOATIME` flag).

use ext4kit_format::inode::{FileType, Timestamp, flags as fl};

use crate::clock;
use crate::error::{Error, Result};
use crate::fs::Filesystem;
use crate::inode::Inode;
use crate::inode::write::touch_ctime;
use crate::txn::Txn;

/// `EXT4_JOURNAL_DATA_FL`.
const JOURNAL_DATA: u32 = 0x4000;
/// `EXT4_DIRSYNC_FL`, directories only.
const DIRSYNC: u32 = 0x1_0000;
/// `EXT4_TOPDIR_FL`, directories only.
const TOPDIR: u32 = 0x2_0000;
/// `EXT4_PROJINHERIT_FL`, directories only.
const PROJINHERIT: u32 = 0x2000_0000;
/// `EXT4_NODUMP_FL`.
const NODUMP: u32 = 0x40;

/// Flags `FS_IOC_SETFLAGS` may change (`EXT4_FL_USER_MODIFIABLE`): SECRM,
/// UNRM, COMPR, SYNC, IMMUTABLE, APPEND, NODUMP, NOATIME, JOURNAL_DATA,
/// NOTAIL, DIRSYNC, TOPDIR, EXTENTS, the old EOFBLOCKS bit, DAX,
/// PROJINHERIT and CASEFOLD.
pub const USER_MODIFIABLE: u32 = 0x624B_C0FF;
/// Flags `FS_IOC_GETFLAGS` shows (`EXT4_FL_USER_VISIBLE`): the modifiable
/// ones plus DIRTY, COMPRBLK, NOCOMPR, ENCRYPT, INDEX, VERITY, INLINE_DATA.
pub const USER_VISIBLE: u32 = 0x725B_DFFF;

/// When [`Filesystem::touch_atime`] stores a new access time (the mount
/// options `noatime`, `relatime`, `strictatime`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum AtimePolicy {
    /// Never.
    NoAtime,
    /// When the access time is not after the modification or change time,
    /// or is a day old (the kernel's `relatime_need_update`; its default).
    #[default]
    Relatime,
    /// On every access.
    Strict,
}

/// `EPERM` unless `inode` is neither immutable nor append-only: what
/// removing or renaming it (or a name in it, for a directory), linking to
/// it and changing its attributes require.
pub(crate) fn require_changeable(inode: &Inode) -> Result<()> {
    require_mutable(inode)?;
    if inode.raw.has_flag(fl::APPEND) {
        return Err(Error::NotPermitted(format!("inode {} is append-only", inode.ino)));
    }
    Ok(())
}

/// `EPERM` for a change of a verity file's data or size (fs-verity's
/// `fsverity_file_open` and `fsverity_prepare_setattr`).
pub(crate) fn require_not_verity(inode: &Inode) -> Result<()> {
    if crate::verity::is_verity(inode) {
        return Err(Error::NotPermitted(format!(
            "inode {} has fs-verity: its data cannot change",
            inode.ino
        )));
    }
    Ok(())
}

/// `EPERM` when `inode` is immutable (no change of any kind).
pub(crate) fn require_mutable(inode: &Inode) -> Result<()> {
    if inode.raw.has_flag(fl::IMMUTABLE) {
        return Err(Error::NotPermitted(format!("inode {} is immutable", inode.ino)));
    }
    Ok(())
}

/// The check at the top of a data write at `offset`: none to an immutable
/// file, none below the end of an append-only one.
pub(crate) fn check_write(inode: &Inode, offset: u64) -> Result<()> {
    require_mutable(inode)?;
    require_not_verity(inode)?;
    if inode.raw.has_flag(fl::APPEND) && offset < inode.size() {
        return Err(Error::NotPermitted(format!(
            "inode {} is append-only: write at {offset} below its end",
            inode.ino
        )));
    }
    Ok(())
}

/// The flags of `flags` that apply to `ft` (`ext4_mask_flags`): all for
/// directories, all but the directory-only ones for regular files,
/// NODUMP and NOATIME for the rest.
fn mask_for(ft: FileType, flags: u32) -> u32 {
    match ft {
        FileType::Directory => flags,
        FileType::Regular => flags & !(DIRSYNC | TOPDIR | fl::CASEFOLD | PROJINHERIT),
        _ => flags & (NODUMP | fl::NOATIME),
    }
}

impl Filesystem {
    /// Whether `inode` may be opened as asked (the VFS's `may_open`): an
    /// immutable file not for writing, an append-only one for writing only
    /// with `O_APPEND` and never with `O_TRUNC`. A FUSE server must check
    /// this itself, since the kernel does not see ext4's flags.
    ///
    /// # Errors
    /// [`Error::NotPermitted`].
    pub fn check_open(&self, inode: &Inode, write: bool, append: bool, truncate: bool) -> Result<()> {
        let f = inode.raw.flags();
        let refuse = |why: &str| Err(Error::NotPermitted(format!("inode {}: {why}", inode.ino)));
        if f & fl::IMMUTABLE != 0 && (write || truncate) {
            return refuse("immutable");
        }
        if f & fl::VERITY != 0 && (write || truncate) {
            return refuse("fs-verity file");
        }
        if f & fl::APPEND != 0 && ((write && !append) || truncate) {
            return refuse("append-only: open for appending");
        }
        Ok(())
    }

    /// Sets the user-changeable flags of `ino` (`FS_IOC_SETFLAGS`):
    /// visible but unchangeable bits are ignored (chattr passes back what
    /// `GETFLAGS` gave); ctime becomes now. `privileged` stands for
    /// `CAP_LINUX_IMMUTABLE` (IMMUTABLE, APPEND) and `CAP_SYS_RESOURCE`
    /// (JOURNAL_DATA); checking ownership is the caller's part.
    ///
    /// # Errors
    /// - [`Error::Unsupported`] for a bit outside [`USER_VISIBLE`], a flag
    ///   that does not apply to the file type, switching EXTENTS (the
    ///   kernel migrates the body), CASEFOLD without the casefold feature;
    /// - [`Error::NotEmpty`] switching CASEFOLD on a non-empty directory;
    /// - [`Error::NotPermitted`] changing IMMUTABLE, APPEND or
    ///   JOURNAL_DATA unprivileged, or any other flag of an immutable inode.
    pub fn set_flags(&self, ino: u32, flags: u32, privileged: bool) -> Result<Inode> {
        self.noting_errors("set_flags", self.set_flags_in_txn(ino, flags, privileged))
    }

    fn set_flags_in_txn(&self, ino: u32, flags: u32, privileged: bool) -> Result<Inode> {
        self.flush_file(ino)?;
        let mut txn = Txn::begin(self)?;
        let mut inode = txn.inode(ino)?;
        let old = inode.raw.flags();
        let new = checked_flags(&inode, old, flags, privileged)?;
        if (old ^ new) & fl::CASEFOLD != 0 {
            check_casefold_switch(&txn, &inode)?;
        }
        if new & !old & fl::CASEFOLD != 0 {
            self.check_casefold_on_encrypted(&inode)?;
        }
        if (old ^ new) & JOURNAL_DATA != 0 {
            // EXT4_FC_REASON_JOURNAL_FLAG_CHANGE.
            txn.fc_ineligible("journal flag changed");
        }
        inode.raw.i_flags.set((old & !USER_MODIFIABLE) | new);
        touch_ctime(&mut inode.raw, clock::now());
        txn.write_inode(&mut inode)?;
        txn.commit()?;
        Ok(inode)
    }

    /// Updates the access time of `ino` to now if `policy` and the inode's
    /// NOATIME flag call for it (`touch_atime`); returns whether it did. On
    /// a read-only image nothing is written.
    ///
    /// # Errors
    /// Reading or writing the inode.
    pub fn touch_atime(&self, ino: u32, policy: AtimePolicy) -> Result<bool> {
        if policy == AtimePolicy::NoAtime || self.read_only_reason.is_some() {
            return Ok(false);
        }
        // Most reads need no update: decide on the committed inode without
        // the writer lock, and take it only to write (deciding again there).
        let seen = self.inode(ino)?;
        if seen.raw.has_flag(fl::NOATIME) || !atime_due(&seen, policy, clock::now()) {
            return Ok(false);
        }
        let mut txn = Txn::begin(self)?;
        let mut inode = txn.inode(ino)?;
        let now = clock::now();
        if inode.raw.has_flag(fl::NOATIME) || !atime_due(&inode, policy, now) {
            return Ok(false);
        }
        let (s, e) = clock::encode(now);
        inode.raw.i_atime.set(s);
        inode.raw.i_atime_extra.set(e);
        txn.write_inode(&mut inode)?;
        txn.commit()?;
        Ok(true)
    }
}

/// The modifiable part of `want` after the kernel's checks against `old`.
fn checked_flags(inode: &Inode, old: u32, want: u32, privileged: bool) -> Result<u32> {
    let unsupported = |what: &str| Err(Error::Unsupported(format!("inode {}: {what}", inode.ino)));
    if want & !USER_VISIBLE != 0 {
        return unsupported(&format!("flags {:#x} cannot be set", want & !USER_VISIBLE));
    }
    let new = want & USER_MODIFIABLE;
    if mask_for(inode.file_type()?, new) != new {
        return unsupported("flags that do not apply to this file type");
    }
    let changed = (old ^ new) & USER_MODIFIABLE;
    let denied = |what: &str| Err(Error::NotPermitted(format!("inode {}: {what}", inode.ino)));
    if old & fl::IMMUTABLE != 0 && new & fl::IMMUTABLE != 0 && changed != 0 {
        return denied("flags of an immutable inode");
    }
    if changed & (fl::IMMUTABLE | fl::APPEND) != 0 && !privileged {
        return denied("changing IMMUTABLE or APPEND needs CAP_LINUX_IMMUTABLE");
    }
    if changed & JOURNAL_DATA != 0 && !privileged {
        return denied("changing JOURNAL_DATA needs CAP_SYS_RESOURCE");
    }
    if changed & fl::EXTENTS != 0 {
        return unsupported("switching between extents and block maps");
    }
    Ok(new)
}

/// Whether CASEFOLD may be switched on `inode` (`ext4_ioctl_setflags`):
/// the file system must have the casefold feature (else `EOPNOTSUPP`),
/// and the directory must be empty (`ENOTEMPTY`), since its names and
/// htree hashes would otherwise compare the old way.
fn check_casefold_switch(txn: &Txn<'_>, inode: &Inode) -> Result<()> {
    let feature = ext4kit_format::features::IncompatFeatures::CASEFOLD;
    if !txn.fs.geo.features.incompat.contains(feature) {
        return Err(Error::Unsupported(format!(
            "inode {}: CASEFOLD without the casefold feature",
            inode.ino
        )));
    }
    if !inode.is_dir() {
        return Err(Error::NotDir(format!("inode {}", inode.ino)));
    }
    if !txn.dir_is_empty(inode)? {
        return Err(Error::NotEmpty(format!("inode {}", inode.ino)));
    }
    Ok(())
}

/// Whether `policy` wants a new access time now (`atime_needs_update`).
fn atime_due(inode: &Inode, policy: AtimePolicy, now: Timestamp) -> bool {
    let atime = inode.raw.atime();
    if atime == now {
        return false;
    }
    match policy {
        AtimePolicy::NoAtime => false,
        AtimePolicy::Strict => true,
        AtimePolicy::Relatime => {
            atime <= inode.raw.mtime() || atime <= inode.raw.ctime() || now.secs - atime.secs >= 24 * 60 * 60
        }
    }
}
