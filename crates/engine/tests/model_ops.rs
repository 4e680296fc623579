//! Model-based test of the write path: random sequences of operations (23
//! kinds: every node type, data writes and holes, truncation, attributes,
//! links, the four kinds of rename, extended attributes, fallocate modes,
//! unlink while open, inode flags) run against the engine and against an
//! in-memory model that decides each result or errno. After each sequence
//! the image's tree must equal the model (types, contents, symlink targets,
//! device numbers, modes, owners, link counts, flags, xattrs, times set
//! explicitly) and `e2fsck -fn` must be clean.
//! Variants run with inline data, bigalloc, block maps and quotas, and
//! inside a casefolded directory (names compared folded).
//! `PROPTEST_CASES` raises the number of sequences (CI runs the default).

mod common;

use std::collections::BTreeMap;
use std::path::Path;

use ext4kit_engine::device::FileDevice;
use ext4kit_engine::{
    Attr, Error, FallocMode, Filesystem, NodeKind, OpenOptions, ROOT_INO, RenameFlags, SetAttr, XattrSet,
};
use ext4kit_format::inode::{FileType, Timestamp};
use ext4kit_testkit::tools::e2fsck_fn;
use proptest::prelude::*;

const NAMES: &[&str] = &["a", "b", "c", "dir", "long-name-for-a-file-in-this-test"];
/// Names for a casefolded directory: `a`/`A` and `Straße`/`STRASSE` are
/// one name each there.
const CF_NAMES: &[&str] = &["a", "A", "Straße", "STRASSE", "dir"];
const XNAMES: &[&str] = &["user.a", "user.bb", "trusted.t"];
const IDS: &[u32] = &[0, 1000, 65534, 70000];
/// `EXT4_NODUMP_FL` and `EXT4_NOATIME_FL`: the flags the model changes.
const NODUMP: u32 = 0x40;
const NOATIME: u32 = 0x80;

#[derive(Debug, Clone)]
enum Op {
    Create(usize, usize, u16),
    Mkdir(usize, usize, u16),
    /// Target length below 60 bytes: stored in the inode (fast).
    SymlinkFast(usize, usize, u8),
    /// Target length 60 bytes or more: stored in a block (slow).
    SymlinkSlow(usize, usize, u16),
    Fifo(usize, usize),
    CharDev(usize, usize, u32, u32),
    Write(usize, u32, u16, u8),
    Truncate(usize, u32),
    Chmod(usize, u16),
    Chown(usize, usize, usize),
    Utimes(usize, Option<u32>, Option<u32>),
    Link(usize, usize, usize),
    Unlink(usize),
    Rmdir(usize),
    Rename(usize, usize, usize),
    RenameNoreplace(usize, usize, usize),
    RenameExchange(usize, usize),
    SetXattr(usize, usize, u16, u8, u8),
    RemoveXattr(usize, usize),
    Fallocate(usize, u32, u32, u8),
    Open(usize),
    Release(usize),
    SetFlags(usize, bool, bool),
}

fn op() -> impl Strategy<Value = Op> {
    let n = NAMES.len();
    let u = any::<usize>;
    prop_oneof![
        3 => (u(), 0..n, 0..0o10000u16).prop_map(|(d, k, p)| Op::Create(d, k, p)),
        2 => (u(), 0..n, 0..0o10000u16).prop_map(|(d, k, p)| Op::Mkdir(d, k, p)),
        1 => (u(), 0..n, 1..60u8).prop_map(|(d, k, l)| Op::SymlinkFast(d, k, l)),
        1 => (u(), 0..n, 60..1000u16).prop_map(|(d, k, l)| Op::SymlinkSlow(d, k, l)),
        1 => (u(), 0..n).prop_map(|(d, k)| Op::Fifo(d, k)),
        1 => (u(), 0..n, 0..4096u32, 0..1_000_000u32).prop_map(|(d, k, a, b)| Op::CharDev(d, k, a, b)),
        3 => (u(), 0..200_000u32, 1..20_000u16, any::<u8>()).prop_map(|(f, o, l, s)| Op::Write(f, o, l, s)),
        1 => (u(), 0..100_000u32).prop_map(|(f, l)| Op::Truncate(f, l)),
        1 => (u(), 0..0o10000u16).prop_map(|(f, p)| Op::Chmod(f, p)),
        1 => (u(), 0..IDS.len(), 0..IDS.len()).prop_map(|(f, a, b)| Op::Chown(f, a, b)),
        1 => (u(), prop::option::of(1..1_000_000u32), prop::option::of(1..1_000_000u32))
            .prop_map(|(f, a, m)| Op::Utimes(f, a, m)),
        1 => (u(), u(), 0..n).prop_map(|(s, d, k)| Op::Link(s, d, k)),
        1 => u().prop_map(Op::Unlink),
        1 => u().prop_map(Op::Rmdir),
        1 => (u(), u(), 0..n).prop_map(|(s, d, k)| Op::Rename(s, d, k)),
        1 => (u(), u(), 0..n).prop_map(|(s, d, k)| Op::RenameNoreplace(s, d, k)),
        1 => (u(), u()).prop_map(|(s, d)| Op::RenameExchange(s, d)),
        1 => (u(), 0..XNAMES.len(), 0..200u16, any::<u8>(), 0..3u8).prop_map(|(f, x, l, s, h)| Op::SetXattr(f, x, l, s, h)),
        1 => (u(), 0..XNAMES.len()).prop_map(|(f, x)| Op::RemoveXattr(f, x)),
        1 => (u(), 0..200_000u32, 0..50_000u32, 0..5u8).prop_map(|(f, o, l, m)| Op::Fallocate(f, o, l, m)),
        1 => u().prop_map(Op::Open),
        1 => u().prop_map(Op::Release),
        1 => (u(), any::<bool>(), any::<bool>()).prop_map(|(f, a, b)| Op::SetFlags(f, a, b)),
    ]
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Kind {
    Dir,
    File(Vec<u8>),
    Symlink(Vec<u8>),
    Fifo,
    Chr(u32, u32),
}

/// What the model knows of a modification time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum MTime {
    /// Set by utimes and not changed since.
    Set(i64),
    /// A data change followed: it must be "now", not the old explicit one.
    Fresh,
    /// Not modelled (creation, or an operation whose effect the model leaves open).
    Unknown,
}

/// One inode of the model.
#[derive(Debug, Clone)]
struct Node {
    ino: u32,
    kind: Kind,
    perm: u16,
    uid: u32,
    gid: u32,
    flags: u32,
    atime: Option<i64>,
    mtime: MTime,
    xattrs: BTreeMap<Vec<u8>, Vec<u8>>,
    open: u32,
}

/// Paths ("" is the model's root directory) → node ids; nodes by id;
/// open node ids. In a casefolded tree every name of a path is kept
/// folded (`ext4kit_format::casefold::fold`, the engine's own fold), so
/// names that differ in case are one path.
struct Model {
    paths: BTreeMap<String, usize>,
    nodes: Vec<Node>,
    opens: Vec<usize>,
    extents: bool,
    /// The directory the model's root stands for.
    base: u32,
    /// Names compare folded (the base is a casefolded directory).
    fold: bool,
    /// The names operations create (`NAMES`, or `CF_NAMES`).
    names: &'static [&'static str],
}

/// The comparable state of one path: kind, perm, uid, gid, nlink, flags, xattrs.
type Seen = (Kind, u16, u32, u32, u32, u32, BTreeMap<Vec<u8>, Vec<u8>>);

impl Model {
    fn is_dir(&self, p: &str) -> bool {
        self.nodes[self.paths[p]].kind == Kind::Dir
    }
    /// The `i`-th path (cyclically) passing `f`.
    fn pick_by(&self, i: usize, f: impl Fn(&str, &Node) -> bool) -> Option<String> {
        let v: Vec<&String> = self
            .paths
            .iter()
            .filter(|(p, id)| f(p, &self.nodes[**id]))
            .map(|(p, _)| p)
            .collect();
        (!v.is_empty()).then(|| v[i % v.len()].clone())
    }
    fn pick_dir(&self, i: usize) -> String {
        self.pick_by(i, |_, n| n.kind == Kind::Dir).unwrap()
    }
    fn pick_file(&self, i: usize) -> Option<String> {
        self.pick_by(i, |_, n| matches!(n.kind, Kind::File(_)))
    }
    fn pick_nondir(&self, i: usize) -> Option<String> {
        self.pick_by(i, |_, n| n.kind != Kind::Dir)
    }
    fn pick_any(&self, i: usize) -> Option<String> {
        self.pick_by(i, |p, _| !p.is_empty())
    }
    /// A regular file with a name or open without one: the data ops' target.
    fn pick_body(&self, i: usize) -> Option<usize> {
        let v: Vec<usize> = (0..self.nodes.len())
            .filter(|&id| matches!(self.nodes[id].kind, Kind::File(_)) && self.live(id))
            .collect();
        (!v.is_empty()).then(|| v[i % v.len()])
    }
    fn live(&self, id: usize) -> bool {
        self.nodes[id].open > 0 || self.paths.values().any(|&v| v == id)
    }
    /// The model's path of `name` in `dir`: folded in a casefolded tree.
    fn child(&self, dir: &str, name: &str) -> String {
        let name = match self.fold {
            true => ext4kit_format::casefold::fold(name.as_bytes())
                .map(|f| String::from_utf8(f).unwrap())
                .unwrap_or_else(|| name.to_string()),
            false => name.to_string(),
        };
        if dir.is_empty() { name } else { format!("{dir}/{name}") }
    }
    /// The inode at model path `p`, looked up name by name from the base
    /// (by the engine's own comparison: folded in a casefolded tree).
    fn ino(&self, fs: &Filesystem, p: &str) -> u32 {
        p.split('/').filter(|c| !c.is_empty()).fold(self.base, |dir, c| {
            let d = fs.inode(dir).unwrap();
            fs.lookup(&d, c.as_bytes()).unwrap_or_else(|e| panic!("{p}: {e}"))
        })
    }
    fn is_empty_dir(&self, p: &str) -> bool {
        !self.paths.keys().any(|k| under(k, p))
    }
    fn touch_dir(&mut self, dir: &str) {
        let id = self.paths[dir];
        self.nodes[id].mtime = MTime::Unknown;
    }
    fn nlink(&self, p: &str) -> u32 {
        let id = self.paths[p];
        if self.nodes[id].kind != Kind::Dir {
            return self.paths.values().filter(|&&v| v == id).count() as u32;
        }
        let subdirs = self
            .paths
            .keys()
            .filter(|k| !k.is_empty() && split(k).0 == p && self.is_dir(k))
            .count() as u32;
        // The root also holds lost+found.
        2 + subdirs + u32::from(p.is_empty() && self.base == ROOT_INO)
    }
    /// Moves `src` and everything under it to `dst`.
    fn move_tree(&mut self, src: &str, dst: &str) -> Vec<(String, usize)> {
        let moved: Vec<(String, usize)> = self
            .paths
            .iter()
            .filter(|(p, _)| *p == src || under(p, src))
            .map(|(p, v)| (p.clone(), *v))
            .collect();
        for (p, _) in &moved {
            self.paths.remove(p);
        }
        moved
            .into_iter()
            .map(|(p, v)| (format!("{dst}{}", &p[src.len()..]), v))
            .collect()
    }
}

/// Whether `p` lies strictly below directory `dir`.
fn under(p: &str, dir: &str) -> bool {
    if dir.is_empty() {
        !p.is_empty()
    } else {
        p.starts_with(&format!("{dir}/"))
    }
}

fn split(p: &str) -> (&str, &str) {
    p.rsplit_once('/').unwrap_or(("", p))
}

fn bytes(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(7).wrapping_add(seed) | 1)
        .collect()
}

fn ts(secs: u32) -> Timestamp {
    Timestamp {
        secs: i64::from(secs),
        nsecs: 0,
    }
}

/// Applies `op` to both; asserts the engine's result is the model's.
fn apply(fs: &Filesystem, m: &mut Model, op: &Op) {
    match *op {
        Op::Create(d, k, p) => create(fs, m, d, k, NodeKind::Regular, p),
        Op::Mkdir(d, k, p) => create(fs, m, d, k, NodeKind::Directory, p),
        Op::SymlinkFast(d, k, l) => create(fs, m, d, k, NodeKind::Symlink(bytes(l.into(), b'f')), 0o777),
        Op::SymlinkSlow(d, k, l) => create(fs, m, d, k, NodeKind::Symlink(bytes(l.into(), b's')), 0o777),
        Op::Fifo(d, k) => create(fs, m, d, k, NodeKind::Fifo, 0o600),
        Op::CharDev(d, k, a, b) => create(fs, m, d, k, NodeKind::CharDevice(a, b), 0o660),
        Op::Write(..) | Op::Truncate(..) | Op::Fallocate(..) => data(fs, m, op),
        Op::Chmod(..) | Op::Chown(..) | Op::Utimes(..) | Op::SetFlags(..) => attrs(fs, m, op),
        Op::Link(s, d, k) => link(fs, m, s, d, k),
        Op::Unlink(f) => {
            let Some(p) = m.pick_nondir(f) else { return };
            let (dir, name) = split(&p);
            fs.unlink(m.ino(fs, dir), name.as_bytes()).unwrap();
            m.paths.remove(&p);
            m.touch_dir(dir);
        }
        Op::Rmdir(d) => {
            let Some(p) = m.pick_by(d, |p, n| !p.is_empty() && n.kind == Kind::Dir) else {
                return;
            };
            let (dir, name) = split(&p);
            let r = fs.rmdir(m.ino(fs, dir), name.as_bytes());
            if m.is_empty_dir(&p) {
                r.unwrap();
                m.paths.remove(&p);
                m.touch_dir(dir);
            } else {
                assert!(matches!(r, Err(Error::NotEmpty(_))), "{op:?}: {r:?}");
            }
        }
        Op::Rename(s, d, k) => rename(fs, m, s, d, k, false),
        Op::RenameNoreplace(s, d, k) => rename(fs, m, s, d, k, true),
        Op::RenameExchange(s, d) => exchange(fs, m, s, d),
        Op::SetXattr(..) | Op::RemoveXattr(..) => xattr(fs, m, op),
        Op::Open(f) => {
            let Some(p) = m.pick_file(f) else { return };
            let id = m.paths[&p];
            fs.open_file(m.nodes[id].ino).unwrap();
            m.nodes[id].open += 1;
            m.opens.push(id);
        }
        Op::Release(i) => {
            if m.opens.is_empty() {
                return;
            }
            let id = m.opens.remove(i % m.opens.len());
            release(fs, m, id);
        }
    }
}

fn release(fs: &Filesystem, m: &mut Model, id: usize) {
    fs.release_file(m.nodes[id].ino).unwrap();
    m.nodes[id].open -= 1;
}

fn create(fs: &Filesystem, m: &mut Model, d: usize, k: usize, kind: NodeKind, perm: u16) {
    let dir = m.pick_dir(d);
    let name = m.names[k];
    let path = m.child(&dir, name);
    let attr = Attr {
        perm,
        uid: 1000,
        gid: 100,
    };
    let r = fs.create(m.ino(fs, &dir), name.as_bytes(), kind.clone(), attr);
    if m.paths.contains_key(&path) {
        assert!(matches!(r, Err(Error::Exists(_))), "create {path}: {r:?}");
        return;
    }
    let inode = r.unwrap();
    let kind = match kind {
        NodeKind::Regular => Kind::File(Vec::new()),
        NodeKind::Directory => Kind::Dir,
        NodeKind::Symlink(t) => Kind::Symlink(t),
        NodeKind::Fifo => Kind::Fifo,
        NodeKind::CharDevice(a, b) => Kind::Chr(a, b),
        other => unreachable!("{other:?}"),
    };
    m.nodes.push(Node {
        ino: inode.ino,
        kind,
        perm,
        uid: 1000,
        gid: 100,
        flags: 0,
        atime: None,
        mtime: MTime::Unknown,
        xattrs: BTreeMap::new(),
        open: 0,
    });
    m.paths.insert(path, m.nodes.len() - 1);
    m.touch_dir(&dir);
}

/// Write, truncate and fallocate on a regular file, named or open.
fn data(fs: &Filesystem, m: &mut Model, op: &Op) {
    let (Op::Write(f, ..) | Op::Truncate(f, _) | Op::Fallocate(f, ..)) = *op else {
        unreachable!()
    };
    let Some(id) = m.pick_body(f) else { return };
    let ino = m.nodes[id].ino;
    let extents = m.extents;
    let node = &mut m.nodes[id];
    let Kind::File(body) = &mut node.kind else {
        unreachable!()
    };
    match *op {
        Op::Write(_, off, len, seed) => {
            let buf = bytes(len.into(), seed);
            assert_eq!(fs.write(ino, u64::from(off), &buf).unwrap(), buf.len());
            let end = off as usize + buf.len();
            if body.len() < end {
                body.resize(end, 0);
            }
            body[off as usize..end].copy_from_slice(&buf);
            node.mtime = MTime::Fresh;
        }
        Op::Truncate(_, len) => {
            fs.truncate(ino, u64::from(len)).unwrap();
            if body.len() != len as usize {
                node.mtime = MTime::Fresh;
            }
            body.resize(len as usize, 0);
        }
        Op::Fallocate(_, off, len, mode) => {
            let mode = [
                FallocMode::Allocate { keep_size: false },
                FallocMode::Allocate { keep_size: true },
                FallocMode::PunchHole,
                FallocMode::ZeroRange { keep_size: false },
                FallocMode::ZeroRange { keep_size: true },
            ][usize::from(mode)];
            let r = fs.fallocate(ino, u64::from(off), u64::from(len), mode);
            if len == 0 {
                assert!(matches!(r, Err(Error::InvalidArgument(_))), "{op:?}: {r:?}");
                return;
            }
            if !extents && mode != FallocMode::PunchHole {
                assert!(matches!(r, Err(Error::Unsupported(_))), "{op:?}: {r:?}");
                return;
            }
            r.unwrap_or_else(|e| panic!("{op:?}: {e:?}"));
            let (off, end) = (off as usize, off as usize + len as usize);
            let grows = matches!(
                mode,
                FallocMode::Allocate { keep_size: false } | FallocMode::ZeroRange { keep_size: false }
            );
            if grows && body.len() < end {
                body.resize(end, 0);
            }
            if matches!(mode, FallocMode::PunchHole | FallocMode::ZeroRange { .. }) {
                let to = end.min(body.len());
                if off < to {
                    body[off..to].fill(0);
                }
            }
            node.mtime = MTime::Unknown;
        }
        _ => unreachable!(),
    }
}

/// chmod, chown, utimes and set_flags on any named node.
fn attrs(fs: &Filesystem, m: &mut Model, op: &Op) {
    let (Op::Chmod(f, _) | Op::Chown(f, ..) | Op::Utimes(f, ..) | Op::SetFlags(f, ..)) = *op else {
        unreachable!()
    };
    // chattr reaches regular files and directories only (it opens them).
    let flags_op = matches!(op, Op::SetFlags(..));
    let p = m
        .pick_by(f, |_, n| !flags_op || matches!(n.kind, Kind::File(_) | Kind::Dir))
        .unwrap();
    let ino = m.ino(fs, &p);
    let node = &mut m.nodes[m.paths[&p]];
    match *op {
        Op::Chmod(_, perm) => {
            fs.setattr(
                ino,
                &SetAttr {
                    perm: Some(perm),
                    ..SetAttr::default()
                },
            )
            .unwrap();
            node.perm = perm;
        }
        Op::Chown(_, u, g) => {
            let set = SetAttr {
                uid: Some(IDS[u]),
                gid: Some(IDS[g]),
                ..SetAttr::default()
            };
            fs.setattr(ino, &set).unwrap();
            (node.uid, node.gid) = (IDS[u], IDS[g]);
        }
        Op::Utimes(_, a, mt) => {
            let set = SetAttr {
                atime: a.map(ts),
                mtime: mt.map(ts),
                ..SetAttr::default()
            };
            fs.setattr(ino, &set).unwrap();
            if let Some(a) = a {
                node.atime = Some(a.into());
            }
            if let Some(mt) = mt {
                node.mtime = MTime::Set(mt.into());
            }
        }
        Op::SetFlags(_, nodump, noatime) => {
            let want = (u32::from(nodump) * NODUMP) | (u32::from(noatime) * NOATIME);
            let cur = fs.inode(ino).unwrap().raw.flags() & ext4kit_engine::flags::USER_VISIBLE;
            fs.set_flags(ino, (cur & !(NODUMP | NOATIME)) | want, false).unwrap();
            node.flags = want;
        }
        _ => unreachable!(),
    }
}

fn link(fs: &Filesystem, m: &mut Model, s: usize, d: usize, k: usize) {
    let Some(src) = m.pick_nondir(s) else { return };
    let dir = m.pick_dir(d);
    let dst = m.child(&dir, m.names[k]);
    let r = fs.link(m.ino(fs, &src), m.ino(fs, &dir), m.names[k].as_bytes());
    if m.paths.contains_key(&dst) {
        assert!(matches!(r, Err(Error::Exists(_))), "link {src} {dst}: {r:?}");
    } else {
        r.unwrap();
        m.paths.insert(dst, m.paths[&src]);
        m.touch_dir(&dir);
    }
}

fn xattr(fs: &Filesystem, m: &mut Model, op: &Op) {
    let (Op::SetXattr(f, x, ..) | Op::RemoveXattr(f, x)) = *op else {
        unreachable!()
    };
    // user.* attributes belong to regular files and directories only.
    let Some(p) = m.pick_by(f, |_, n| matches!(n.kind, Kind::File(_) | Kind::Dir)) else {
        return;
    };
    let ino = m.ino(fs, &p);
    let name = XNAMES[x].as_bytes().to_vec();
    let attrs = &mut m.nodes[m.paths[&p]].xattrs;
    let exists = attrs.contains_key(&name);
    match *op {
        Op::SetXattr(_, _, len, seed, how) => {
            let how = [XattrSet::Any, XattrSet::Create, XattrSet::Replace][usize::from(how)];
            let value = bytes(len.into(), seed);
            let r = fs.set_xattr(ino, &name, &value, how);
            match how {
                XattrSet::Create if exists => assert!(matches!(r, Err(Error::Exists(_))), "{op:?}: {r:?}"),
                XattrSet::Replace if !exists => {
                    assert!(matches!(r, Err(Error::NoAttribute(_))), "{op:?}: {r:?}")
                }
                _ => {
                    r.unwrap_or_else(|e| panic!("{op:?} on {p}: {e:?}"));
                    attrs.insert(name, value);
                }
            }
        }
        Op::RemoveXattr(..) => {
            let r = fs.remove_xattr(ino, &name);
            if exists {
                r.unwrap();
                attrs.remove(&name);
            } else {
                assert!(matches!(r, Err(Error::NoAttribute(_))), "{op:?}: {r:?}");
            }
        }
        _ => unreachable!(),
    }
}

fn rename(fs: &Filesystem, m: &mut Model, s: usize, d: usize, k: usize, noreplace: bool) {
    let Some(src) = m.pick_any(s) else { return };
    let dir = m.pick_dir(d);
    let dst = m.child(&dir, m.names[k]);
    let (sd, sn) = split(&src);
    let flags = RenameFlags {
        noreplace,
        exchange: false,
    };
    let r = fs.rename(
        m.ino(fs, sd),
        sn.as_bytes(),
        m.ino(fs, &dir),
        m.names[k].as_bytes(),
        flags,
    );
    let what = format!("rename {src} {dst} {flags:?}: {r:?}");
    // renameat2 checks RENAME_NOREPLACE before anything about the names.
    if noreplace && m.paths.contains_key(&dst) {
        assert!(matches!(r, Err(Error::Exists(_))), "{what}");
        return;
    }
    let src_is_dir = m.is_dir(&src);
    if src_is_dir && (dst == src || under(&dst, &src)) {
        if dst != src {
            assert!(matches!(r, Err(Error::InvalidArgument(_))), "{what}");
        }
        return;
    }
    match m.paths.get(&dst).map(|&id| m.nodes[id].kind == Kind::Dir) {
        Some(false) if src_is_dir => assert!(matches!(r, Err(Error::NotDir(_))), "{what}"),
        Some(true) if !src_is_dir => assert!(matches!(r, Err(Error::IsDir(_))), "{what}"),
        Some(true) if !m.is_empty_dir(&dst) => assert!(matches!(r, Err(Error::NotEmpty(_))), "{what}"),
        Some(false) if m.paths[&dst] == m.paths[&src] => r.unwrap(),
        _ => {
            r.unwrap_or_else(|e| panic!("{what}: {e:?}"));
            let moved = m.move_tree(&src, &dst);
            m.paths.remove(&dst);
            m.paths.extend(moved);
            m.touch_dir(sd);
            m.touch_dir(&dir);
        }
    }
}

fn exchange(fs: &Filesystem, m: &mut Model, s: usize, d: usize) {
    let (Some(a), Some(b)) = (m.pick_any(s), m.pick_any(d)) else {
        return;
    };
    let ((ad, an), (bd, bn)) = (split(&a), split(&b));
    let flags = RenameFlags {
        noreplace: false,
        exchange: true,
    };
    let r = fs.rename(m.ino(fs, ad), an.as_bytes(), m.ino(fs, bd), bn.as_bytes(), flags);
    let what = format!("exchange {a} {b}: {r:?}");
    if a == b {
        return;
    }
    if under(&a, &b) || under(&b, &a) {
        // One inside the other: the kernel's "trap" (EINVAL / ENOTEMPTY).
        assert!(r.is_err(), "{what}");
        return;
    }
    r.unwrap_or_else(|e| panic!("{what}: {e:?}"));
    let ta = m.move_tree(&a, "\0a");
    let tb = m.move_tree(&b, "\0b");
    for (p, v) in ta {
        m.paths.insert(format!("{b}{}", &p[2..]), v);
    }
    for (p, v) in tb {
        m.paths.insert(format!("{a}{}", &p[2..]), v);
    }
    m.touch_dir(ad);
    m.touch_dir(bd);
}

/// Engine tree == model; explicit times kept; open orphans hold their bodies.
fn check(fs: &Filesystem, m: &Model) {
    let mut seen = BTreeMap::new();
    walk(fs, m, m.base, "", &mut seen);
    let want: BTreeMap<String, Seen> = m
        .paths
        .iter()
        .map(|(p, &id)| {
            let n = &m.nodes[id];
            let xattrs = n.xattrs.clone();
            (
                p.clone(),
                (n.kind.clone(), n.perm, n.uid, n.gid, m.nlink(p), n.flags, xattrs),
            )
        })
        .collect();
    if seen != want {
        let keys: std::collections::BTreeSet<&String> = seen.keys().chain(want.keys()).collect();
        for k in keys {
            let (a, b) = (seen.get(k), want.get(k));
            if a != b {
                let short = |x: Option<&Seen>| {
                    x.map(|s| (format!("{:?}", s.0).chars().take(60).collect::<String>(), s.1, s.4, s.5))
                };
                panic!("{k:?}: engine {:?}, model {:?}", short(a), short(b));
            }
        }
    }
    for (id, n) in m.nodes.iter().enumerate() {
        if n.open > 0 && !m.paths.values().any(|&v| v == id) {
            let inode = fs.inode(n.ino).unwrap();
            assert_eq!(inode.raw.links(), 0, "orphan {}", n.ino);
            assert_eq!(
                Kind::File(fs.read_all(&inode, 1 << 24).unwrap()),
                n.kind,
                "orphan {}",
                n.ino
            );
        }
    }
}

fn walk(fs: &Filesystem, m: &Model, dir: u32, prefix: &str, out: &mut BTreeMap<String, Seen>) {
    let inode = fs.inode(dir).unwrap();
    out.insert(prefix.to_string(), seen(fs, m, prefix, &inode));
    for e in fs.read_dir(&inode).unwrap() {
        let name = String::from_utf8(e.name).unwrap();
        if name == "." || name == ".." || (prefix.is_empty() && name == "lost+found") {
            continue;
        }
        let path = m.child(prefix, &name);
        let child = fs.inode(e.ino).unwrap();
        if child.is_dir() {
            walk(fs, m, e.ino, &path, out);
        } else {
            out.insert(path.clone(), seen(fs, m, &path, &child));
        }
    }
}

/// The engine's state of one path; checks the times the model knows.
fn seen(fs: &Filesystem, m: &Model, path: &str, inode: &ext4kit_engine::Inode) -> Seen {
    let md = fs.metadata(inode).unwrap();
    let kind = match md.file_type {
        FileType::Directory => Kind::Dir,
        FileType::Regular => Kind::File(fs.read_all(inode, 1 << 24).unwrap()),
        FileType::Symlink => Kind::Symlink(fs.read_link(inode).unwrap()),
        FileType::Fifo => Kind::Fifo,
        FileType::CharDevice => Kind::Chr(md.rdev.0, md.rdev.1),
        other => panic!("{path}: unexpected {other:?}"),
    };
    let xattrs = fs
        .xattrs(inode)
        .unwrap()
        .into_iter()
        .filter(|x| x.name.starts_with(b"user.") || x.name.starts_with(b"trusted."))
        .map(|x| (x.name, x.value))
        .collect();
    if let Some(&id) = m.paths.get(path) {
        let n = &m.nodes[id];
        if let Some(a) = n.atime {
            assert_eq!(md.atime.secs, a, "{path}: atime");
        }
        match n.mtime {
            MTime::Set(t) => assert_eq!(md.mtime.secs, t, "{path}: mtime"),
            MTime::Fresh => assert!(md.mtime.secs > 1_000_000, "{path}: mtime {:?} not updated", md.mtime),
            MTime::Unknown => {}
        }
    }
    let flags = md.flags & (NODUMP | NOATIME);
    (kind, md.perm, md.uid, md.gid, md.nlink, flags, xattrs)
}

fn run(ops: &[Op], args: &[&str]) {
    run_with(ops, args, OpenOptions::default());
}

fn run_with(ops: &[Op], args: &[&str], opts: OpenOptions) {
    run_prepared(ops, args, opts, |_| {});
}

/// [`run_with`], with `prepare` run on the fresh file system first.
fn run_prepared(ops: &[Op], args: &[&str], opts: OpenOptions, prepare: impl FnOnce(&Filesystem)) {
    let dir = tempfile::tempdir().unwrap();
    let Some(img) = common::mkfs(dir.path(), None, args, "16M") else {
        return;
    };
    let fs = Filesystem::open(Box::new(FileDevice::open(&img, true).unwrap()), opts).unwrap();
    prepare(&fs);
    run_model(&fs, ops, ROOT_INO, false, NAMES);
    drop(fs);
    fsck_clean(&img, ops);
}

/// The sequence inside `/cf`, a casefolded directory of a casefold image,
/// with names that differ in case (and `ß` against `SS`).
fn run_casefold(ops: &[Op]) {
    let dir = tempfile::tempdir().unwrap();
    let Some(img) = common::mkfs(dir.path(), None, &["-b", "1024", "-O", "casefold"], "16M") else {
        return;
    };
    let fs = Filesystem::open(Box::new(FileDevice::open(&img, true).unwrap()), OpenOptions::default()).unwrap();
    let attr = Attr {
        perm: 0o755,
        uid: 0,
        gid: 0,
    };
    let cf = fs.create(ROOT_INO, b"cf", NodeKind::Directory, attr).unwrap();
    fs.set_flags(cf.ino, cf.raw.flags() | ext4kit_format::inode::flags::CASEFOLD, false)
        .unwrap();
    run_model(&fs, ops, cf.ino, true, CF_NAMES);
    drop(fs);
    fsck_clean(&img, ops);
}

/// The sequence inside `/ce` of a `casefold,encrypt` image: casefolded,
/// then given a v2 policy by ext4kit (the kernel here has no casefold).
fn run_casefold_encrypted(ops: &[Op]) {
    let dir = tempfile::tempdir().unwrap();
    let Some(img) = common::mkfs(dir.path(), None, &["-b", "1024", "-O", "casefold,encrypt"], "16M") else {
        return;
    };
    let fs = Filesystem::open(Box::new(FileDevice::open(&img, true).unwrap()), OpenOptions::default()).unwrap();
    let id = fs.add_key(&[0x5au8; 64], None).unwrap();
    let attr = Attr {
        perm: 0o755,
        uid: 0,
        gid: 0,
    };
    let ce = fs.create(ROOT_INO, b"ce", NodeKind::Directory, attr).unwrap();
    fs.set_flags(ce.ino, ce.raw.flags() | ext4kit_format::inode::flags::CASEFOLD, false)
        .unwrap();
    fs.set_encryption_policy(ce.ino, &ext4kit_engine::Policy::new(id, 2))
        .unwrap();
    run_model(&fs, ops, ce.ino, true, CF_NAMES);
    drop(fs);
    fsck_clean(&img, ops);
}

/// Runs `ops` on the tree under `base` and on the model, checking the
/// engine against it before and after every open file is released.
fn run_model(fs: &Filesystem, ops: &[Op], base: u32, fold: bool, names: &'static [&'static str]) {
    let root = fs.metadata(&fs.inode(base).unwrap()).unwrap();
    let mut m = Model {
        paths: BTreeMap::new(),
        nodes: Vec::new(),
        opens: Vec::new(),
        extents: fs
            .features()
            .incompat
            .contains(ext4kit_format::features::IncompatFeatures::EXTENTS),
        base,
        fold,
        names,
    };
    m.nodes.push(Node {
        ino: base,
        kind: Kind::Dir,
        perm: root.perm,
        uid: root.uid,
        gid: root.gid,
        flags: root.flags & (NODUMP | NOATIME),
        atime: None,
        mtime: MTime::Unknown,
        xattrs: BTreeMap::new(),
        open: 0,
    });
    m.paths.insert(String::new(), 0);
    for op in ops {
        apply(fs, &mut m, op);
    }
    check(fs, &m);
    while let Some(id) = m.opens.pop() {
        release(fs, &mut m, id);
    }
    check(fs, &m);
}

/// The model inside a v2-encrypted directory `/enc` the kernel made, with
/// the key given (names, contents and symlinks through fscrypt). Skips
/// without loop mounts or kernel encryption.
fn run_encrypted(ops: &[Op]) {
    use ext4kit_testkit::mount::{LoopMount, can_loop_mount};
    if let Err(why) = can_loop_mount().and_then(|()| {
        std::fs::metadata("/sys/fs/ext4/features/encryption")
            .map(|_| ())
            .map_err(|_| "no ext4 encryption".to_string())
    }) {
        ext4kit_testkit::skipped!("{why}");
        assert!(std::env::var_os("CI").is_none(), "CI must run this: {why}");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let Some(img) = common::mkfs(dir.path(), None, &["-b", "4096", "-O", "encrypt"], "16M") else {
        return;
    };
    let key = dir.path().join("key");
    std::fs::write(&key, [0x5au8; 64]).unwrap();
    let m = LoopMount::rw(&img, &[]).unwrap();
    let id = ext4kit_testkit::fscrypt::ioctl(&["add-key", m.path().to_str().unwrap(), key.to_str().unwrap()]);
    let enc = m.path().join("enc");
    std::fs::create_dir(&enc).unwrap();
    ext4kit_testkit::fscrypt::ioctl(&["set-policy", enc.to_str().unwrap(), &id]);
    m.unmount().unwrap();
    let fs = Filesystem::open(Box::new(FileDevice::open(&img, true).unwrap()), OpenOptions::default()).unwrap();
    fs.add_key(&[0x5au8; 64], None).unwrap();
    let base = fs.resolve(b"/enc").unwrap().ino;
    run_model(&fs, ops, base, false, NAMES);
    drop(fs);
    fsck_clean(&img, ops);
}

fn fsck_clean(img: &Path, ops: &[Op]) {
    let r = e2fsck_fn(img).unwrap();
    assert!(r.is_clean(), "e2fsck after {ops:?}:\n{}", r.output);
}

/// Sequences per test: 24, or `PROPTEST_CASES`.
fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(24)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    #[test]
    fn ops_match_the_model_on_4k_ext4(ops in prop::collection::vec(op(), 1..60)) {
        run(&ops, &["-b", "4096"]);
    }

    /// Every write allocating at once (`nodelalloc`) and the ext3
    /// allocator: the other write path and the other block policy.
    #[test]
    fn ops_match_the_model_on_4k_ext4_nodelalloc_ext3_alloc(ops in prop::collection::vec(op(), 1..60)) {
        let alloc = ext4kit_engine::AllocOptions {
            delalloc: false,
            blocks: ext4kit_engine::BlockAllocator::Ext3,
            ..Default::default()
        };
        run_with(&ops, &["-b", "4096"], OpenOptions { alloc, ..OpenOptions::default() });
    }

    #[test]
    fn ops_match_the_model_on_ext2_block_maps(ops in prop::collection::vec(op(), 1..60)) {
        run(&ops, &["-t", "ext2", "-b", "1024"]);
    }

    /// Inline bodies: files, directories and symlinks start in the inode.
    #[test]
    fn ops_match_the_model_with_inline_data(ops in prop::collection::vec(op(), 1..60)) {
        run(&ops, &["-b", "4096", "-O", "inline_data"]);
    }

    /// Bigalloc with 1 KiB blocks in 16 KiB clusters: every write, hole,
    /// truncation and fallocate in clusters, writes delayed with their
    /// reservations counted in clusters.
    #[test]
    fn ops_match_the_model_on_1k_bigalloc(ops in prop::collection::vec(op(), 1..60)) {
        run(&ops, &["-b", "1024", "-O", "bigalloc", "-C", "16384"]);
    }

    /// Bigalloc with every write allocating at once under the ext3
    /// allocator's windows in clusters.
    #[test]
    fn ops_match_the_model_on_1k_bigalloc_nodelalloc_ext3_alloc(ops in prop::collection::vec(op(), 1..60)) {
        let alloc = ext4kit_engine::AllocOptions {
            delalloc: false,
            blocks: ext4kit_engine::BlockAllocator::Ext3,
            ..Default::default()
        };
        run_with(&ops, &["-b", "1024", "-O", "bigalloc", "-C", "16384"], OpenOptions { alloc, ..OpenOptions::default() });
    }

    #[test]
    fn ops_match_the_model_on_1k_ext4_without_csum(ops in prop::collection::vec(op(), 1..60)) {
        run(&ops, &["-b", "1024", "-O", "^metadata_csum,uninit_bg"]);
    }
}

/// The quota variants run half as many sequences: they repeat the write
/// paths above with usage kept at every commit.
fn quota_cases() -> u32 {
    cases().div_ceil(2)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: quota_cases(), ..ProptestConfig::default() })]

    /// User, group and project quota with inline bodies, the root in
    /// project 42 with PROJINHERIT so every node is charged to it: the
    /// closing e2fsck -fn checks the usage of every id.
    #[test]
    fn ops_match_the_model_with_quota_project_and_inline_data(ops in prop::collection::vec(op(), 1..60)) {
        let args = ["-b", "4096", "-I", "256", "-O", "quota,project,inline_data"];
        run_prepared(&ops, &args, OpenOptions::default(), |fs| {
            fs.set_project(ROOT_INO, Some(42), Some(true)).unwrap();
        });
    }

    /// Inside a casefolded directory: names that differ only in case (or
    /// fold alike, `ß` and `SS`) are one name to create, link, rename and
    /// unlink; the tree is compared with every name folded.
    #[test]
    fn ops_match_the_model_in_a_casefolded_directory(ops in prop::collection::vec(op(), 1..60)) {
        run_casefold(&ops);
    }

    /// Inside an encrypted directory with its key (issue 21).
    #[test]
    fn ops_match_the_model_in_an_encrypted_directory(ops in prop::collection::vec(op(), 1..60)) {
        run_encrypted(&ops);
    }

    /// Inside a directory both casefolded and encrypted, with its key:
    /// names compare folded and every entry stores its SipHash.
    #[test]
    fn ops_match_the_model_in_a_casefolded_encrypted_directory(ops in prop::collection::vec(op(), 1..60)) {
        run_casefold_encrypted(&ops);
    }

    /// Quota on bigalloc: usage moves by whole clusters.
    #[test]
    fn ops_match_the_model_on_1k_bigalloc_with_quota(ops in prop::collection::vec(op(), 1..60)) {
        run(&ops, &["-b", "1024", "-O", "bigalloc,quota", "-C", "16384"]);
    }
}
