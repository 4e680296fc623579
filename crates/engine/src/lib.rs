//! The ext4kit engine: opens an ext2/ext3/ext4 image on a [`BlockDevice`],
//! reads it — paths, directories (linear, htree, inline), files through
//! extent trees of any depth or ext2/3 block maps, symbolic links, device
//! nodes, extended attributes — and changes it: every operation of
//! [`Filesystem`] that writes (`create`, `write`, `truncate`, `setattr`,
//! `link`, `unlink`, `rmdir`, `rename`, `set_xattr`, `remove_xattr`) is one
//! transaction that commits whole or leaves the image untouched.
//!
//! Layering: this crate calls [`ext4kit_format`] for every on-disk structure
//! and a [`BlockDevice`] for every byte; it never touches the host file
//! system beyond the device it is given. Front ends (the `ext4kit` CLI, the
//! FUSE adapter) call only its public API.
//!
//! ```no_run
//! use ext4kit_engine::{Filesystem, OpenOptions, device::FileDevice};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let dev = FileDevice::open("disk.img".as_ref(), false)?;
//! let fs = Filesystem::open(Box::new(dev), OpenOptions::default())?;
//! let inode = fs.resolve(b"/etc/hostname")?;
//! let mut buf = vec![0u8; inode.size() as usize];
//! let n = fs.read_at(&inode, 0, &mut buf)?;
//! println!("{}", String::from_utf8_lossy(&buf[..n]));
//! # Ok(()) }
//! ```

mod alloc;
mod cache;
mod clock;
pub mod device;
pub mod dir;
pub mod error;
mod fs;
pub mod inode;
pub mod journal;
pub mod mkfs;
mod mount;
mod ops;
mod path;
mod txn;

pub use device::BlockDevice;
pub use error::{Error, Location, Result};
pub use fs::{DirtyJournal, Filesystem, OpenOptions};
pub use inode::map::Run;
pub use inode::{Inode, Metadata, ROOT_INO};
pub use ops::{Attr, NodeKind, RenameFlags, SetAttr, XattrSet};
