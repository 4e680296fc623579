//! Deterministic source trees holding every kind of object ext4 stores, and
//! files fragmented by the kernel into deep extent trees.
//!
//! [`build_tree`] lays out, under a root directory:
//!
//! | directory   | content |
//! |-------------|---------|
//! | `files/`    | regular files of 0, 1, 4095, 4096, 4097 bytes and ~1 MiB |
//! | `bulk/`     | random-sized files adding up to [`TreeOptions::bulk_bytes`] |
//! | `sparse/`   | holes at start, middle and end, data far out, a hole-only file |
//! | `symlinks/` | fast (< 60 bytes), slow (60..1000 bytes), optionally long (up to 4000) and dangling symlinks |
//! | `links/`    | hard-link groups of 2 and 3 across directories |
//! | `special/`  | FIFO, char and block devices (root only), unix socket (optional) |
//! | `dirs/`     | directories with 1, 100 and [`TreeOptions::big_dir_entries`] entries |
//! | `names/`    | 255-byte names, non-ASCII UTF-8 names, names with arbitrary bytes |
//! | `xattrs/`   | small in-inode `user.*` xattrs, a large one forcing an xattr block, files sharing identical xattrs |
//! | `modes/`    | setuid, setgid, sticky and unusual permission bits |
//! | `owners/`   | various uid/gid (root only) |
//!
//! Every entry (directories included, the root too) gets a seeded mtime and
//! atime with nanoseconds, set after all content so that it stays put.
//!
//! mke2fs 1.47 `-d` notes (checked on this machine): it copies sockets; it
//! fails on a symlink longer than the block size minus one (so long symlinks
//! are limited by [`TreeOptions::min_block_size`]); it drops the nanoseconds
//! of timestamps.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, PermissionsExt};
use std::path::{Path, PathBuf};

use rustix::fs::Timespec;
use rustix::fs::{AtFlags, CWD, FileType, Mode, Timestamps, XattrFlags};

use crate::rng::Rng;

/// What [`build_tree`] creates and how big it gets.
#[derive(Debug, Clone)]
pub struct TreeOptions {
    /// Seed of every random choice: the same seed gives the same tree.
    pub seed: u64,
    /// Total bytes of the random files in `bulk/` (tens of MiB for a full
    /// run, a few MiB to keep CI quick).
    pub bulk_bytes: u64,
    /// Entries of the big directory `dirs/big` (50,000 in a full run; 0 leaves
    /// the directory out).
    pub big_dir_entries: usize,
    /// The smallest block size of the images the tree must fit: limits slow
    /// symlinks to `min_block_size - 1` bytes (the kernel and mke2fs refuse
    /// longer ones) and the large xattr so that it fits one xattr block.
    pub min_block_size: u32,
    /// Also create symlinks of 2,000 and 4,000 bytes (when `min_block_size`
    /// allows). mke2fs `-d` fails on symlinks longer than a block.
    pub long_symlinks: bool,
    /// Create a unix socket (mke2fs 1.47 `-d` and `cp -a` both copy it).
    pub socket: bool,
    /// Create char/block device nodes (needs root; skipped with a message
    /// otherwise).
    pub device_nodes: bool,
    /// chown entries to various uid/gid (needs root; skipped otherwise).
    pub ownership: bool,
    /// Offset of the data block in `sparse/far_data` (1 GiB by default).
    pub far_offset: u64,
    /// Size of `sparse/hole_only`, made with `set_len` (no data at all).
    pub hole_only_len: u64,
}

impl Default for TreeOptions {
    fn default() -> Self {
        Self::full()
    }
}

impl TreeOptions {
    /// The full tree: ~32 MiB of bulk data, a 50,000-entry directory, long
    /// symlinks, all special files. Needs images with 4 KiB blocks or more.
    pub fn full() -> Self {
        TreeOptions {
            seed: 0x00e4_7c17,
            bulk_bytes: 32 << 20,
            big_dir_entries: 50_000,
            min_block_size: 4096,
            long_symlinks: true,
            socket: true,
            device_nodes: true,
            ownership: true,
            far_offset: 1 << 30,
            hole_only_len: 3 << 30,
        }
    }

    /// A quick tree for CI: 2 MiB of bulk data, a 3,000-entry directory
    /// (still a multi-block indexed directory), no long symlinks, and sized to
    /// fit 1 KiB-block images.
    pub fn small() -> Self {
        TreeOptions {
            bulk_bytes: 2 << 20,
            big_dir_entries: 3000,
            min_block_size: 1024,
            long_symlinks: false,
            ..Self::full()
        }
    }

    /// The length of the large xattr value: ~3,000 bytes, less when the
    /// smallest block size could not hold it.
    pub fn large_xattr_len(&self) -> usize {
        3000.min(self.min_block_size as usize * 3 / 4)
    }
}

/// Counts of what [`build_tree`] created.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TreeStats {
    /// Directories, the root excluded.
    pub directories: usize,
    /// Regular files (each inode once, however many names it has).
    pub regular_files: usize,
    /// Regular files with at least one hole.
    pub sparse_files: usize,
    /// Bytes of data written (holes excluded).
    pub data_bytes: u64,
    /// Symlinks of fewer than 60 bytes (stored in the inode).
    pub fast_symlinks: usize,
    /// Symlinks of 60 bytes or more (stored in a block).
    pub slow_symlinks: usize,
    /// Symlinks whose target does not exist (also counted as fast/slow).
    pub dangling_symlinks: usize,
    /// Groups of names sharing one inode.
    pub hard_link_groups: usize,
    /// Extra names beyond the first in those groups.
    pub extra_hard_links: usize,
    /// FIFOs.
    pub fifos: usize,
    /// Character device nodes.
    pub char_devices: usize,
    /// Block device nodes.
    pub block_devices: usize,
    /// Unix sockets.
    pub sockets: usize,
    /// Extended attributes set (name/value pairs).
    pub xattrs: usize,
    /// Every name in the tree (directories included, root excluded).
    pub entries: usize,
    /// Things left out, with the reason (e.g. device nodes when not root).
    pub skipped: Vec<String>,
}

/// Builds the deterministic fixture tree under `root` (created if missing;
/// it should be empty). See the module documentation for the layout.
pub fn build_tree(root: &Path, opts: &TreeOptions) -> io::Result<TreeStats> {
    fs::create_dir_all(root)?;
    let mut b = Builder {
        root: root.to_path_buf(),
        rng: Rng::new(opts.seed),
        stats: TreeStats::default(),
        opts: opts.clone(),
        is_root: rustix::process::geteuid().is_root(),
    };
    b.files()?;
    b.bulk()?;
    b.sparse()?;
    b.symlinks()?;
    b.links()?;
    b.special()?;
    b.dirs()?;
    b.names()?;
    b.xattrs()?;
    b.modes()?;
    b.owners()?;
    // Timestamps last: every creation above changed some directory's mtime.
    let mut rng = Rng::new(opts.seed ^ 0x7133);
    set_times_post_order(root, &mut rng)?;
    for s in &b.stats.skipped {
        eprintln!("fixture: skipped {s}");
    }
    Ok(b.stats)
}

struct Builder {
    root: PathBuf,
    rng: Rng,
    stats: TreeStats,
    opts: TreeOptions,
    is_root: bool,
}

impl Builder {
    fn p(&self, rel: &str) -> PathBuf {
        self.root.join(rel)
    }

    fn dir(&mut self, rel: &str) -> io::Result<PathBuf> {
        let p = self.p(rel);
        fs::create_dir(&p)?;
        set_mode(&p, 0o755)?;
        self.stats.directories += 1;
        self.stats.entries += 1;
        Ok(p)
    }

    fn file(&mut self, path: &Path, data: &[u8], mode: u32) -> io::Result<()> {
        fs::write(path, data)?;
        set_mode(path, mode)?;
        self.stats.regular_files += 1;
        self.stats.entries += 1;
        self.stats.data_bytes += data.len() as u64;
        Ok(())
    }

    fn random_file(&mut self, path: &Path, len: usize) -> io::Result<()> {
        let data = self.rng.bytes(len);
        self.file(path, &data, 0o644)
    }

    fn files(&mut self) -> io::Result<()> {
        let d = self.dir("files")?;
        for (name, len) in [
            ("empty", 0usize),
            ("one", 1),
            ("b4095", 4095),
            ("b4096", 4096),
            ("b4097", 4097),
            ("mib", (1 << 20) + 123),
        ] {
            self.random_file(&d.join(name), len)?;
        }
        // Text content, so a human diff of a failure is readable.
        self.file(&d.join("text"), b"hello, ext4kit\n", 0o644)
    }

    fn bulk(&mut self) -> io::Result<()> {
        let d = self.dir("bulk")?;
        let mut left = self.opts.bulk_bytes;
        let mut i = 0;
        while left > 0 {
            let len = (1 + self.rng.below(4 << 20)).min(left);
            self.random_file(&d.join(format!("bulk-{i:03}")), len as usize)?;
            left -= len;
            i += 1;
        }
        Ok(())
    }

    fn sparse_file(&mut self, path: &Path, pieces: &[(u64, usize)], len: u64) -> io::Result<()> {
        let f = File::create(path)?;
        for &(off, n) in pieces {
            let data = self.rng.bytes(n);
            f.write_all_at(&data, off)?;
            self.stats.data_bytes += n as u64;
        }
        f.set_len(len)?;
        drop(f);
        set_mode(path, 0o644)?;
        self.stats.regular_files += 1;
        self.stats.sparse_files += 1;
        self.stats.entries += 1;
        Ok(())
    }

    fn sparse(&mut self) -> io::Result<()> {
        let d = self.dir("sparse")?;
        self.sparse_file(&d.join("hole_start"), &[(256 << 10, 8192)], (256 << 10) + 8192)?;
        self.sparse_file(
            &d.join("hole_middle"),
            &[(0, 16384), (1 << 20, 16384)],
            (1 << 20) + 16384,
        )?;
        self.sparse_file(&d.join("hole_end"), &[(0, 16384)], 2 << 20)?;
        self.sparse_file(&d.join("unaligned"), &[(12345, 7000), (300_001, 3)], 400_000)?;
        let far = self.opts.far_offset;
        self.sparse_file(&d.join("far_data"), &[(far, 4096)], far + 4096)?;
        let hole_only = self.opts.hole_only_len;
        self.sparse_file(&d.join("hole_only"), &[], hole_only)
    }

    fn symlink(&mut self, target: &[u8], link: &Path, dangling: bool) -> io::Result<()> {
        std::os::unix::fs::symlink(std::ffi::OsStr::from_bytes(target), link)?;
        if target.len() < 60 {
            self.stats.fast_symlinks += 1;
        } else {
            self.stats.slow_symlinks += 1;
        }
        if dangling {
            self.stats.dangling_symlinks += 1;
        }
        self.stats.entries += 1;
        Ok(())
    }

    fn symlinks(&mut self) -> io::Result<()> {
        let d = self.dir("symlinks")?;
        self.symlink(b"../files/text", &d.join("fast_rel"), false)?;
        self.symlink(b"/etc/passwd", &d.join("fast_abs"), false)?;
        self.symlink(b"x", &d.join("fast_1"), true)?;
        // 59 bytes is the longest inode-resident (fast) target.
        self.symlink(&[b'f'; 59], &d.join("fast_59"), true)?;
        self.symlink(b"does/not/exist", &d.join("dangling"), true)?;
        self.symlink(b"../files", &d.join("to_dir"), false)?;
        let max_len = self.opts.min_block_size as usize - 1;
        let mut lengths = vec![60usize, 61, 100, 500, 1000];
        if self.opts.long_symlinks {
            lengths.extend([2000, 4000]);
        }
        for len in lengths {
            if len > max_len {
                self.stats
                    .skipped
                    .push(format!("symlink of {len} bytes (min_block_size)"));
                continue;
            }
            // A path-like target of exactly `len` bytes.
            let mut t: Vec<u8> = Vec::with_capacity(len);
            while t.len() < len {
                t.extend_from_slice(b"seg/");
            }
            t.truncate(len);
            self.symlink(&t, &d.join(format!("slow_{len}")), true)?;
        }
        Ok(())
    }

    fn links(&mut self) -> io::Result<()> {
        self.dir("links")?;
        let a = self.dir("links/a")?;
        let b = self.dir("links/b")?;
        let c = self.dir("links/c")?;
        self.random_file(&a.join("two"), 5000)?;
        fs::hard_link(a.join("two"), b.join("two_again"))?;
        self.random_file(&a.join("three"), 100)?;
        fs::hard_link(a.join("three"), b.join("three_b"))?;
        fs::hard_link(a.join("three"), c.join("three_c"))?;
        self.stats.hard_link_groups += 2;
        self.stats.extra_hard_links += 3;
        self.stats.entries += 3;
        Ok(())
    }

    fn special(&mut self) -> io::Result<()> {
        let d = self.dir("special")?;
        rustix::fs::mknodat(CWD, d.join("fifo"), FileType::Fifo, Mode::from_raw_mode(0o640), 0)?;
        self.stats.fifos += 1;
        self.stats.entries += 1;
        if self.opts.device_nodes && self.is_root {
            let devs: [(&str, FileType, u32, u32); 3] = [
                ("null_like", FileType::CharacterDevice, 1, 3),
                ("big_numbers", FileType::CharacterDevice, 300, 70000),
                ("loop_like", FileType::BlockDevice, 7, 200),
            ];
            for (name, ft, major, minor) in devs {
                let dev = rustix::fs::makedev(major, minor);
                rustix::fs::mknodat(CWD, d.join(name), ft, Mode::from_raw_mode(0o660), dev)?;
                if ft == FileType::BlockDevice {
                    self.stats.block_devices += 1;
                } else {
                    self.stats.char_devices += 1;
                }
                self.stats.entries += 1;
            }
        } else if self.opts.device_nodes {
            self.stats.skipped.push("device nodes (mknod needs root)".into());
        }
        if self.opts.socket {
            let p = d.join("socket");
            drop(std::os::unix::net::UnixListener::bind(&p)?);
            set_mode(&p, 0o755)?;
            self.stats.sockets += 1;
            self.stats.entries += 1;
        }
        Ok(())
    }

    fn dirs(&mut self) -> io::Result<()> {
        self.dir("dirs")?;
        let one = self.dir("dirs/one")?;
        self.file(&one.join("only"), b"1", 0o644)?;
        let hundred = self.dir("dirs/hundred")?;
        for i in 0..100 {
            self.file(
                &hundred.join(format!("entry-{i:03}")),
                format!("{i}\n").as_bytes(),
                0o644,
            )?;
        }
        self.dir("dirs/empty")?;
        let mut deep = String::from("dirs");
        for i in 0..12 {
            deep.push_str(&format!("/d{i}"));
            self.dir(&deep)?;
        }
        if self.opts.big_dir_entries > 0 {
            let big = self.dir("dirs/big")?;
            for i in 0..self.opts.big_dir_entries {
                // Varying name lengths give realistic htree leaves.
                let pad = "x".repeat(i % 40);
                File::create(big.join(format!("e{i:06}-{pad}")))?;
                self.stats.regular_files += 1;
                self.stats.entries += 1;
            }
        }
        Ok(())
    }

    fn names(&mut self) -> io::Result<()> {
        let d = self.dir("names")?;
        let long_ascii = "n".repeat(255);
        self.file(&d.join(&long_ascii), b"255 ascii", 0o644)?;
        let long_utf8 = format!("{}x", "é".repeat(127)); // 254 + 1 = 255 bytes
        debug_assert_eq!(long_utf8.len(), 255);
        self.file(&d.join(&long_utf8), b"255 utf8", 0o644)?;
        let long_dir = "D".repeat(255).to_string();
        fs::create_dir(d.join(&long_dir))?;
        set_mode(&d.join(&long_dir), 0o755)?;
        self.stats.directories += 1;
        self.stats.entries += 1;
        for name in [
            "héllo wörld",
            "日本語のファイル",
            "emoji 🦀🐧",
            "tab\tand\nnewline",
            " leading space",
            "-dash",
        ] {
            self.file(&d.join(name), name.as_bytes(), 0o644)?;
        }
        let raw: &[&[u8]] = &[b"bytes-\x01\x7f\x80\xfe\xff", b"\xc3\x28invalid-utf8", b"\xff"];
        for name in raw {
            self.file(&d.join(std::ffi::OsStr::from_bytes(name)), name, 0o644)?;
        }
        Ok(())
    }

    fn setx(&mut self, path: &Path, name: &str, value: &[u8]) -> io::Result<()> {
        rustix::fs::lsetxattr(path, name, value, XattrFlags::empty())?;
        self.stats.xattrs += 1;
        Ok(())
    }

    fn xattrs(&mut self) -> io::Result<()> {
        let d = self.dir("xattrs")?;
        let small = d.join("small");
        self.file(&small, b"small xattrs", 0o644)?;
        self.setx(&small, "user.a", b"1")?;
        self.setx(&small, "user.empty", b"")?;
        self.setx(&small, "user.binary", &[0, 1, 2, 255, 0])?;
        let large = d.join("large");
        self.file(&large, b"large xattr", 0o644)?;
        let big = self.rng.bytes(self.opts.large_xattr_len());
        self.setx(&large, "user.big", &big)?;
        self.setx(&large, "user.small_too", b"next to a big one")?;
        // Identical xattr sets that cannot fit in the inode: ext4 shares one
        // block among them (mbcache).
        let shared_value = self.rng.bytes(self.opts.large_xattr_len() / 2);
        for i in 0..3 {
            let p = d.join(format!("shared_{i}"));
            self.file(&p, format!("shared {i}").as_bytes(), 0o644)?;
            self.setx(&p, "user.shared", &shared_value)?;
            self.setx(&p, "user.tag", b"same")?;
        }
        let xdir = self.dir("xattrs/on_dir")?;
        self.setx(&xdir, "user.dir", b"directory xattr")?;
        Ok(())
    }

    fn modes(&mut self) -> io::Result<()> {
        let d = self.dir("modes")?;
        for (name, mode) in [
            ("setuid", 0o4755),
            ("setgid", 0o2755),
            ("setuid_setgid", 0o6711),
            ("sticky_file", 0o1644),
            ("none", 0o000),
            ("private", 0o600),
            ("odd", 0o751),
            ("all", 0o7777),
        ] {
            self.file(&d.join(name), name.as_bytes(), mode)?;
        }
        for (name, mode) in [("sticky_dir", 0o1777), ("setgid_dir", 0o2775), ("readonly_dir", 0o555)] {
            let p = self.dir(&format!("modes/{name}"))?;
            set_mode(&p, mode)?;
        }
        Ok(())
    }

    fn owners(&mut self) -> io::Result<()> {
        let d = self.dir("owners")?;
        if !(self.opts.ownership && self.is_root) {
            if self.opts.ownership {
                self.stats.skipped.push("uid/gid variety (chown needs root)".into());
            }
            return Ok(());
        }
        let ids: [(u32, u32); 5] = [(1000, 1000), (65534, 65534), (12345, 54321), (0, 100), (70000, 80000)];
        for (uid, gid) in ids {
            let p = d.join(format!("u{uid}_g{gid}"));
            self.file(&p, b"owned", 0o640)?;
            chown(&p, uid, gid)?;
        }
        let sub = self.dir("owners/dir_1000")?;
        chown(&sub, 1000, 1001)?;
        let link = d.join("symlink_4242");
        self.symlink(b"u1000_g1000", &link, false)?;
        chown(&link, 4242, 4343)?;
        // chown clears setuid; set it again afterwards, as an owner would.
        let suid = d.join("setuid_1000");
        self.file(&suid, b"suid", 0o644)?;
        chown(&suid, 1000, 1000)?;
        set_mode(&suid, 0o4755)?;
        Ok(())
    }
}

fn set_mode(path: &Path, mode: u32) -> io::Result<()> {
    fs::set_permissions(path, fs::Permissions::from_mode(mode))
}

fn chown(path: &Path, uid: u32, gid: u32) -> io::Result<()> {
    // SAFETY-free: rustix validates ids; -1 (u32::MAX) is never passed here.
    let uid = rustix::fs::Uid::from_raw(uid);
    let gid = rustix::fs::Gid::from_raw(gid);
    rustix::fs::chownat(CWD, path, Some(uid), Some(gid), AtFlags::SYMLINK_NOFOLLOW)?;
    Ok(())
}

/// Sets seeded atime/mtime (with nanoseconds) on `dir`'s children depth-first
/// and then on `dir` itself, never following symlinks.
fn set_times_post_order(dir: &Path, rng: &mut Rng) -> io::Result<()> {
    let mut children: Vec<_> = fs::read_dir(dir)?.collect::<io::Result<Vec<_>>>()?;
    children.sort_by_key(|e| e.file_name());
    for child in children {
        let p = child.path();
        if child.file_type()?.is_dir() {
            set_times_post_order(&p, rng)?;
        } else {
            set_time(&p, rng)?;
        }
    }
    set_time(dir, rng)
}

fn set_time(path: &Path, rng: &mut Rng) -> io::Result<()> {
    // 2001-09-09 .. ~2030: within 32-bit seconds for 128-byte inodes.
    let stamp = |rng: &mut Rng| Timespec {
        tv_sec: 1_000_000_000 + rng.below(900_000_000) as i64,
        tv_nsec: rng.below(1_000_000_000) as _,
    };
    let times = Timestamps {
        last_access: stamp(rng),
        last_modification: stamp(rng),
    };
    rustix::fs::utimensat(CWD, path, &times, AtFlags::SYMLINK_NOFOLLOW)?;
    Ok(())
}

/// How [`fragment_through_kernel`] fragments files.
#[derive(Debug, Clone)]
pub struct FragmentOptions {
    /// Directory (relative to the mount point) that receives the files.
    pub dir: String,
    /// Extents wanted per file; `None` picks enough for an extent tree of
    /// depth 2 at the file system's block size: more than 4 × (leaf capacity)
    /// = 4 × ((block size − 12) / 12), i.e. > 1,360 for 4 KiB blocks and
    /// > 336 for 1 KiB blocks.
    pub extents: Option<u64>,
    /// Files written round-robin, one block at a time with `fsync` after each
    /// write (best effort: mballoc preallocation may keep them contiguous).
    pub interleaved_files: usize,
    /// Blocks appended to each interleaved file.
    pub interleaved_blocks: u64,
    /// Seed of the file content.
    pub seed: u64,
}

impl Default for FragmentOptions {
    fn default() -> Self {
        FragmentOptions {
            dir: "ext4kit-fragmented".into(),
            extents: None,
            interleaved_files: 3,
            interleaved_blocks: 64,
            seed: 0xf7a9,
        }
    }
}

/// A file written by [`fragment_through_kernel`].
#[derive(Debug, Clone)]
pub struct FragmentedFile {
    /// Path relative to the mount point (e.g. `ext4kit-fragmented/stride`).
    pub rel_path: PathBuf,
    /// Data blocks the file holds.
    pub data_blocks: u64,
    /// Whether the file's layout forces at least `FragmentOptions::extents`
    /// extents on an extent-mapped file (true for `stride` and `punched`;
    /// false for the best-effort interleaved files).
    pub guaranteed_deep: bool,
}

/// The smallest extent count that forces an extent tree of depth 2 with
/// `block_size`-byte blocks (root in the inode holds 4 entries, a tree block
/// holds `(block_size - 12) / 12`), plus a margin.
pub fn extents_for_depth2(block_size: u64) -> u64 {
    let per_block = (block_size - 12) / 12;
    4 * per_block + per_block / 2 + 16
}

/// On a kernel read-write mount at `mountpoint`, writes files whose extent
/// trees reach depth 2 or more:
///
/// - `stride`: one block written every other block (`n` blocks → `n`
///   extents, since holes separate them), written in increasing order with
///   `pwrite`;
/// - `punched`: `2n` contiguous blocks written and fsynced, then every other
///   block punched out with `fallocate(PUNCH_HOLE)` (exercises the kernel's
///   extent split path, leaving half-full leaves);
/// - `interleaved_*`: several files appended round-robin one block at a time
///   with `fsync` after every write (physically interleaved when the
///   allocator cooperates; not guaranteed deep).
///
/// Verify the depth after unmounting with [`crate::tools::extent_depth`].
/// On block-mapped file systems (ext2/ext3) the files are still useful: they
/// exercise indirect blocks with holes.
pub fn fragment_through_kernel(mountpoint: &Path, opts: &FragmentOptions) -> io::Result<Vec<FragmentedFile>> {
    let bs = rustix::fs::statvfs(mountpoint)?.f_bsize;
    let n = opts.extents.unwrap_or_else(|| extents_for_depth2(bs));
    let dir = mountpoint.join(&opts.dir);
    fs::create_dir_all(&dir)?;
    let mut rng = Rng::new(opts.seed);
    let mut block = vec![0u8; bs as usize];
    let mut out = Vec::new();

    let stride = dir.join("stride");
    {
        let f = File::create(&stride)?;
        for i in 0..n {
            rng.fill(&mut block);
            f.write_all_at(&block, 2 * i * bs)?;
        }
        f.sync_all()?;
    }
    out.push(FragmentedFile {
        rel_path: Path::new(&opts.dir).join("stride"),
        data_blocks: n,
        guaranteed_deep: true,
    });

    let punched = dir.join("punched");
    {
        let mut f = File::create(&punched)?;
        for _ in 0..2 * n {
            rng.fill(&mut block);
            f.write_all(&block)?;
        }
        f.sync_all()?;
        for i in 0..n {
            rustix::fs::fallocate(
                &f,
                rustix::fs::FallocateFlags::PUNCH_HOLE | rustix::fs::FallocateFlags::KEEP_SIZE,
                (2 * i + 1) * bs,
                bs,
            )?;
        }
        f.sync_all()?;
    }
    out.push(FragmentedFile {
        rel_path: Path::new(&opts.dir).join("punched"),
        data_blocks: n,
        guaranteed_deep: true,
    });

    let mut files = Vec::new();
    for i in 0..opts.interleaved_files {
        let name = format!("interleaved_{i}");
        files.push((
            OpenOptions::new().create(true).append(true).open(dir.join(&name))?,
            name,
        ));
    }
    for _ in 0..opts.interleaved_blocks {
        for (f, _) in &mut files {
            rng.fill(&mut block);
            f.write_all(&block)?;
            f.sync_data()?;
        }
    }
    for (_, name) in files {
        out.push(FragmentedFile {
            rel_path: Path::new(&opts.dir).join(name),
            data_blocks: opts.interleaved_blocks,
            guaranteed_deep: false,
        });
    }
    Ok(out)
}
