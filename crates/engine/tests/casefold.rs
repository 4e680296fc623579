//! Casefolded directories (`EXT4_CASEFOLD_FL` on a `casefold` image):
//! names compare and hash folded, and e2fsck (which checks casefold htree
//! hashes and duplicate folded names) and debugfs are the oracles.

mod common;

use std::path::Path;

use common::{mkfs, open_rw};
use ext4kit_engine::{Attr, Error, Filesystem, NodeKind, ROOT_INO, RenameFlags};
use ext4kit_format::inode::flags::CASEFOLD;
use ext4kit_testkit::tools::{assert_fsck_clean, debugfs};

const ATTR: Attr = Attr {
    perm: 0o644,
    uid: 0,
    gid: 0,
};

fn casefold_dir(fs: &Filesystem, name: &[u8]) -> u32 {
    let d = fs.create(ROOT_INO, name, NodeKind::Directory, ATTR).unwrap();
    fs.set_flags(d.ino, d.raw.flags() | CASEFOLD, false).unwrap();
    d.ino
}

fn stored(i: usize) -> String {
    format!("Größe_Σ_{i:04}_File")
}

/// The same name under another casing, a decomposed umlaut, a folded
/// sharp s and a zero-width space the fold drops.
fn other_casing(i: usize) -> String {
    format!("GRO\u{308}SSE_σ_{i:04}_\u{200b}file")
}

fn fsck_clean(img: &Path) {
    assert_fsck_clean(img).unwrap();
}

#[test]
fn a_2000_name_casefold_htree_is_clean_and_found_under_other_casings() {
    let dir = tempfile::tempdir().unwrap();
    let Some(img) = mkfs(dir.path(), None, &["-O", "casefold"], "64M") else {
        return;
    };
    let fs = open_rw(&img);
    let cf = casefold_dir(&fs, b"cf");
    let plain = fs.create(ROOT_INO, b"plain", NodeKind::Directory, ATTR).unwrap().ino;
    for i in 0..2000 {
        fs.create(cf, stored(i).as_bytes(), NodeKind::Regular, ATTR).unwrap();
    }
    for i in 0..2000 {
        let found = fs.lookup(&fs.inode(cf).unwrap(), other_casing(i).as_bytes());
        assert!(found.is_ok(), "{}: {found:?}", other_casing(i));
    }
    let err = fs
        .create(cf, other_casing(5).as_bytes(), NodeKind::Regular, ATTR)
        .unwrap_err();
    assert!(matches!(err, Error::Exists(_)), "{err}");
    assert_eq!(err.errno(), libc::EEXIST);
    // Readdir gives the names as created.
    let names: Vec<Vec<u8>> = fs
        .read_dir(&fs.inode(cf).unwrap())
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect();
    assert!(names.contains(&stored(7).into_bytes()));
    assert!(!names.contains(&other_casing(7).into_bytes()));
    // Unlink and rename through other casings.
    fs.unlink(cf, other_casing(7).as_bytes()).unwrap();
    fs.rename(cf, other_casing(8).as_bytes(), cf, b"Moved", RenameFlags::default())
        .unwrap();
    assert!(fs.lookup(&fs.inode(cf).unwrap(), b"MOVED").is_ok());
    assert!(matches!(
        fs.lookup(&fs.inode(cf).unwrap(), stored(8).as_bytes()),
        Err(Error::NotFound(_))
    ));
    // A plain directory on the same image still tells case apart.
    fs.create(plain, b"abc", NodeKind::Regular, ATTR).unwrap();
    fs.create(plain, b"ABC", NodeKind::Regular, ATTR).unwrap();
    assert!(matches!(
        fs.lookup(&fs.inode(plain).unwrap(), b"Abc"),
        Err(Error::NotFound(_))
    ));
    // A subdirectory inherits the flag.
    let sub = fs.create(cf, b"Sub", NodeKind::Directory, ATTR).unwrap();
    assert_ne!(sub.raw.flags() & CASEFOLD, 0);
    // The inspect dump hashes folded names too: each leaf's names lie at
    // or above the hash its root entry starts it at.
    let dump = fs.htree_dump(&fs.inode(cf).unwrap()).unwrap();
    assert_eq!(dump.indirect_levels, 0);
    for (i, e) in dump.root.iter().enumerate().skip(1) {
        let leaf = dump.leaves.iter().find(|l| l.logical == e.block).unwrap();
        let next = dump.root.get(i + 1).map_or(u32::MAX, |n| n.hash);
        assert!(
            leaf.names.iter().all(|n| n.hash >= e.hash & !1 && n.hash <= next),
            "leaf {}",
            e.block
        );
    }
    drop(fs);
    let htree = debugfs(&img, "htree_dump /cf").unwrap();
    assert!(htree.contains("Number of entries"), "not indexed: {htree}");
    fsck_clean(&img);
}

#[test]
fn names_made_by_debugfs_are_found_under_other_casings() {
    let dir = tempfile::tempdir().unwrap();
    let Some(img) = mkfs(dir.path(), None, &["-O", "casefold"], "16M") else {
        return;
    };
    let mut cmds = String::from("mkdir d\nset_inode_field d flags 0x40080000\n");
    for i in 0..60 {
        cmds.push_str(&format!("mkdir d/{}\n", stored(i)));
    }
    let script = dir.path().join("cmds");
    std::fs::write(&script, cmds).unwrap();
    common::run(
        "debugfs",
        &["-w", "-f", script.to_str().unwrap(), img.to_str().unwrap()],
    );
    fsck_clean(&img);
    let fs = open_rw(&img);
    let d = fs.lookup(&fs.inode(ROOT_INO).unwrap(), b"d").unwrap();
    for i in 0..60 {
        let found = fs.lookup(&fs.inode(d).unwrap(), other_casing(i).as_bytes());
        assert!(found.is_ok(), "{}: {found:?}", other_casing(i));
    }
    let err = fs
        .create(d, "GRÖSSE_σ_0001_FILE".as_bytes(), NodeKind::Regular, ATTR)
        .unwrap_err();
    assert!(matches!(err, Error::Exists(_)), "{err}");
    fs.create(d, b"New", NodeKind::Regular, ATTR).unwrap();
    drop(fs);
    fsck_clean(&img);
}

#[test]
fn strict_mode_refuses_invalid_utf8_and_lax_mode_compares_it_raw() {
    let dir = tempfile::tempdir().unwrap();
    let Some(img) = mkfs(
        dir.path(),
        None,
        &["-O", "casefold", "-E", "encoding_flags=strict"],
        "16M",
    ) else {
        return;
    };
    let fs = open_rw(&img);
    let cf = casefold_dir(&fs, b"cf");
    let err = fs.create(cf, b"bad\xff", NodeKind::Regular, ATTR).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
    assert_eq!(err.errno(), libc::EINVAL);
    fs.create(ROOT_INO, b"bad\xff", NodeKind::Regular, ATTR).unwrap();
    drop(fs);
    fsck_clean(&img);

    let dir = tempfile::tempdir().unwrap();
    let img = mkfs(dir.path(), None, &["-O", "casefold"], "16M").unwrap();
    let fs = open_rw(&img);
    let cf = casefold_dir(&fs, b"cf");
    fs.create(cf, b"Bad\xff", NodeKind::Regular, ATTR).unwrap();
    fs.create(cf, b"bad\xff", NodeKind::Regular, ATTR).unwrap();
    assert!(fs.lookup(&fs.inode(cf).unwrap(), b"BAD\xff").is_err());
    drop(fs);
    fsck_clean(&img);
}

#[test]
fn the_flag_switches_only_on_empty_directories_of_casefold_images() {
    let dir = tempfile::tempdir().unwrap();
    let Some(img) = mkfs(dir.path(), None, &["-O", "casefold"], "16M") else {
        return;
    };
    let fs = open_rw(&img);
    let d = fs.create(ROOT_INO, b"d", NodeKind::Directory, ATTR).unwrap();
    fs.create(d.ino, b"f", NodeKind::Regular, ATTR).unwrap();
    let err = fs.set_flags(d.ino, d.raw.flags() | CASEFOLD, false).unwrap_err();
    assert!(matches!(err, Error::NotEmpty(_)), "{err}");
    fs.unlink(d.ino, b"f").unwrap();
    fs.set_flags(d.ino, d.raw.flags() | CASEFOLD, false).unwrap();
    fs.set_flags(d.ino, d.raw.flags(), false).unwrap();
    drop(fs);
    fsck_clean(&img);

    let dir = tempfile::tempdir().unwrap();
    let img = mkfs(dir.path(), None, &[], "16M").unwrap();
    let fs = open_rw(&img);
    let d = fs.create(ROOT_INO, b"d", NodeKind::Directory, ATTR).unwrap();
    let err = fs.set_flags(d.ino, d.raw.flags() | CASEFOLD, false).unwrap_err();
    assert!(matches!(err, Error::Unsupported(_)), "{err}");
}

#[test]
fn inline_casefold_directories_match_folded_names() {
    let dir = tempfile::tempdir().unwrap();
    let Some(img) = mkfs(dir.path(), None, &["-O", "casefold,inline_data"], "16M") else {
        return;
    };
    let fs = open_rw(&img);
    let cf = casefold_dir(&fs, b"cf");
    assert!(fs.inode(cf).unwrap().has_inline_data());
    fs.create(cf, "Straße".as_bytes(), NodeKind::Regular, ATTR).unwrap();
    fs.create(cf, b"Other", NodeKind::Regular, ATTR).unwrap();
    assert!(fs.lookup(&fs.inode(cf).unwrap(), b"STRASSE").is_ok());
    let err = fs.create(cf, b"strasse", NodeKind::Regular, ATTR).unwrap_err();
    assert!(matches!(err, Error::Exists(_)), "{err}");
    fs.rename(cf, b"OTHER", cf, b"third", RenameFlags::default()).unwrap();
    fs.unlink(cf, b"STRASSE").unwrap();
    let names: Vec<Vec<u8>> = fs
        .read_dir(&fs.inode(cf).unwrap())
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect();
    assert!(names.contains(&b"third".to_vec()) && names.len() == 3, "{names:?}");
    drop(fs);
    fsck_clean(&img);
}
