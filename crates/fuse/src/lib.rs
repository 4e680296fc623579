//! The FUSE front end of ext4kit: serves an ext2/3/4 image through
//! `/dev/fuse` so every program can use it as a file system.
//!
//! It owns the translation between FUSE requests and the engine's library
//! API — inode numbers, handles, `stat` fields, `-o` options, the `errors=`
//! policy — and the life of a mount (signals, clean unmount). It holds no
//! file-system logic: every rule about the on-disk format is the engine's
//! ([`ext4kit_engine`]). It may call the engine and `fuser`; the CLI calls
//! [`serve`].
//!
//! Transports (`transport=`): this crate's own (`transport`), which reads
//! `/dev/fuse` itself and answers FUSE_STATX (birth time); or `fuser` 0.18.
//! Both mount with `mount(2)` as root and through `fusermount3` otherwise.

mod adapter;
mod attr;
mod bdi;
pub mod defrag_request;
mod handles;
mod host_space;
mod key_caches;
pub mod key_request;
pub mod options;
mod poll;
pub mod remount_request;
pub mod resize_request;
mod session;
mod space;
pub mod swap;
pub mod sync_request;
mod transport;

pub use adapter::Ext4Fuse;
pub use options::{AtimeMode, CpuLatencyMode, IdMap, MountConfig, OnError, PreCheck, Transport};
pub use session::{resolve_mount_point, serve, server_lock_path};
pub use swap::Reopen;
