//! Comparing two directory trees the way a user would see them: types, modes,
//! owners, mtimes (to the nanosecond), sizes, contents, symlink targets,
//! device numbers, xattrs and hard-link groups.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::fmt;
use std::fs::{self, File};
use std::io::{self, Read};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

/// How [`compare_trees`] compares.
#[derive(Debug, Clone)]
pub struct CompareOptions {
    /// Compare mtimes to the nanosecond (`true`) or whole seconds only
    /// (`false`, for mke2fs `-d` images and 128-byte inodes, which keep no
    /// nanoseconds).
    pub mtime_nanoseconds: bool,
    /// Compare mtimes at all.
    pub mtime: bool,
    /// Compare uid and gid.
    pub ownership: bool,
    /// Compare extended attributes.
    pub xattrs: bool,
    /// Xattr names ignored on both sides (default: `security.selinux`, which a
    /// host may add by itself).
    pub ignore_xattrs: Vec<String>,
    /// Leave out a top-level `lost+found` on either side.
    pub ignore_lost_found: bool,
    /// Paths (relative to the roots) left out on both sides, with everything
    /// below them.
    pub exclude: Vec<PathBuf>,
    /// Compare the roots' own metadata (mode, owner, mtime, xattrs). mke2fs
    /// `-d` gives the root the time of mkfs, so turn this off there.
    pub root_metadata: bool,
    /// Stop after this many differences (the list says it was cut).
    pub max_differences: usize,
}

impl Default for CompareOptions {
    fn default() -> Self {
        CompareOptions {
            mtime_nanoseconds: true,
            mtime: true,
            ownership: true,
            xattrs: true,
            ignore_xattrs: vec!["security.selinux".into()],
            ignore_lost_found: true,
            exclude: Vec::new(),
            root_metadata: true,
            max_differences: 200,
        }
    }
}

impl CompareOptions {
    /// Options for whole-second mtime comparison (mke2fs `-d` sources).
    pub fn whole_seconds() -> Self {
        CompareOptions {
            mtime_nanoseconds: false,
            ..Self::default()
        }
    }
}

/// A file type as the comparison distinguishes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Regular file.
    File,
    /// Directory.
    Dir,
    /// Symbolic link.
    Symlink,
    /// FIFO (named pipe).
    Fifo,
    /// Character device.
    CharDevice,
    /// Block device.
    BlockDevice,
    /// Unix socket.
    Socket,
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = match self {
            Kind::File => "regular file",
            Kind::Dir => "directory",
            Kind::Symlink => "symlink",
            Kind::Fifo => "fifo",
            Kind::CharDevice => "char device",
            Kind::BlockDevice => "block device",
            Kind::Socket => "socket",
        };
        f.write_str(s)
    }
}

/// What differs at one path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DiffKind {
    /// Present in the expected tree only.
    Missing,
    /// Present in the actual tree only.
    Extra,
    /// Different file types.
    FileType {
        /// Expected type.
        expected: Kind,
        /// Actual type.
        actual: Kind,
    },
    /// Different permission bits (`mode & 0o7777`).
    Mode {
        /// Expected bits.
        expected: u32,
        /// Actual bits.
        actual: u32,
    },
    /// Different owner.
    Uid {
        /// Expected uid.
        expected: u32,
        /// Actual uid.
        actual: u32,
    },
    /// Different group.
    Gid {
        /// Expected gid.
        expected: u32,
        /// Actual gid.
        actual: u32,
    },
    /// Different modification time (seconds, nanoseconds).
    Mtime {
        /// Expected (seconds, nanoseconds).
        expected: (i64, i64),
        /// Actual (seconds, nanoseconds).
        actual: (i64, i64),
    },
    /// Different size (regular files and symlinks).
    Size {
        /// Expected size in bytes.
        expected: u64,
        /// Actual size in bytes.
        actual: u64,
    },
    /// Contents differ; `offset` is the first differing byte.
    Content {
        /// Offset of the first differing byte.
        offset: u64,
    },
    /// Different symlink targets.
    SymlinkTarget {
        /// Expected target.
        expected: OsString,
        /// Actual target.
        actual: OsString,
    },
    /// Different device numbers.
    Rdev {
        /// Expected (major, minor).
        expected: (u32, u32),
        /// Actual (major, minor).
        actual: (u32, u32),
    },
    /// An xattr present on the expected side only.
    XattrMissing {
        /// Xattr name.
        name: String,
    },
    /// An xattr present on the actual side only.
    XattrExtra {
        /// Xattr name.
        name: String,
    },
    /// An xattr with different values.
    XattrValue {
        /// Xattr name.
        name: String,
        /// Expected value length.
        expected_len: usize,
        /// Actual value length.
        actual_len: usize,
    },
    /// The set of paths sharing this path's inode differs.
    HardLinks {
        /// Paths sharing the inode on the expected side (sorted).
        expected: Vec<PathBuf>,
        /// Paths sharing the inode on the actual side (sorted).
        actual: Vec<PathBuf>,
    },
    /// Reading this path failed on one side.
    Io {
        /// Which side ("expected" or "actual") and the error.
        message: String,
    },
    /// More differences were found than `max_differences`.
    Truncated,
}

/// One difference, at a path relative to both roots (`.` is the root).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Difference {
    /// Path relative to the compared roots.
    pub path: PathBuf,
    /// What differs.
    pub kind: DiffKind,
}

fn show_bytes(s: &OsString) -> String {
    format!("{:?}", String::from_utf8_lossy(s.as_bytes()))
}

impl fmt::Display for Difference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let p = self.path.display();
        match &self.kind {
            DiffKind::Missing => write!(f, "{p}: missing in actual tree"),
            DiffKind::Extra => write!(f, "{p}: only in actual tree"),
            DiffKind::FileType { expected, actual } => {
                write!(f, "{p}: type {actual}, expected {expected}")
            }
            DiffKind::Mode { expected, actual } => {
                write!(f, "{p}: mode {actual:04o}, expected {expected:04o}")
            }
            DiffKind::Uid { expected, actual } => {
                write!(f, "{p}: uid {actual}, expected {expected}")
            }
            DiffKind::Gid { expected, actual } => {
                write!(f, "{p}: gid {actual}, expected {expected}")
            }
            DiffKind::Mtime { expected, actual } => write!(
                f,
                "{p}: mtime {}.{:09}, expected {}.{:09}",
                actual.0, actual.1, expected.0, expected.1
            ),
            DiffKind::Size { expected, actual } => {
                write!(f, "{p}: size {actual}, expected {expected}")
            }
            DiffKind::Content { offset } => write!(f, "{p}: content differs from byte {offset}"),
            DiffKind::SymlinkTarget { expected, actual } => write!(
                f,
                "{p}: symlink target {}, expected {}",
                show_bytes(actual),
                show_bytes(expected)
            ),
            DiffKind::Rdev { expected, actual } => write!(
                f,
                "{p}: device {}:{}, expected {}:{}",
                actual.0, actual.1, expected.0, expected.1
            ),
            DiffKind::XattrMissing { name } => write!(f, "{p}: xattr {name} missing"),
            DiffKind::XattrExtra { name } => write!(f, "{p}: unexpected xattr {name}"),
            DiffKind::XattrValue {
                name,
                expected_len,
                actual_len,
            } => write!(
                f,
                "{p}: xattr {name} value differs ({actual_len} bytes, expected {expected_len})"
            ),
            DiffKind::HardLinks { expected, actual } => {
                write!(f, "{p}: hard-link group {actual:?}, expected {expected:?}")
            }
            DiffKind::Io { message } => write!(f, "{p}: {message}"),
            DiffKind::Truncated => write!(f, "{p}: too many differences, stopped"),
        }
    }
}

/// Formats a list of differences one per line (for assertion messages).
pub fn format_differences(diffs: &[Difference]) -> String {
    let mut s = String::new();
    for d in diffs {
        s.push_str(&d.to_string());
        s.push('\n');
    }
    s
}

struct Entry {
    meta: fs::Metadata,
}

fn kind_of(meta: &fs::Metadata) -> Kind {
    let ft = meta.file_type();
    if ft.is_symlink() {
        Kind::Symlink
    } else if ft.is_dir() {
        Kind::Dir
    } else if ft.is_fifo() {
        Kind::Fifo
    } else if ft.is_char_device() {
        Kind::CharDevice
    } else if ft.is_block_device() {
        Kind::BlockDevice
    } else if ft.is_socket() {
        Kind::Socket
    } else {
        Kind::File
    }
}

/// Walks `root` without following symlinks, collecting every path relative
/// to it (the root is `.`).
fn walk(root: &Path, opts: &CompareOptions, errors: &mut Vec<Difference>, side: &str) -> BTreeMap<PathBuf, Entry> {
    let mut map = BTreeMap::new();
    match fs::symlink_metadata(root) {
        Ok(meta) => {
            map.insert(PathBuf::from("."), Entry { meta });
        }
        Err(e) => {
            errors.push(Difference {
                path: ".".into(),
                kind: DiffKind::Io {
                    message: format!("{side}: {e}"),
                },
            });
            return map;
        }
    }
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        let dir = root.join(&rel);
        let rd = match fs::read_dir(&dir) {
            Ok(rd) => rd,
            Err(e) => {
                errors.push(Difference {
                    path: rel.clone(),
                    kind: DiffKind::Io {
                        message: format!("{side}: read_dir: {e}"),
                    },
                });
                continue;
            }
        };
        for ent in rd {
            let ent = match ent {
                Ok(e) => e,
                Err(e) => {
                    errors.push(Difference {
                        path: rel.clone(),
                        kind: DiffKind::Io {
                            message: format!("{side}: read_dir: {e}"),
                        },
                    });
                    continue;
                }
            };
            let child = rel.join(ent.file_name());
            if opts.ignore_lost_found && child == Path::new("lost+found") {
                continue;
            }
            if opts.exclude.iter().any(|x| child.starts_with(x)) {
                continue;
            }
            match fs::symlink_metadata(root.join(&child)) {
                Ok(meta) => {
                    if meta.file_type().is_dir() {
                        stack.push(child.clone());
                    }
                    map.insert(child, Entry { meta });
                }
                Err(e) => errors.push(Difference {
                    path: child,
                    kind: DiffKind::Io {
                        message: format!("{side}: lstat: {e}"),
                    },
                }),
            }
        }
    }
    map
}

/// Reads every xattr of `path` (not following symlinks) as a sorted map.
pub fn read_xattrs(path: &Path) -> io::Result<BTreeMap<String, Vec<u8>>> {
    let mut out = BTreeMap::new();
    let len = match rustix::fs::llistxattr_query(path) {
        Ok(n) => n,
        Err(rustix::io::Errno::NOTSUP) => return Ok(out),
        Err(e) => return Err(e.into()),
    };
    if len == 0 {
        return Ok(out);
    }
    let mut names = vec![0u8; len];
    let n = rustix::fs::llistxattr(path, &mut names[..])?;
    names.truncate(n);
    for name in names.split(|&b| b == 0).filter(|s| !s.is_empty()) {
        let name_str = String::from_utf8_lossy(name).into_owned();
        let vlen = rustix::fs::lgetxattr_query(path, name)?;
        let mut value = vec![0u8; vlen];
        let got = if vlen == 0 {
            0
        } else {
            rustix::fs::lgetxattr(path, name, &mut value[..])?
        };
        value.truncate(got);
        out.insert(name_str, value);
    }
    Ok(out)
}

/// Compares two files' contents and returns the first differing offset
/// within their common length, skipping ranges that are holes on both sides.
pub fn first_content_difference(a: &Path, b: &Path) -> io::Result<Option<u64>> {
    let mut fa = File::open(a)?;
    let mut fb = File::open(b)?;
    let la = fa.metadata()?.len();
    let lb = fb.metadata()?.len();
    let len = la.min(lb);
    let mut ba = vec![0u8; 1 << 16];
    let mut bb = vec![0u8; 1 << 16];
    let mut pos = 0u64;
    while pos < len {
        // Skip a range that reads as zeros on both sides (holes).
        let da = next_data(&fa, pos, la)?;
        let db = next_data(&fb, pos, lb)?;
        let skip_to = da.min(db).min(len);
        if skip_to > pos {
            pos = skip_to;
            continue;
        }
        let want = ((len - pos) as usize).min(ba.len());
        read_exact_at(&mut fa, &mut ba[..want], pos)?;
        read_exact_at(&mut fb, &mut bb[..want], pos)?;
        if ba[..want] != bb[..want] {
            let i = ba[..want]
                .iter()
                .zip(&bb[..want])
                .position(|(x, y)| x != y)
                .unwrap_or(0);
            return Ok(Some(pos + i as u64));
        }
        pos += want as u64;
    }
    Ok(None)
}

/// The next offset at or after `pos` holding data (`len` when only a hole
/// follows). When SEEK_DATA is unsupported or fails (the kernel answers
/// ENOENT past offset 0 on the inline-data, hole-only inodes that mke2fs
/// 1.47.0 `-d` makes), everything is treated as data and read.
fn next_data(f: &File, pos: u64, len: u64) -> io::Result<u64> {
    match rustix::fs::seek(f, rustix::fs::SeekFrom::Data(pos)) {
        Ok(off) => Ok(off),
        Err(rustix::io::Errno::NXIO) => Ok(len),
        Err(_) => Ok(pos),
    }
}

fn read_exact_at(f: &mut File, buf: &mut [u8], pos: u64) -> io::Result<()> {
    use std::io::{Seek, SeekFrom};
    f.seek(SeekFrom::Start(pos))?;
    f.read_exact(buf)
}

fn rdev_pair(rdev: u64) -> (u32, u32) {
    (rustix::fs::major(rdev), rustix::fs::minor(rdev))
}

/// Compares the tree under `actual` with the one under `expected`, path by
/// path, without following symlinks. An empty result means they are the
/// same as far as the options ask.
///
/// Directory sizes, link counts, atimes and ctimes are never compared (they
/// depend on the file system, not on the content); hard links are compared
/// as the partition of non-directory paths into same-inode groups.
pub fn compare_trees(expected: &Path, actual: &Path, opts: CompareOptions) -> Vec<Difference> {
    let mut diffs = Vec::new();
    let exp = walk(expected, &opts, &mut diffs, "expected");
    let act = walk(actual, &opts, &mut diffs, "actual");
    let push = |diffs: &mut Vec<Difference>, path: &Path, kind: DiffKind| {
        diffs.push(Difference {
            path: path.to_path_buf(),
            kind,
        });
    };

    for (path, e) in &exp {
        let Some(a) = act.get(path) else {
            push(&mut diffs, path, DiffKind::Missing);
            continue;
        };
        let (em, am) = (&e.meta, &a.meta);
        let (ek, ak) = (kind_of(em), kind_of(am));
        if ek != ak {
            push(
                &mut diffs,
                path,
                DiffKind::FileType {
                    expected: ek,
                    actual: ak,
                },
            );
            continue;
        }
        let is_root = path == Path::new(".");
        if is_root && !opts.root_metadata {
            continue;
        }
        if ak != Kind::Symlink && em.mode() & 0o7777 != am.mode() & 0o7777 {
            push(
                &mut diffs,
                path,
                DiffKind::Mode {
                    expected: em.mode() & 0o7777,
                    actual: am.mode() & 0o7777,
                },
            );
        }
        if opts.ownership {
            if em.uid() != am.uid() {
                push(
                    &mut diffs,
                    path,
                    DiffKind::Uid {
                        expected: em.uid(),
                        actual: am.uid(),
                    },
                );
            }
            if em.gid() != am.gid() {
                push(
                    &mut diffs,
                    path,
                    DiffKind::Gid {
                        expected: em.gid(),
                        actual: am.gid(),
                    },
                );
            }
        }
        if opts.mtime {
            let (es, ens) = (em.mtime(), em.mtime_nsec());
            let (as_, ans) = (am.mtime(), am.mtime_nsec());
            let differs = es != as_ || (opts.mtime_nanoseconds && ens != ans);
            if differs {
                push(
                    &mut diffs,
                    path,
                    DiffKind::Mtime {
                        expected: (es, ens),
                        actual: (as_, ans),
                    },
                );
            }
        }
        match ek {
            Kind::File => {
                if em.len() != am.len() {
                    push(
                        &mut diffs,
                        path,
                        DiffKind::Size {
                            expected: em.len(),
                            actual: am.len(),
                        },
                    );
                }
                match first_content_difference(&expected.join(path), &actual.join(path)) {
                    Ok(Some(offset)) => push(&mut diffs, path, DiffKind::Content { offset }),
                    Ok(None) => {}
                    Err(e) => push(
                        &mut diffs,
                        path,
                        DiffKind::Io {
                            message: format!("reading content: {e}"),
                        },
                    ),
                }
            }
            Kind::Symlink => {
                let et = fs::read_link(expected.join(path));
                let at = fs::read_link(actual.join(path));
                match (et, at) {
                    (Ok(et), Ok(at)) if et != at => push(
                        &mut diffs,
                        path,
                        DiffKind::SymlinkTarget {
                            expected: et.into_os_string(),
                            actual: at.into_os_string(),
                        },
                    ),
                    (Ok(_), Ok(_)) => {}
                    (Err(e), _) | (_, Err(e)) => push(
                        &mut diffs,
                        path,
                        DiffKind::Io {
                            message: format!("readlink: {e}"),
                        },
                    ),
                }
                if em.len() != am.len() {
                    push(
                        &mut diffs,
                        path,
                        DiffKind::Size {
                            expected: em.len(),
                            actual: am.len(),
                        },
                    );
                }
            }
            Kind::CharDevice | Kind::BlockDevice if em.rdev() != am.rdev() => {
                push(
                    &mut diffs,
                    path,
                    DiffKind::Rdev {
                        expected: rdev_pair(em.rdev()),
                        actual: rdev_pair(am.rdev()),
                    },
                );
            }
            _ => {}
        }
        if opts.xattrs {
            compare_xattrs(&expected.join(path), &actual.join(path), path, &opts, &mut diffs);
        }
    }
    for path in act.keys() {
        if !exp.contains_key(path) {
            push(&mut diffs, path, DiffKind::Extra);
        }
    }
    compare_link_groups(&exp, &act, &mut diffs);

    if diffs.len() > opts.max_differences {
        diffs.truncate(opts.max_differences);
        diffs.push(Difference {
            path: ".".into(),
            kind: DiffKind::Truncated,
        });
    }
    diffs
}

fn compare_xattrs(e: &Path, a: &Path, rel: &Path, opts: &CompareOptions, diffs: &mut Vec<Difference>) {
    let (ex, ax) = match (read_xattrs(e), read_xattrs(a)) {
        (Ok(x), Ok(y)) => (x, y),
        (Err(err), _) | (_, Err(err)) => {
            diffs.push(Difference {
                path: rel.into(),
                kind: DiffKind::Io {
                    message: format!("xattrs: {err}"),
                },
            });
            return;
        }
    };
    let ignored = |n: &String| opts.ignore_xattrs.iter().any(|i| i == n);
    for (name, v) in ex.iter().filter(|(n, _)| !ignored(n)) {
        match ax.get(name) {
            None => diffs.push(Difference {
                path: rel.into(),
                kind: DiffKind::XattrMissing { name: name.clone() },
            }),
            Some(w) if w != v => diffs.push(Difference {
                path: rel.into(),
                kind: DiffKind::XattrValue {
                    name: name.clone(),
                    expected_len: v.len(),
                    actual_len: w.len(),
                },
            }),
            Some(_) => {}
        }
    }
    for name in ax.keys().filter(|n| !ignored(n)) {
        if !ex.contains_key(name) {
            diffs.push(Difference {
                path: rel.into(),
                kind: DiffKind::XattrExtra { name: name.clone() },
            });
        }
    }
}

/// For every non-directory path, the sorted set of paths sharing its inode
/// (only paths with more than one name).
fn link_groups(tree: &BTreeMap<PathBuf, Entry>) -> BTreeMap<PathBuf, Vec<PathBuf>> {
    let mut by_inode: BTreeMap<(u64, u64), BTreeSet<PathBuf>> = BTreeMap::new();
    for (p, e) in tree {
        if !e.meta.is_dir() {
            by_inode
                .entry((e.meta.dev(), e.meta.ino()))
                .or_default()
                .insert(p.clone());
        }
    }
    let mut out = BTreeMap::new();
    for group in by_inode.values() {
        let v: Vec<PathBuf> = group.iter().cloned().collect();
        for p in group {
            out.insert(p.clone(), v.clone());
        }
    }
    out
}

fn compare_link_groups(exp: &BTreeMap<PathBuf, Entry>, act: &BTreeMap<PathBuf, Entry>, diffs: &mut Vec<Difference>) {
    let eg = link_groups(exp);
    let ag = link_groups(act);
    let mut reported: BTreeSet<Vec<PathBuf>> = BTreeSet::new();
    for (p, e) in &eg {
        let Some(a) = ag.get(p) else { continue };
        if e != a && (e.len() > 1 || a.len() > 1) && reported.insert(e.clone()) {
            diffs.push(Difference {
                path: p.clone(),
                kind: DiffKind::HardLinks {
                    expected: e.clone(),
                    actual: a.clone(),
                },
            });
        }
    }
}

/// Every path below `root` (but a top-level `lost+found`), sorted, with
/// its size and `st_blocks`: how two mounts of one image account space.
///
/// # Panics
/// A directory or entry below `root` cannot be read.
pub fn sizes_and_blocks(root: &Path) -> Vec<(String, u64, u64)> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            let md = std::fs::symlink_metadata(&p).unwrap();
            if md.is_dir() {
                stack.push(p.clone());
            }
            let name = p.strip_prefix(root).unwrap().display().to_string();
            if name != "lost+found" {
                out.push((name, md.size(), md.blocks()));
            }
        }
    }
    out.sort();
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn pair() -> (tempfile::TempDir, PathBuf, PathBuf) {
        let t = tempfile::tempdir().unwrap();
        let a = t.path().join("a");
        let b = t.path().join("b");
        for root in [&a, &b] {
            fs::create_dir_all(root.join("d")).unwrap();
            fs::write(root.join("d/file"), b"hello world").unwrap();
            fs::write(root.join("one"), b"1").unwrap();
            fs::hard_link(root.join("one"), root.join("d/one_link")).unwrap();
            fs::write(root.join("two"), b"2").unwrap();
            std::os::unix::fs::symlink("d/file", root.join("sym")).unwrap();
            let sparse = File::create(root.join("sparse")).unwrap();
            sparse.set_len(10 << 20).unwrap();
        }
        sync_times(&a);
        sync_times(&b);
        (t, a, b)
    }

    /// Gives every path under `root` the same fixed times.
    fn sync_times(root: &Path) {
        let opts = CompareOptions::default();
        let mut errs = Vec::new();
        let paths: Vec<PathBuf> = walk(root, &opts, &mut errs, "model").into_keys().collect();
        for p in paths.iter().rev() {
            let t = rustix::fs::Timestamps {
                last_access: rustix::fs::Timespec {
                    tv_sec: 1_600_000_000,
                    tv_nsec: 5,
                },
                last_modification: rustix::fs::Timespec {
                    tv_sec: 1_600_000_000,
                    tv_nsec: 123_456_789,
                },
            };
            rustix::fs::utimensat(rustix::fs::CWD, root.join(p), &t, rustix::fs::AtFlags::SYMLINK_NOFOLLOW).unwrap();
        }
    }

    fn only(diffs: &[Difference]) -> &DiffKind {
        assert_eq!(
            diffs.len(),
            1,
            "expected exactly one difference, got:\n{}",
            format_differences(diffs)
        );
        &diffs[0].kind
    }

    #[test]
    fn identical_trees_have_no_difference() {
        let (_t, a, b) = pair();
        let d = compare_trees(&a, &b, CompareOptions::default());
        assert!(d.is_empty(), "{}", format_differences(&d));
    }

    #[test]
    fn detects_content() {
        let (_t, a, b) = pair();
        fs::write(b.join("d/file"), b"hello wOrld").unwrap();
        sync_times(&b);
        let d = compare_trees(&a, &b, CompareOptions::default());
        assert_eq!(only(&d), &DiffKind::Content { offset: 7 });
        assert_eq!(d[0].path, Path::new("d/file"));
        assert!(d[0].to_string().contains("byte 7"), "{}", d[0]);
    }

    #[test]
    fn detects_content_after_hole() {
        let (_t, a, b) = pair();
        let f = fs::OpenOptions::new().write(true).open(b.join("sparse")).unwrap();
        std::os::unix::fs::FileExt::write_all_at(&f, b"x", 9 << 20).unwrap();
        drop(f);
        sync_times(&b);
        let d = compare_trees(&a, &b, CompareOptions::default());
        assert_eq!(only(&d), &DiffKind::Content { offset: 9 << 20 });
    }

    #[test]
    fn detects_size() {
        let (_t, a, b) = pair();
        fs::write(b.join("two"), b"2 and more").unwrap();
        sync_times(&b);
        // The common prefix ("2") is equal: only the size differs.
        let d = compare_trees(&a, &b, CompareOptions::default());
        assert_eq!(
            only(&d),
            &DiffKind::Size {
                expected: 1,
                actual: 10
            }
        );
    }

    #[test]
    fn detects_mode() {
        let (_t, a, b) = pair();
        fs::set_permissions(b.join("two"), fs::Permissions::from_mode(0o4755)).unwrap();
        fs::set_permissions(a.join("two"), fs::Permissions::from_mode(0o755)).unwrap();
        let d = compare_trees(&a, &b, CompareOptions::default());
        assert_eq!(
            only(&d),
            &DiffKind::Mode {
                expected: 0o755,
                actual: 0o4755
            }
        );
    }

    #[test]
    fn detects_xattr() {
        let (_t, a, b) = pair();
        let set = |p: &Path, v: &[u8]| rustix::fs::lsetxattr(p, "user.k", v, rustix::fs::XattrFlags::empty());
        if set(&a.join("two"), b"v").is_err() {
            crate::skip::record("the temp dir's file system has no user xattrs");
            return;
        }
        set(&b.join("two"), b"w").unwrap();
        let d = compare_trees(&a, &b, CompareOptions::default());
        assert_eq!(
            only(&d),
            &DiffKind::XattrValue {
                name: "user.k".into(),
                expected_len: 1,
                actual_len: 1
            }
        );
        rustix::fs::lremovexattr(b.join("two"), "user.k").unwrap();
        let d = compare_trees(&a, &b, CompareOptions::default());
        assert_eq!(only(&d), &DiffKind::XattrMissing { name: "user.k".into() });
        let d = compare_trees(&b, &a, CompareOptions::default());
        assert_eq!(only(&d), &DiffKind::XattrExtra { name: "user.k".into() });
        // The ignore list hides it.
        let opts = CompareOptions {
            ignore_xattrs: vec!["user.k".into()],
            ..Default::default()
        };
        assert!(compare_trees(&a, &b, opts).is_empty());
    }

    #[test]
    fn detects_mtime_nanoseconds_only_when_asked() {
        let (_t, a, b) = pair();
        let meta = fs::symlink_metadata(a.join("two")).unwrap();
        let t = rustix::fs::Timestamps {
            last_access: rustix::fs::Timespec { tv_sec: 1, tv_nsec: 0 },
            last_modification: rustix::fs::Timespec {
                tv_sec: meta.mtime(),
                tv_nsec: meta.mtime_nsec() + 1,
            },
        };
        rustix::fs::utimensat(rustix::fs::CWD, b.join("two"), &t, rustix::fs::AtFlags::empty()).unwrap();
        let d = compare_trees(&a, &b, CompareOptions::default());
        assert!(matches!(only(&d), DiffKind::Mtime { .. }));
        assert!(d[0].to_string().contains(".123456790"), "{}", d[0]);
        assert!(compare_trees(&a, &b, CompareOptions::whole_seconds()).is_empty());
    }

    #[test]
    fn detects_hard_link_partition() {
        let (_t, a, b) = pair();
        // Same names, same content, same times, but `d/one_link` is a copy in
        // `b` instead of a second name of `one`.
        fs::remove_file(b.join("d/one_link")).unwrap();
        fs::copy(b.join("one"), b.join("d/one_link")).unwrap();
        sync_times(&b);
        let d = compare_trees(&a, &b, CompareOptions::default());
        match only(&d) {
            DiffKind::HardLinks { expected, actual } => {
                assert_eq!(expected.len(), 2);
                assert_eq!(actual.len(), 1);
            }
            other => panic!("unexpected {other:?}"),
        }
        // A hard link to the wrong file is caught too.
        fs::remove_file(b.join("d/one_link")).unwrap();
        fs::hard_link(b.join("two"), b.join("d/one_link")).unwrap();
        fs::write(b.join("two"), b"1").unwrap();
        sync_times(&b);
        let d = compare_trees(&a, &b, CompareOptions::default());
        assert!(
            d.iter().any(|x| matches!(x.kind, DiffKind::HardLinks { .. })),
            "{}",
            format_differences(&d)
        );
    }

    #[test]
    fn detects_missing_extra_type_and_symlink() {
        let (_t, a, b) = pair();
        fs::remove_file(b.join("sym")).unwrap();
        std::os::unix::fs::symlink("elsewhere", b.join("sym")).unwrap();
        fs::remove_file(b.join("two")).unwrap();
        fs::create_dir(b.join("two")).unwrap();
        fs::write(b.join("new"), b"").unwrap();
        fs::remove_file(b.join("d/file")).unwrap();
        sync_times(&b);
        let d = compare_trees(
            &a,
            &b,
            CompareOptions {
                mtime: false,
                ..Default::default()
            },
        );
        let kinds: Vec<&DiffKind> = d.iter().map(|x| &x.kind).collect();
        assert!(kinds.contains(&&DiffKind::Missing), "{}", format_differences(&d));
        assert!(kinds.contains(&&DiffKind::Extra), "{}", format_differences(&d));
        assert!(kinds.contains(&&DiffKind::FileType {
            expected: Kind::File,
            actual: Kind::Dir
        }));
        assert!(kinds.iter().any(|k| matches!(k, DiffKind::SymlinkTarget { .. })));
        // Excluding the differing paths makes the trees equal.
        let opts = CompareOptions {
            mtime: false,
            exclude: vec!["sym".into(), "two".into(), "new".into(), "d/file".into()],
            ..Default::default()
        };
        let d = compare_trees(&a, &b, opts);
        assert!(d.is_empty(), "{}", format_differences(&d));
    }
}
