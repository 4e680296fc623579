//! Model-based test of the write path: random sequences of operations run
//! against the engine and against an in-memory model; after each sequence
//! the image's tree must equal the model and `e2fsck -fn` must be clean.
//! `PROPTEST_CASES` raises the number of sequences (CI runs the default).

mod common;

use std::collections::BTreeMap;
use std::path::Path;

use ext4kit_engine::device::FileDevice;
use ext4kit_engine::{Attr, Error, Filesystem, NodeKind, OpenOptions, ROOT_INO, RenameFlags};
use ext4kit_testkit::tools::e2fsck_fn;
use proptest::prelude::*;

const ATTR: Attr = Attr {
    perm: 0o644,
    uid: 0,
    gid: 0,
};
const NAMES: &[&str] = &["a", "b", "c", "dir", "long-name-for-a-file-in-this-test"];

#[derive(Debug, Clone)]
enum Op {
    Create(usize, usize),
    Mkdir(usize, usize),
    Write(usize, u32, u16, u8),
    Truncate(usize, u32),
    Unlink(usize),
    Rmdir(usize),
    Rename(usize, usize, usize),
    Link(usize, usize, usize),
}

fn op() -> impl Strategy<Value = Op> {
    let n = NAMES.len();
    prop_oneof![
        (any::<usize>(), 0..n).prop_map(|(d, k)| Op::Create(d, k)),
        (any::<usize>(), 0..n).prop_map(|(d, k)| Op::Mkdir(d, k)),
        (any::<usize>(), 0..200_000u32, 1..20_000u16, any::<u8>()).prop_map(|(f, o, l, s)| Op::Write(f, o, l, s)),
        (any::<usize>(), 0..100_000u32).prop_map(|(f, l)| Op::Truncate(f, l)),
        any::<usize>().prop_map(Op::Unlink),
        any::<usize>().prop_map(Op::Rmdir),
        (any::<usize>(), any::<usize>(), 0..n).prop_map(|(s, d, k)| Op::Rename(s, d, k)),
        (any::<usize>(), any::<usize>(), 0..n).prop_map(|(s, d, k)| Op::Link(s, d, k)),
    ]
}

/// Paths ("" is the root) → a directory or a file id; contents by id.
#[derive(Default)]
struct Model {
    paths: BTreeMap<String, Option<usize>>,
    files: Vec<Vec<u8>>,
}

impl Model {
    fn pick(&self, i: usize, dirs: bool) -> Option<String> {
        let v: Vec<&String> = self
            .paths
            .iter()
            .filter(|(_, f)| f.is_none() == dirs)
            .map(|(p, _)| p)
            .collect();
        (!v.is_empty()).then(|| v[i % v.len()].clone())
    }
    fn child(dir: &str, name: &str) -> String {
        if dir.is_empty() {
            name.to_string()
        } else {
            format!("{dir}/{name}")
        }
    }
    fn is_empty_dir(&self, p: &str) -> bool {
        !self.paths.keys().any(|k| k.starts_with(&format!("{p}/")))
    }
}

fn ino(fs: &Filesystem, p: &str) -> u32 {
    if p.is_empty() {
        ROOT_INO
    } else {
        fs.resolve(p.as_bytes()).unwrap().ino
    }
}

fn split(p: &str) -> (&str, &str) {
    p.rsplit_once('/').unwrap_or(("", p))
}

/// Applies `op` to both; asserts the engine agrees with the model on success.
fn apply(fs: &Filesystem, m: &mut Model, op: &Op) {
    match *op {
        Op::Create(d, k) | Op::Mkdir(d, k) => {
            let dir = m.pick(d, true).unwrap();
            let path = Model::child(&dir, NAMES[k]);
            let is_dir = matches!(op, Op::Mkdir(..));
            let kind = if is_dir { NodeKind::Directory } else { NodeKind::Regular };
            let r = fs.create(ino(fs, &dir), NAMES[k].as_bytes(), kind, ATTR);
            if m.paths.contains_key(&path) {
                assert!(matches!(r, Err(Error::Exists(_))), "{op:?}: {r:?}");
            } else {
                r.unwrap();
                let id = (!is_dir).then(|| {
                    m.files.push(Vec::new());
                    m.files.len() - 1
                });
                m.paths.insert(path, id);
            }
        }
        Op::Write(f, off, len, seed) => {
            let Some(p) = m.pick(f, false) else { return };
            let data: Vec<u8> = (0..len).map(|i| (i as u8).wrapping_add(seed)).collect();
            fs.write(ino(fs, &p), u64::from(off), &data).unwrap();
            let body = &mut m.files[m.paths[&p].unwrap()];
            let end = off as usize + data.len();
            if body.len() < end {
                body.resize(end, 0);
            }
            body[off as usize..end].copy_from_slice(&data);
        }
        Op::Truncate(f, len) => {
            let Some(p) = m.pick(f, false) else { return };
            fs.truncate(ino(fs, &p), u64::from(len)).unwrap();
            m.files[m.paths[&p].unwrap()].resize(len as usize, 0);
        }
        Op::Unlink(f) => {
            let Some(p) = m.pick(f, false) else { return };
            let (dir, name) = split(&p);
            fs.unlink(ino(fs, dir), name.as_bytes()).unwrap();
            m.paths.remove(&p);
        }
        Op::Rmdir(d) => {
            let Some(p) = m.pick(d, true).filter(|p| !p.is_empty()) else {
                return;
            };
            let (dir, name) = split(&p);
            let r = fs.rmdir(ino(fs, dir), name.as_bytes());
            if m.is_empty_dir(&p) {
                r.unwrap();
                m.paths.remove(&p);
            } else {
                assert!(matches!(r, Err(Error::NotEmpty(_))), "{op:?}: {r:?}");
            }
        }
        Op::Rename(s, d, k) => rename(fs, m, s, d, k),
        Op::Link(s, d, k) => {
            let (Some(src), Some(dir)) = (m.pick(s, false), m.pick(d, true)) else {
                return;
            };
            let dst = Model::child(&dir, NAMES[k]);
            let r = fs.link(ino(fs, &src), ino(fs, &dir), NAMES[k].as_bytes());
            if m.paths.contains_key(&dst) {
                assert!(matches!(r, Err(Error::Exists(_))), "{op:?}: {r:?}");
            } else {
                r.unwrap();
                m.paths.insert(dst, m.paths[&src]);
            }
        }
    }
}

fn rename(fs: &Filesystem, m: &mut Model, s: usize, d: usize, k: usize) {
    let all: Vec<String> = m.paths.keys().filter(|p| !p.is_empty()).cloned().collect();
    let (Some(src), Some(dir)) = ((!all.is_empty()).then(|| all[s % all.len()].clone()), m.pick(d, true)) else {
        return;
    };
    let dst = Model::child(&dir, NAMES[k]);
    let (sd, sn) = split(&src);
    let r = fs.rename(
        ino(fs, sd),
        sn.as_bytes(),
        ino(fs, &dir),
        NAMES[k].as_bytes(),
        RenameFlags::default(),
    );
    let src_is_dir = m.paths[&src].is_none();
    if src_is_dir && (dst == src || dst.starts_with(&format!("{src}/")) || dir == src) {
        if dst != src {
            assert!(matches!(r, Err(Error::InvalidArgument(_))), "rename {src} {dst}: {r:?}");
        }
        return;
    }
    match m.paths.get(&dst).copied() {
        Some(t) if src_is_dir && t.is_some() => assert!(matches!(r, Err(Error::NotDir(_))), "{r:?}"),
        Some(None) if !src_is_dir => assert!(matches!(r, Err(Error::IsDir(_))), "{r:?}"),
        Some(None) if !m.is_empty_dir(&dst) => assert!(matches!(r, Err(Error::NotEmpty(_))), "{r:?}"),
        Some(t) if t.is_some() && t == m.paths[&src] => r.unwrap(),
        _ => {
            r.unwrap();
            let moved: Vec<(String, Option<usize>)> = m
                .paths
                .iter()
                .filter(|(p, _)| **p == src || p.starts_with(&format!("{src}/")))
                .map(|(p, v)| (p.clone(), *v))
                .collect();
            m.paths.remove(&dst);
            for (p, v) in moved {
                m.paths.remove(&p);
                m.paths.insert(format!("{dst}{}", &p[src.len()..]), v);
            }
        }
    }
}

fn check(fs: &Filesystem, m: &Model) {
    let mut seen = BTreeMap::new();
    walk(fs, ROOT_INO, "", &mut seen);
    let want: BTreeMap<String, Option<Vec<u8>>> = m
        .paths
        .iter()
        .filter(|(p, _)| !p.is_empty())
        .map(|(p, id)| (p.clone(), id.map(|i| m.files[i].clone())))
        .collect();
    assert_eq!(seen, want);
}

fn walk(fs: &Filesystem, dir: u32, prefix: &str, out: &mut BTreeMap<String, Option<Vec<u8>>>) {
    for e in fs.read_dir(&fs.inode(dir).unwrap()).unwrap() {
        let name = String::from_utf8(e.name).unwrap();
        if name == "." || name == ".." || name == "lost+found" {
            continue;
        }
        let path = Model::child(prefix, &name);
        let inode = fs.inode(e.ino).unwrap();
        if inode.is_dir() {
            out.insert(path.clone(), None);
            walk(fs, e.ino, &path, out);
        } else {
            out.insert(path, Some(fs.read_all(&inode, 1 << 24).unwrap()));
        }
    }
}

fn run(ops: &[Op], args: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    let Some(img) = common::mkfs(dir.path(), None, args, "16M") else {
        return;
    };
    let fs = Filesystem::open(Box::new(FileDevice::open(&img, true).unwrap()), OpenOptions::default()).unwrap();
    let mut m = Model::default();
    m.paths.insert(String::new(), None);
    for op in ops {
        apply(&fs, &mut m, op);
    }
    check(&fs, &m);
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

    #[test]
    fn ops_match_the_model_on_ext2_block_maps(ops in prop::collection::vec(op(), 1..60)) {
        run(&ops, &["-t", "ext2", "-b", "1024"]);
    }

    #[test]
    fn ops_match_the_model_on_1k_ext4_without_csum(ops in prop::collection::vec(op(), 1..60)) {
        run(&ops, &["-b", "1024", "-O", "^metadata_csum,uninit_bg"]);
    }
}
