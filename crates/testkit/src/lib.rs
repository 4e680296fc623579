//! Test infrastructure for ext4kit's integration tests: everything needed to
//! prove that what ext4kit exports from an image is exactly what the Linux
//! kernel shows for the same image.
//!
//! - [`fixture`]: a deterministic, seeded source tree with every object ext4
//!   stores (files of edge sizes, sparse files, fast/slow/dangling symlinks,
//!   hard links, FIFOs, device nodes, a socket, small/large/big directories,
//!   odd names, xattrs in the inode, in a block and shared, setuid/setgid/
//!   sticky modes, uid/gid variety, nanosecond mtimes), and files fragmented
//!   by the kernel into extent trees of depth >= 2.
//! - [`image`]: an image matrix (ext2, ext3, ext4 and its variants: 1 KiB and
//!   64 KiB blocks, no metadata_csum, 64bit+meta_bg, inline_data, 128-byte
//!   inodes, orphan_file+metadata_csum_seed), populated by `mke2fs -d` or by
//!   the kernel (loop mount + `cp -a`), every image checked by `e2fsck -fn`.
//! - [`mount`]: [`mount::LoopMount`], an RAII kernel loop mount, and
//!   [`mount::can_loop_mount`], which says why one is impossible.
//! - [`compare`]: [`compare::compare_trees`], a structured tree comparison
//!   (types, modes, owners, mtimes to the nanosecond, contents with the first
//!   differing offset, symlink targets, device numbers, xattrs, hard-link
//!   groups).
//! - [`peer`]: the e2fsprogs test-suite images from the shared peer data,
//!   decompressed into a cache.
//! - [`tools`]: `e2fsck -fn`, `debugfs -R`, extent-depth parsing, and
//!   [`tools::require_tool`] / [`tools::skip_unless`] for loud skips.
//!
//! # Requirements
//!
//! Kernel-side tests need root, a loop device, ext4 in `/proc/filesystems`
//! and e2fsprogs (`mkfs.ext2/3/4`, `e2fsck`, `debugfs`) plus `mount`, `umount`
//! and GNU `cp`. Tests check with [`mount::can_loop_mount`] and
//! [`tools::require_tool`] first and, when something is missing, print a loud
//! `SKIPPED: <reason>` line to stderr and return:
//!
//! ```no_run
//! use ext4kit_testkit::{compare, fixture, image, mount, tools};
//!
//! # fn main() -> std::io::Result<()> {
//! let Some(()) = tools::skip_unless(mount::can_loop_mount()) else { return Ok(()) };
//! let work = tempfile::tempdir()?;
//! let src = work.path().join("src");
//! fixture::build_tree(&src, &fixture::TreeOptions::small())?;
//! let spec = image::ImageSpec::new("ext4", image::FsType::Ext4, 256 << 20, &["-b", "4096"]);
//! let img = image::Image::kernel(&spec, Some(&src), work.path(), &Default::default())?;
//! let mnt = img.mount_ro()?;
//! let opts = compare::CompareOptions {
//!     exclude: vec!["ext4kit-fragmented".into()],
//!     ..Default::default()
//! };
//! let diffs = compare::compare_trees(&src, mnt.path(), opts);
//! assert!(diffs.is_empty(), "{}", compare::format_differences(&diffs));
//! # Ok(())
//! # }
//! ```
//!
//! Use it as a dev-dependency only; it is not published.

pub mod compare;
pub mod fixture;
pub mod fscrypt;
pub mod fuse;
pub mod image;
pub mod mount;
pub mod nbd;
pub mod peer;
pub mod rng;
pub mod skip;
pub mod tls;
pub mod tools;
