//! fscrypt (`-O encrypt`) against the kernel, which has it here: the
//! kernel sets v1 and v2 policies on directories and fills them
//! (`crates/testkit/scripts/fscrypt_ioctl.py` drives its ioctls); ext4kit
//! without the keys lists the same no-key names, looks them up, refuses
//! contents (`ENOKEY`) and creates, and unlinks by no-key name; with the
//! keys it reads names, contents and symlink targets byte for byte. The
//! other way, ext4kit creates, writes, truncates, renames and links in the
//! encrypted directories and the kernel reads it all back with the keys.
//! Every image ends e2fsck-clean.

mod common;

use std::collections::BTreeMap;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use common::{mkfs, open_rw};
use ext4kit_engine::{Attr, Error, Filesystem, NodeKind, Policy, ROOT_INO};
use ext4kit_format::fscrypt::KeyRef;
use ext4kit_format::inode::FileType;
use ext4kit_testkit::fscrypt;
use ext4kit_testkit::mount::{LoopMount, can_loop_mount};
use ext4kit_testkit::tools::assert_fsck_clean;

const ATTR: Attr = Attr {
    perm: 0o644,
    uid: 0,
    gid: 0,
};
const V1_DESC: &str = "0123456789abcdef";

/// Whether the kernel oracle is here: loop mounts, ext4 encryption, python3.
fn kernel_ready() -> bool {
    let why = can_loop_mount().err().or_else(|| {
        (!Path::new("/sys/fs/ext4/features/encryption").exists()).then(|| "the kernel lacks ext4 encryption".into())
    });
    let why = why.or_else(|| {
        std::process::Command::new("python3")
            .arg("-V")
            .output()
            .is_err()
            .then(|| "python3 is not installed".into())
    });
    if let Some(w) = why {
        ext4kit_testkit::skipped!("fscrypt kernel oracle unavailable: {w}");
        assert!(std::env::var_os("CI").is_none(), "CI must run the fscrypt tests: {w}");
        return false;
    }
    true
}

/// Deterministic content.
fn content(len: usize, seed: u32) -> Vec<u8> {
    let mut x = seed.wrapping_mul(2_654_435_761).max(1);
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect()
}

/// What a tree holds, by path: file contents, symlink targets, directories.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Node {
    File(Vec<u8>),
    Link(Vec<u8>),
    Dir,
}

type Tree = BTreeMap<Vec<u8>, Node>;

/// The tree under `root` as the kernel shows it (contents only when `with_data`).
fn kernel_tree(root: &Path, with_data: bool) -> Tree {
    let mut out = Tree::new();
    let mut stack = vec![(root.to_path_buf(), Vec::new())];
    while let Some((dir, rel)) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let e = e.unwrap();
            let mut p = rel.clone();
            p.push(b'/');
            p.extend_from_slice(e.file_name().as_bytes());
            let ft = e.file_type().unwrap();
            let node = if ft.is_dir() {
                stack.push((e.path(), p.clone()));
                Node::Dir
            } else if ft.is_symlink() {
                Node::Link(std::fs::read_link(e.path()).unwrap().as_os_str().as_bytes().to_vec())
            } else if with_data {
                Node::File(std::fs::read(e.path()).unwrap())
            } else {
                Node::File(Vec::new())
            };
            out.insert(p, node);
        }
    }
    out
}

/// The same tree as ext4kit shows it.
fn our_tree(fs: &Filesystem, top: &[u8], with_data: bool) -> Tree {
    let mut out = Tree::new();
    let mut stack = vec![(fs.resolve(top).unwrap(), Vec::new())];
    while let Some((dir, rel)) = stack.pop() {
        for e in fs.read_dir(&dir).unwrap() {
            if e.name == b"." || e.name == b".." {
                continue;
            }
            let ino = fs.lookup(&dir, &e.name).unwrap_or_else(|err| {
                panic!(
                    "lookup {:?} in {:?}{:?}: {err}",
                    String::from_utf8_lossy(&e.name),
                    String::from_utf8_lossy(top),
                    String::from_utf8_lossy(&rel)
                )
            });
            assert_eq!(ino, e.ino, "lookup of a listed name finds its inode");
            let inode = fs.inode(ino).unwrap();
            let mut p = rel.clone();
            p.push(b'/');
            p.extend_from_slice(&e.name);
            let node = match inode.file_type().unwrap() {
                FileType::Directory => {
                    stack.push((inode, p.clone()));
                    Node::Dir
                }
                FileType::Symlink => Node::Link(fs.read_link(&inode).unwrap()),
                _ if with_data => Node::File(fs.read_all(&inode, 1 << 24).unwrap()),
                _ => Node::File(Vec::new()),
            };
            out.insert(p, node);
        }
    }
    out
}

fn set_policy(mnt: &Path, dir: &str, key: &str) {
    std::fs::create_dir(mnt.join(dir)).unwrap();
    fscrypt::ioctl(&["set-policy", mnt.join(dir).to_str().unwrap(), key]);
}

/// Adds both keys to the mounted file system; returns the v2 identifier.
fn kernel_add_keys(mnt: &Path, key: &Path) -> String {
    let (m, k) = (mnt.to_str().unwrap(), key.to_str().unwrap());
    fscrypt::ioctl(&["add-key", m, k, V1_DESC]);
    fscrypt::ioctl(&["add-key", m, k])
}

/// An `-O encrypt` image with /v1 and /v2 under policies of one key and a
/// plain /plain, each filled by `fill` through the kernel.
fn kernel_image(dir: &Path, block: &str, fill: impl Fn(&Path)) -> Option<(PathBuf, PathBuf, String)> {
    let img = mkfs(dir, None, &["-O", "encrypt", "-b", block], "64M")?;
    let key = dir.join("key");
    std::fs::write(&key, content(64, 99)).unwrap();
    let m = LoopMount::rw(&img, &[]).unwrap();
    let id = kernel_add_keys(m.path(), &key);
    set_policy(m.path(), "v1", V1_DESC);
    set_policy(m.path(), "v2", &id);
    std::fs::create_dir(m.path().join("plain")).unwrap();
    for d in ["v1", "v2", "plain"] {
        fill(&m.path().join(d));
    }
    m.unmount().unwrap();
    Some((img, key, id))
}

/// Files of every shape: small, multi-block with a partial tail, sparse,
/// empty, long names (a no-key name with a digest), short and long
/// symlinks, a subdirectory, and enough names for an htree.
fn fill(d: &Path) {
    std::fs::write(d.join("small"), b"hello\n").unwrap();
    std::fs::write(d.join("multi"), content(3 * 4096 + 100, 1)).unwrap();
    std::fs::write(d.join("empty"), b"").unwrap();
    let f = std::fs::File::create(d.join("sparse")).unwrap();
    std::os::unix::fs::FileExt::write_all_at(&f, &content(5000, 2), 40_000).unwrap();
    std::fs::write(d.join("L".repeat(200)), b"long name").unwrap();
    std::fs::write(d.join(format!("{}-16", "x".repeat(16))), b"sixteen").unwrap();
    std::os::unix::fs::symlink("small", d.join("short-link")).unwrap();
    std::os::unix::fs::symlink("t/".repeat(60), d.join("long-link")).unwrap();
    std::fs::create_dir_all(d.join("sub/inner")).unwrap();
    std::fs::write(d.join("sub/inner/deep"), content(700, 3)).unwrap();
    std::fs::create_dir(d.join("many")).unwrap();
    for i in 0..150 {
        std::fs::write(d.join(format!("many/file-number-{i:04}")), format!("{i}")).unwrap();
    }
}

fn add_keys(fs: &Filesystem, key: &Path, id: &str) {
    let raw = std::fs::read(key).unwrap();
    let d: [u8; 8] = hex(V1_DESC).try_into().unwrap();
    assert_eq!(fs.add_key(&raw, Some(d)).unwrap(), KeyRef::Descriptor(d));
    let v2 = fs.add_key(&raw, None).unwrap();
    assert_eq!(
        v2,
        KeyRef::Identifier(hex(id).try_into().unwrap()),
        "the v2 identifier is the kernel's"
    );
}

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

#[test]
fn kernel_made_directories_read_without_and_with_the_key() {
    if !kernel_ready() {
        return;
    }
    for block in ["1024", "4096"] {
        let dir = tempfile::tempdir().unwrap();
        let Some((img, key, id)) = kernel_image(dir.path(), block, fill) else {
            return;
        };
        let m = LoopMount::ro(&img).unwrap();
        let nokey: BTreeMap<&str, Tree> = ["v1", "v2", "plain"]
            .into_iter()
            .map(|d| (d, kernel_tree(&m.path().join(d), false)))
            .collect();
        m.unmount().unwrap();
        let m = LoopMount::ro(&img).unwrap();
        kernel_add_keys(m.path(), &key);
        let keyed: BTreeMap<&str, Tree> = ["v1", "v2", "plain"]
            .into_iter()
            .map(|d| (d, kernel_tree(&m.path().join(d), true)))
            .collect();
        m.unmount().unwrap();
        assert_eq!(keyed["v1"], keyed["plain"], "the kernel fill is the same everywhere");

        let fs = open_rw(&img);
        for (d, want) in &nokey {
            assert_eq!(
                &our_tree(&fs, format!("/{d}").as_bytes(), false),
                want,
                "{block}: no-key names of /{d}"
            );
        }
        // Contents and creates need the key; the plain directory does not.
        let small = fs.resolve(b"/plain/small").unwrap();
        assert_eq!(fs.read_all(&small, 100).unwrap(), b"hello\n");
        let v2 = fs.resolve(b"/v2").unwrap();
        let name = nokey["v2"]
            .keys()
            .find(|k| matches!(nokey["v2"][*k], Node::File(_)))
            .unwrap();
        let f = fs.resolve(&[b"/v2".as_slice(), name].concat()).unwrap();
        let mut buf = [0u8; 16];
        assert!(matches!(fs.read_file_at(f.ino, 0, &mut buf), Err(Error::NoKey(_))));
        let e = fs.create(v2.ino, b"new", NodeKind::Regular, ATTR).unwrap_err();
        assert_eq!(e.errno(), libc::ENOKEY, "{e}");
        assert!(matches!(fs.write(f.ino, 0, b"x"), Err(Error::NoKey(_))));
        drop(fs);

        let fs = open_rw(&img);
        add_keys(&fs, &key, &id);
        for (d, want) in &keyed {
            assert_eq!(
                &our_tree(&fs, format!("/{d}").as_bytes(), true),
                want,
                "{block}: /{d} with the key"
            );
        }
        drop(fs);
        assert_fsck_clean(&img).unwrap();
    }
}

#[test]
fn no_key_names_unlink_and_rmdir_as_on_the_kernel() {
    if !kernel_ready() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let Some((img, key, _)) = kernel_image(dir.path(), "4096", fill) else {
        return;
    };
    let fs = open_rw(&img);
    let v2 = fs.resolve(b"/v2").unwrap();
    let names: Vec<Vec<u8>> = fs.read_dir(&v2).unwrap().into_iter().map(|e| e.name).collect();
    // The no-key name of "many": the one directory of over a hundred entries.
    let many_dir = names
        .iter()
        .map(|n| fs.inode(fs.lookup(&v2, n).unwrap()).unwrap())
        .find(|i| i.is_dir() && fs.read_dir(i).unwrap().len() > 100)
        .unwrap();
    let victims: Vec<Vec<u8>> = fs
        .read_dir(&many_dir)
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .filter(|n| n[0] != b'.')
        .take(40)
        .collect();
    for n in &victims {
        fs.unlink(many_dir.ino, n).unwrap();
    }
    // The longest name (200 bytes) is listed in its digested form.
    let long = names.iter().max_by_key(|n| n.len()).unwrap();
    assert_eq!(long.len(), 252, "a digested no-key name");
    fs.unlink(v2.ino, long).unwrap();
    let e = fs
        .rename(v2.ino, &names[2], v2.ino, b"renamed", Default::default())
        .unwrap_err();
    assert_eq!(e.errno(), libc::ENOKEY);
    fs.unmount().unwrap();
    assert_fsck_clean(&img).unwrap();

    let m = LoopMount::ro(&img).unwrap();
    kernel_add_keys(m.path(), &key);
    let t = kernel_tree(&m.path().join("v2"), false);
    assert!(!t.contains_key(format!("/{}", "L".repeat(200)).as_bytes()));
    let left = t.keys().filter(|k| k.starts_with(b"/many/")).count();
    m.unmount().unwrap();
    assert_eq!(left, 110);
}

#[test]
fn ext4kit_writes_kernel_reads_with_the_key() {
    if !kernel_ready() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let Some((img, key, id)) = kernel_image(dir.path(), "4096", |_| {}) else {
        return;
    };
    let fs = open_rw(&img);
    add_keys(&fs, &key, &id);
    let mut want = Tree::new();
    for top in ["v1", "v2"] {
        let d = fs.resolve(format!("/{top}").as_bytes()).unwrap().ino;
        let a = fs.create(d, b"appended", NodeKind::Regular, ATTR).unwrap().ino;
        let mut body = Vec::new();
        for i in 0..7u32 {
            let part = content(1500 + i as usize * 700, i);
            fs.write(a, body.len() as u64, &part).unwrap();
            body.extend_from_slice(&part);
        }
        fs.write(a, 5000, b"overwritten in the middle").unwrap();
        body[5000..5025].copy_from_slice(b"overwritten in the middle");
        want.insert(b"/appended".to_vec(), Node::File(body.clone()));
        let t = fs.create(d, b"truncated", NodeKind::Regular, ATTR).unwrap().ino;
        fs.write(t, 0, &content(10_000, 7)).unwrap();
        fs.truncate(t, 6001).unwrap();
        fs.truncate(t, 9000).unwrap();
        let mut tb = content(6001, 7);
        tb.resize(9000, 0);
        want.insert(b"/truncated".to_vec(), Node::File(tb));
        let sub = fs.create(d, b"sub", NodeKind::Directory, ATTR).unwrap().ino;
        want.insert(b"/sub".to_vec(), Node::Dir);
        let inner = fs.create(sub, b"inner", NodeKind::Regular, ATTR).unwrap().ino;
        fs.write(inner, 0, b"inner file").unwrap();
        fs.rename(sub, b"inner", d, b"moved-up", Default::default()).unwrap();
        want.insert(b"/moved-up".to_vec(), Node::File(b"inner file".to_vec()));
        for (name, target) in [("short-link", b"appended".to_vec()), ("long-link", b"x/".repeat(100))] {
            fs.create(d, name.as_bytes(), NodeKind::Symlink(target.clone()), ATTR)
                .unwrap();
            want.insert(format!("/{name}").into_bytes(), Node::Link(target));
        }
        fs.link(a, d, b"hard").unwrap();
        want.insert(b"/hard".to_vec(), Node::File(body));
        let many = fs.create(d, b"many", NodeKind::Directory, ATTR).unwrap().ino;
        want.insert(b"/many".to_vec(), Node::Dir);
        for i in 0..200 {
            let n = format!("entry-{i:05}-{}", "p".repeat(i % 40));
            let f = fs.create(many, n.as_bytes(), NodeKind::Regular, ATTR).unwrap().ino;
            fs.write(f, 0, n.as_bytes()).unwrap();
            if i % 3 == 0 {
                fs.unlink(many, n.as_bytes()).unwrap();
            } else {
                want.insert(format!("/many/{n}").into_bytes(), Node::File(n.into_bytes()));
            }
        }
        // A move out of the policy is refused, as the kernel's EXDEV.
        let plain = fs
            .create(ROOT_INO, format!("plain-{top}").as_bytes(), NodeKind::Regular, ATTR)
            .unwrap()
            .ino;
        assert_eq!(fs.link(plain, d, b"x").unwrap_err().errno(), libc::EXDEV);
        assert_eq!(
            our_tree(&fs, format!("/{top}").as_bytes(), true),
            want,
            "ext4kit reads back /{top}"
        );
    }
    fs.unmount().unwrap();
    assert_fsck_clean(&img).unwrap();
    let m = LoopMount::ro(&img).unwrap();
    kernel_add_keys(m.path(), &key);
    for top in ["v1", "v2"] {
        assert_eq!(kernel_tree(&m.path().join(top), true), want, "the kernel reads /{top}");
    }
    m.unmount().unwrap();
}

/// IV_INO_LBLK_64 and IV_INO_LBLK_32 (v2, `stable_inodes`): one key per
/// mode from the master key and the file system UUID, IVs from the inode
/// number; each padding flag too. Read both ways against the kernel.
#[test]
fn iv_ino_lblk_policies_and_paddings_both_ways() {
    if !kernel_ready() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let Some(img) = mkfs(dir.path(), None, &["-O", "encrypt,stable_inodes", "-b", "4096"], "64M") else {
        return;
    };
    let key = dir.path().join("key");
    std::fs::write(&key, content(64, 5)).unwrap();
    // (directory, policy flags): pad 4/8/16/32, LBLK_64, LBLK_32.
    let policies = [
        ("pad4", 0),
        ("pad8", 1),
        ("pad32", 3),
        ("lblk64", 0x0a),
        ("lblk32", 0x12),
    ];
    let m = LoopMount::rw(&img, &[]).unwrap();
    let id = kernel_add_keys(m.path(), &key);
    for (d, flags) in policies {
        std::fs::create_dir(m.path().join(d)).unwrap();
        let p = m.path().join(d);
        fscrypt::ioctl(&["set-policy", p.to_str().unwrap(), &id, &flags.to_string()]);
        fill(&p);
    }
    m.unmount().unwrap();
    let m = LoopMount::ro(&img).unwrap();
    kernel_add_keys(m.path(), &key);
    let kernel: Vec<Tree> = policies
        .iter()
        .map(|(d, _)| kernel_tree(&m.path().join(d), true))
        .collect();
    m.unmount().unwrap();

    let fs = open_rw(&img);
    add_keys(&fs, &key, &id);
    for ((d, _), want) in policies.iter().zip(&kernel) {
        assert_eq!(
            &our_tree(&fs, format!("/{d}").as_bytes(), true),
            want,
            "/{d} with the key"
        );
        let top = fs.resolve(format!("/{d}").as_bytes()).unwrap().ino;
        let f = fs.create(top, b"ours", NodeKind::Regular, ATTR).unwrap().ino;
        fs.write(f, 0, &content(20_000, 9)).unwrap();
        fs.create(top, b"ours-link", NodeKind::Symlink(b"ours".to_vec()), ATTR)
            .unwrap();
    }
    fs.unmount().unwrap();
    assert_fsck_clean(&img).unwrap();
    let m = LoopMount::ro(&img).unwrap();
    kernel_add_keys(m.path(), &key);
    for (d, _) in policies {
        let p = m.path().join(d);
        assert_eq!(
            std::fs::read(p.join("ours")).unwrap(),
            content(20_000, 9),
            "/{d}/ours read by the kernel"
        );
        assert_eq!(std::fs::read_link(p.join("ours-link")).unwrap(), Path::new("ours"));
    }
    m.unmount().unwrap();
}

/// Policies set by ext4kit on empty directories (as
/// `FS_IOC_SET_ENCRYPTION_POLICY`; an inline directory first moves to a
/// block; nothing encrypted is made inline): the kernel reports the same policy
/// and reads back, byte for byte, the names and contents ext4kit wrote
/// under it. The kernel's refusals come back with its errnos.
#[test]
fn ext4kit_sets_policies_the_kernel_reads() {
    if !kernel_ready() {
        return;
    }
    for args in [
        &["-O", "encrypt", "-b", "4096"][..],
        &["-O", "encrypt,inline_data", "-b", "1024"][..],
    ] {
        let dir = tempfile::tempdir().unwrap();
        let Some(img) = mkfs(dir.path(), None, args, "64M") else {
            return;
        };
        let key = dir.path().join("key");
        std::fs::write(&key, content(64, 99)).unwrap();
        let fs = open_rw(&img);
        let raw = std::fs::read(&key).unwrap();
        let v2 = fs.add_key(&raw, None).unwrap();
        let desc: [u8; 8] = hex(V1_DESC).try_into().unwrap();
        let d1 = fs.add_key(&raw, Some(desc)).unwrap();
        refusals(&fs, v2);
        let mut want = Tree::new();
        want.insert(b"/small".to_vec(), Node::File(b"hello\n".to_vec()));
        want.insert(b"/multi".to_vec(), Node::File(content(3 * 4096 + 100, 1)));
        want.insert(
            [&b"/"[..], &b"L".repeat(200)].concat(),
            Node::File(b"long name".to_vec()),
        );
        want.insert(b"/link".to_vec(), Node::Link(b"t/".repeat(60)));
        want.insert(b"/sub".to_vec(), Node::Dir);
        want.insert(b"/sub/deep".to_vec(), Node::File(content(700, 3)));
        let tops = [
            ("v2", Policy::new(v2, 2)),
            ("v1", Policy::new(d1, 0)),
            ("pad32", Policy::new(v2, 3)),
        ];
        for (top, policy) in tops {
            let d = fs
                .create(ROOT_INO, top.as_bytes(), NodeKind::Directory, ATTR)
                .unwrap()
                .ino;
            fs.set_encryption_policy(d, &policy).unwrap();
            fs.set_encryption_policy(d, &policy).unwrap();
            let other = Policy::new(policy.key, policy.flags ^ 1);
            assert_eq!(fs.set_encryption_policy(d, &other).unwrap_err().errno(), libc::EEXIST);
            assert_eq!(fs.encryption_policy(d).unwrap(), Some(policy));
            fill_ours(&fs, d, &want);
            assert_eq!(
                our_tree(&fs, format!("/{top}").as_bytes(), true),
                want,
                "ext4kit reads /{top}"
            );
        }
        fs.unmount().unwrap();
        assert_fsck_clean(&img).unwrap();
        let m = LoopMount::ro(&img).unwrap();
        let id = kernel_add_keys(m.path(), &key);
        for (top, shown) in [
            ("v2", format!("2 1 4 2 {id}")),
            ("v1", format!("0 1 4 0 {V1_DESC}")),
            ("pad32", format!("2 1 4 3 {id}")),
        ] {
            let p = m.path().join(top);
            let got = fscrypt::ioctl(&["get-policy", p.to_str().unwrap()]);
            assert_eq!(got.trim(), shown, "the kernel's policy of /{top}");
            assert_eq!(kernel_tree(&p, true), want, "the kernel reads /{top}");
        }
        m.unmount().unwrap();
    }
}

/// Writes `want` (paths under `d`) through ext4kit.
fn fill_ours(fs: &Filesystem, d: u32, want: &Tree) {
    for (path, node) in want {
        let (parent, name) = match path[1..].iter().position(|&b| b == b'/') {
            Some(i) => (fs.lookup(&fs.inode(d).unwrap(), &path[1..=i]).unwrap(), &path[i + 2..]),
            None => (d, &path[1..]),
        };
        let kind = match node {
            Node::Dir => NodeKind::Directory,
            Node::Link(t) => NodeKind::Symlink(t.clone()),
            Node::File(_) => NodeKind::Regular,
        };
        let ino = fs.create(parent, name, kind, ATTR).unwrap().ino;
        if let Node::File(body) = node {
            fs.write(ino, 0, body).unwrap();
        }
    }
}

/// What `FS_IOC_SET_ENCRYPTION_POLICY` refuses, with its errno.
fn refusals(fs: &Filesystem, v2: KeyRef) {
    let mk = |name: &[u8], kind| fs.create(ROOT_INO, name, kind, ATTR).unwrap().ino;
    let full = mk(b"full", NodeKind::Directory);
    fs.create(full, b"f", NodeKind::Regular, ATTR).unwrap();
    let file = mk(b"file", NodeKind::Regular);
    let empty = mk(b"empty", NodeKind::Directory);
    let errno = |ino: u32, p: Policy| fs.set_encryption_policy(ino, &p).unwrap_err().errno();
    assert_eq!(errno(full, Policy::new(v2, 2)), libc::ENOTEMPTY);
    assert_eq!(errno(file, Policy::new(v2, 2)), libc::ENOTDIR);
    assert_eq!(errno(empty, Policy::new(KeyRef::Identifier([7; 16]), 2)), libc::ENOKEY);
    assert_eq!(errno(empty, Policy::new(v2, 0x40)), libc::EINVAL, "unknown flag");
    assert_eq!(
        errno(empty, Policy::new(v2, 0x08)),
        libc::EINVAL,
        "IV_INO_LBLK_64 without stable_inodes"
    );
    let direct = Policy::new(v2, 0x04);
    assert_eq!(errno(empty, direct), libc::EINVAL, "DIRECT_KEY with a 16-byte-IV mode");
    let v1_hctr2 = Policy::with_modes(KeyRef::Descriptor([1; 8]), 1, 10, 0);
    assert_eq!(errno(empty, v1_hctr2), libc::EINVAL, "HCTR2 names need a v2 policy");
    assert_eq!(fs.encryption_policy(empty).unwrap(), None);
    fs.unlink(full, b"f").unwrap();
    fs.rmdir(ROOT_INO, b"full").unwrap();
    fs.rmdir(ROOT_INO, b"empty").unwrap();
    fs.unlink(ROOT_INO, b"file").unwrap();
}

/// `remove_key`: what its policy covers reads as without the key again
/// (no-key names, `ENOKEY` contents, even for an inode looked up before);
/// removing it twice is `ENOKEY`; adding it back restores everything.
#[test]
fn removed_keys_leave_no_access_behind() {
    let dir = tempfile::tempdir().unwrap();
    let Some(img) = mkfs(dir.path(), None, &["-O", "encrypt"], "16M") else {
        return;
    };
    let fs = open_rw(&img);
    let raw = content(64, 5);
    let v2 = fs.add_key(&raw, None).unwrap();
    let d = fs.create(ROOT_INO, b"vault", NodeKind::Directory, ATTR).unwrap().ino;
    fs.set_encryption_policy(d, &Policy::new(v2, 2)).unwrap();
    let f = fs.create(d, b"secret", NodeKind::Regular, ATTR).unwrap();
    fs.write(f.ino, 0, b"plaintext").unwrap();
    let vault = fs.inode(d).unwrap();
    fs.remove_key(&v2).unwrap();
    assert_eq!(fs.read_all(&f, 1 << 20).unwrap_err().errno(), libc::ENOKEY);
    let listed: Vec<Vec<u8>> = fs.read_dir(&vault).unwrap().into_iter().map(|e| e.name).collect();
    assert!(!listed.contains(&b"secret".to_vec()), "a no-key name instead");
    assert_eq!(listed.len(), 3);
    assert_eq!(fs.remove_key(&v2).unwrap_err().errno(), libc::ENOKEY);
    fs.add_key(&raw, None).unwrap();
    assert_eq!(fs.read_all(&fs.inode(f.ino).unwrap(), 1 << 20).unwrap(), b"plaintext");
    fs.unmount().unwrap();
    assert_fsck_clean(&img).unwrap();
}
