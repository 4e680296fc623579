//! The ext4kit engine: opens an ext2/ext3/ext4 image on a [`BlockDevice`],
//! reads it — paths, directories (linear, htree, inline), files through
//! extent trees of any depth or ext2/3 block maps, symbolic links, device
//! nodes, extended attributes — and changes it: every operation of
//! [`Filesystem`] that writes (`create`, `write`, `truncate`, `fallocate`, `setattr`,
//! `link`, `unlink`, `rmdir`, `rename`, `set_xattr`, `remove_xattr`,
//! `set_flags`, `touch_atime`) is one transaction that commits whole or
//! leaves the image untouched. A [`Batch`] runs many of them in one
//! transaction that commits every few thousand operations (image building:
//! `mkfs -d`, `import`), so blocks they share are written once per commit.
//!
//! Open files are counted (`open_file`, `release_file`): an inode whose last
//! name goes while it is open stays on the orphan list until its last
//! release, as in the kernel, and a writable open finishes the orphans a
//! crash left. The superblock says "not clean" from a session's first write
//! until `unmount` (or drop).
//!
//! Layering: this crate calls [`ext4kit_format`] for every on-disk structure
//! and a [`BlockDevice`] for every byte; it never touches the host file
//! system beyond the device it is given. Front ends (the `ext4kit` CLI, the
//! FUSE adapter) call only its public API.
//!
//! Make a file system in memory, write to it, read it back:
//!
//! ```
//! use ext4kit_engine::device::MemDevice;
//! use ext4kit_engine::mkfs::{MkfsOptions, mkfs};
//! use ext4kit_engine::{Attr, Filesystem, NodeKind, OpenOptions, ROOT_INO};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let dev = MemDevice::new(vec![0; 16 << 20]);
//! mkfs(&dev, &MkfsOptions::default())?;
//! let fs = Filesystem::open(Box::new(dev), OpenOptions::default())?;
//! let attr = Attr { perm: 0o755, uid: 0, gid: 0 };
//! let dir = fs.create(ROOT_INO, b"notes", NodeKind::Directory, attr)?;
//! let file = fs.create(dir.ino, b"hello.txt", NodeKind::Regular, Attr { perm: 0o644, ..attr })?;
//! fs.write(file.ino, 0, b"hello, ext4")?;
//! fs.sync()?;
//! let inode = fs.resolve(b"/notes/hello.txt")?;
//! assert_eq!(fs.read_all(&inode, 1 << 20)?, b"hello, ext4");
//! # Ok(()) }
//! ```
//!
//! An image file is opened with `device::FileDevice::open(path, writable)`.

mod alloc;
pub mod backup_sb;
mod batch;
mod cache;
mod clock;
mod crypt;
mod delalloc;
pub mod device;
pub mod dir;
pub mod error;
pub mod frag;
mod fs;
mod fs_error;
pub mod image;
pub mod inode;
mod inode_locks;
pub mod inspect;
pub mod journal;
pub mod mkfs;
pub mod mmp;
mod mount;
mod ops;
mod ordered;
mod orphan;
mod path;
mod quota;
pub mod raw_edit;
mod readonly;
pub mod resize;
mod session;
mod statfs;
pub mod tune;
mod txn;
pub mod verity;
mod writeback;

pub use alloc::{AllocOptions, BlockAllocator, InodeAllocator, MbStats, set_caller_pid};
pub use backup_sb::SuperblockAt;
pub use batch::{Batch, BatchOptions};
pub use crypt::{KeyStatus, Keys, MasterKey, Policy};
pub use device::BlockDevice;
pub use error::{Error, Location, Result};
pub use fs::{DirtyJournal, Filesystem, OpenOptions};
pub use inode::inline::InlinePolicy;
pub use inode::map::Run;
pub use inode::{Inode, Metadata, ROOT_INO};
pub use mount::{BIGALLOC_NO_EXTENTS, READ_ONLY_DEVICE};
pub use ops::FallocMode;
pub use ops::{AtimePolicy, Attr, NodeKind, RemoveTreeError, RenameFlags, SetAttr, XattrSet};
pub use ops::{DEFAULT_CHUNK_BLOCKS, DefragOptions, DefragOutcome, DefragSkip};
pub use quota::{PROJINHERIT, QuotaLimits, QuotaSwitch, set_caller_uid};
pub use statfs::StatFs;
/// Inode flag masks of `FS_IOC_GETFLAGS`/`FS_IOC_SETFLAGS`.
pub mod flags {
    pub use crate::ops::{USER_MODIFIABLE, USER_VISIBLE};
}
