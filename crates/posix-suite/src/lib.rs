//! Test machinery that judges a mounted file system from the outside, so the
//! same checks run on the kernel's own ext4 (a loop mount), on tmpfs, and on
//! `ext4kit mount IMAGE MOUNTPOINT` (FUSE). Dev-only; not published.
//!
//! Two tools, both in the `ext4kit-posix` binary:
//!
//! - **POSIX behaviour suite** ([`suite`], [`checks`]):
//!   `ext4kit-posix run DIR [--filter NAME[,NAME…]] [--strict] [--keep] [--list]`
//!   runs named checks, each in its own fresh directory under
//!   `DIR/ext4kit-posix.<pid>/`, and prints one line per check: `ok NAME`,
//!   `SKIP NAME: why` (the file system or machine lacks something: always
//!   said out loud) or `FAIL NAME: what differed`. The exit status is 1 when
//!   any check failed (with `--strict`, also when any was skipped).
//!   Permission checks need root: the binary re-executes itself as uid/gid
//!   1000 (`ext4kit-posix probe OP PATH…`, one system call per child, answer
//!   `ok …`/`err ERRNO`) so the file system sees an unprivileged caller;
//!   lock checks use the same probes as a second process.
//! - **Data-integrity exerciser** ([`exercise`]):
//!   `ext4kit-posix exercise DIR --ops N --seed S [--files K] [--max-size BYTES]
//!   [--self-test-corrupt] [--keep]` runs seeded random pwrite / read-back /
//!   ftruncate / fallocate (punch, zero range, mode 0, keep size) / fsync /
//!   close-reopen / rename / unlink-recreate operations over K files,
//!   checking each against an in-memory sparse [`shadow::Shadow`] and
//!   comparing every file in full at the end. On a mismatch it prints the
//!   seed, op index, a replay command and the last 40 ops, and exits 1.
//!
//! # Pointing it at a mount
//!
//! ```text
//! # kernel ext4, for reference
//! truncate -s 1G /tmp/t.img && mkfs.ext4 -q /tmp/t.img
//! mount -o loop /tmp/t.img /mnt/k && ext4kit-posix run /mnt/k
//! # the FUSE front end, same checks
//! ext4kit mount /tmp/t.img /mnt/f & ext4kit-posix run /mnt/f --strict
//! ext4kit-posix exercise /mnt/f --ops 100000 --seed 1
//! umount /mnt/f && e2fsck -fn /tmp/t.img
//! ```
//!
//! Run as root for the permission, ownership, device-node and
//! `chattr` checks (they skip loudly otherwise); uid 1000 must be able to
//! execute the binary and search every directory above DIR. `setfacl` /
//! `getfacl` (package `acl`) and `chattr`/`lsattr` (e2fsprogs) are used when
//! present. The crate's tests run everything on a kernel ext4 loop mount and
//! on tmpfs, where every check must pass: that is what validates the suite.

pub mod checks;
pub mod exercise;
pub mod probe;
pub mod shadow;
pub mod suite;
pub mod util;
