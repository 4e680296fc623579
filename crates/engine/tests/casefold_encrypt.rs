//! Directories both casefolded and encrypted (`-O casefold,encrypt`): each
//! entry stores the SipHash of its folded plaintext name after the name,
//! and the htree (hash version 6) is ordered by those hashes. The kernel
//! here lacks casefold, so it cannot mount these images; e2fsck checks the
//! stored hashes' presence and the htree order by them (proven below by a
//! flipped hash byte it reports), and debugfs lists the tree. With the key
//! names compare folded; without it they list as no-key names carrying
//! the stored hash, and those names find, stat and unlink their entries.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use common::{mkfs, open_rw, run};
use ext4kit_engine::{Attr, Filesystem, NodeKind, Policy, ROOT_INO, RenameFlags};
use ext4kit_format::dir_entry::{DirEntryIter, rec_len_for};
use ext4kit_format::fscrypt::{self, KeyRef};
use ext4kit_format::inode::flags::CASEFOLD;
use ext4kit_testkit::tools::{assert_fsck_clean, e2fsck_fn};

const ATTR: Attr = Attr {
    perm: 0o755,
    uid: 0,
    gid: 0,
};
const KEY: [u8; 64] = [0x3c; 64];

/// A casefold + encrypt image with `/ce` casefolded, then given a v2
/// policy (the order `ext4kit key set-policy` on a casefolded directory
/// takes); `None` when mkfs is missing.
fn image(dir: &Path, args: &[&str]) -> Option<(std::path::PathBuf, u32)> {
    let img = mkfs(dir, None, args, "32M")?;
    let fs = open_rw(&img);
    let id = fs.add_key(&KEY, None).unwrap();
    let ce = fs.create(ROOT_INO, b"ce", NodeKind::Directory, ATTR).unwrap();
    fs.set_flags(ce.ino, ce.raw.flags() | CASEFOLD, false).unwrap();
    fs.set_encryption_policy(ce.ino, &Policy::new(id, 2)).unwrap();
    fs.unmount().unwrap();
    Some((img, ce.ino))
}

fn names(fs: &Filesystem, dir: u32) -> BTreeMap<Vec<u8>, u32> {
    let d = fs.inode(dir).unwrap();
    fs.read_dir(&d)
        .unwrap()
        .into_iter()
        .filter(|e| e.name != b"." && e.name != b"..")
        .map(|e| (e.name, e.ino))
        .collect()
}

fn name(i: usize) -> Vec<u8> {
    format!("Straße-{i:05}-Файл").into_bytes()
}

/// What `debugfs -R "htree /ce"` prints.
fn debugfs_htree(img: &Path) -> String {
    run("debugfs", &["-R", "htree /ce", img.to_str().unwrap()])
}

#[test]
fn thousands_of_names_with_the_key_then_without() {
    let dir = tempfile::tempdir().unwrap();
    let Some((img, ce)) = image(dir.path(), &["-b", "1024", "-O", "casefold,encrypt"]) else {
        return;
    };
    let n = 3000;
    let fs = open_rw(&img);
    fs.add_key(&KEY, None).unwrap();
    let mut want = BTreeMap::new();
    for i in 0..n {
        let ino = fs.create(ce, &name(i), NodeKind::Regular, ATTR).unwrap().ino;
        want.insert(name(i), ino);
    }
    let d = fs.inode(ce).unwrap();
    // Folded lookups: ß against SS, Cyrillic case.
    for i in (0..n).step_by(97) {
        let upper = format!("STRASSE-{i:05}-файл");
        assert_eq!(fs.lookup(&d, upper.as_bytes()).unwrap(), want[&name(i)], "{upper}");
        let e = fs.create(ce, upper.as_bytes(), NodeKind::Regular, ATTR).unwrap_err();
        assert_eq!(e.errno(), libc::EEXIST, "{upper}");
    }
    // Unlink, link and rename by other-case names.
    for i in (0..n).step_by(5) {
        fs.unlink(ce, format!("strasse-{i:05}-ФАЙЛ").as_bytes()).unwrap();
        want.remove(&name(i));
    }
    let kept = want[&name(1)];
    fs.link(kept, ce, b"Hard-Link").unwrap();
    want.insert(b"Hard-Link".to_vec(), kept);
    let e = fs.link(kept, ce, b"HARD-link").unwrap_err();
    assert_eq!(e.errno(), libc::EEXIST);
    fs.rename(
        ce,
        "STRASSE-00002-файл".as_bytes(),
        ce,
        b"Renamed-Two",
        RenameFlags::default(),
    )
    .unwrap();
    want.insert(b"Renamed-Two".to_vec(), want[&name(2)]);
    want.remove(&name(2));
    // A rename over an other-case name replaces that entry.
    fs.rename(ce, b"renamed-TWO", ce, b"hard-LINK", RenameFlags::default())
        .unwrap();
    let two = want.remove(b"Renamed-Two".as_slice()).unwrap();
    want.insert(b"Hard-Link".to_vec(), two);
    let sub = fs.create(ce, b"Sub", NodeKind::Directory, ATTR).unwrap();
    fs.create(sub.ino, b"Inner", NodeKind::Regular, ATTR).unwrap();
    want.insert(b"Sub".to_vec(), sub.ino);
    fs.lookup(&fs.inode(sub.ino).unwrap(), b"INNER").unwrap();
    assert_eq!(names(&fs, ce), want, "readdir with the key shows names as created");
    fs.unmount().unwrap();
    assert_fsck_clean(&img).unwrap();
    let tree = debugfs_htree(&img);
    assert!(tree.contains("Hash Version: 6"), "{tree}");
    assert!(tree.contains("Entry #1"), "an htree with several leaves:\n{tree}");

    // Without the key: no-key names carrying the stored hash.
    let fs = open_rw(&img);
    let shown = names(&fs, ce);
    assert_eq!(shown.len(), want.len());
    assert_eq!(
        shown.values().copied().collect::<BTreeSet<_>>(),
        want.values().copied().collect::<BTreeSet<_>>()
    );
    let d = fs.inode(ce).unwrap();
    let mut nonzero = 0;
    for (nokey, ino) in &shown {
        let raw = fscrypt::base64url_decode(nokey).unwrap();
        nonzero += usize::from(raw[..8] != [0; 8]);
        assert_eq!(fs.lookup(&d, nokey).unwrap(), *ino);
    }
    assert_eq!(nonzero, shown.len(), "every no-key name carries its stored hash");
    let e = fs.create(ce, b"new", NodeKind::Regular, ATTR).unwrap_err();
    assert_eq!(e.errno(), libc::ENOKEY);
    let (victim, _) = shown.iter().nth(7).unwrap();
    fs.unlink(ce, victim).unwrap();
    assert_eq!(names(&fs, ce).len(), want.len() - 1);
    fs.unmount().unwrap();
    assert_fsck_clean(&img).unwrap();

    // The same hashes with the key again: the stored ones list as before.
    let fs = open_rw(&img);
    fs.add_key(&KEY, None).unwrap();
    assert_eq!(names(&fs, ce).len(), want.len() - 1);
    let d = fs.inode(ce).unwrap();
    assert_eq!(fs.lookup(&d, b"HARD-LINK").unwrap(), two);
}

#[test]
fn a_flipped_stored_hash_is_reported_by_e2fsck() {
    let dir = tempfile::tempdir().unwrap();
    let args = ["-b", "1024", "-O", "casefold,encrypt,^metadata_csum"];
    let Some((img, ce)) = image(dir.path(), &args) else {
        return;
    };
    let fs = open_rw(&img);
    fs.add_key(&KEY, None).unwrap();
    for i in 0..300 {
        fs.create(ce, &name(i), NodeKind::Regular, ATTR).unwrap();
    }
    fs.unmount().unwrap();
    assert_fsck_clean(&img).unwrap();
    // The first name of leaf 1: its major hash's top byte flipped.
    let out = run("debugfs", &["-R", "bmap /ce 1", img.to_str().unwrap()]);
    let block: u64 = out.trim().parse().unwrap();
    let mut bytes = std::fs::read(&img).unwrap();
    let at = block as usize * 1024;
    let buf = &bytes[at..at + 1024];
    let e = DirEntryIter::new(buf, 1024, true)
        .map(Result::unwrap)
        .find(|e| e.inode != 0)
        .unwrap();
    let hash_at = at + e.offset + rec_len_for(e.name.len());
    bytes[hash_at + 3] ^= 0x80;
    std::fs::write(&img, bytes).unwrap();
    let r = e2fsck_fn(&img).unwrap();
    assert!(!r.is_clean(), "e2fsck must see the stored hash:\n{}", r.output);
    let what = format!("Problem in HTREE directory inode {ce}: block #1 has bad max hash");
    assert!(r.output.contains(&what), "{}", r.output);
}

#[test]
fn policies_and_casefold_flags_as_the_kernel_allows() {
    let dir = tempfile::tempdir().unwrap();
    let Some(img) = mkfs(dir.path(), None, &["-b", "4096", "-O", "casefold,encrypt"], "32M") else {
        return;
    };
    let fs = open_rw(&img);
    let v2 = fs.add_key(&KEY, None).unwrap();
    let v1 = fs.add_key(&KEY, Some(*b"01234567")).unwrap();
    let mk = |n: &[u8]| fs.create(ROOT_INO, n, NodeKind::Directory, ATTR).unwrap();
    // A v1 policy on a casefolded directory: EINVAL.
    let cf = mk(b"cf");
    fs.set_flags(cf.ino, cf.raw.flags() | CASEFOLD, false).unwrap();
    let e = fs.set_encryption_policy(cf.ino, &Policy::new(v1, 2)).unwrap_err();
    assert_eq!(e.errno(), libc::EINVAL, "{e}");
    // chattr +F on an empty v1-encrypted directory: EINVAL.
    let e1 = mk(b"e1");
    fs.set_encryption_policy(e1.ino, &Policy::new(v1, 2)).unwrap();
    let e = fs.set_flags(e1.ino, e1.raw.flags() | CASEFOLD, false).unwrap_err();
    assert_eq!(e.errno(), libc::EINVAL, "{e}");
    // On a non-empty v2 one: ENOTEMPTY; on an empty one: allowed, and its
    // names then carry hashes.
    let e2 = mk(b"e2");
    fs.set_encryption_policy(e2.ino, &Policy::new(v2, 2)).unwrap();
    fs.create(e2.ino, b"x", NodeKind::Regular, ATTR).unwrap();
    let e = fs.set_flags(e2.ino, fs.inode(e2.ino).unwrap().raw.flags() | CASEFOLD, false);
    assert_eq!(e.unwrap_err().errno(), libc::ENOTEMPTY);
    let e3 = mk(b"e3");
    fs.set_encryption_policy(e3.ino, &Policy::new(v2, 2)).unwrap();
    let flags = fs.inode(e3.ino).unwrap().raw.flags();
    fs.remove_key(&v2).unwrap();
    let e = fs.set_flags(e3.ino, flags | CASEFOLD, false).unwrap_err();
    assert_eq!(e.errno(), libc::ENOKEY, "{e}");
    fs.add_key(&KEY, None).unwrap();
    fs.set_flags(e3.ino, flags | CASEFOLD, false).unwrap();
    fs.create(e3.ino, b"Name", NodeKind::Regular, ATTR).unwrap();
    let e = fs.create(e3.ino, b"NAME", NodeKind::Regular, ATTR).unwrap_err();
    assert_eq!(e.errno(), libc::EEXIST);
    assert!(matches!(
        fs.encryption_policy(e3.ino).unwrap().map(|p| p.key),
        Some(KeyRef::Identifier(_))
    ));
    fs.unmount().unwrap();
    assert_fsck_clean(&img).unwrap();
    let ls = run("debugfs", &["-R", "ls -l /e3", img.to_str().unwrap()]);
    assert_eq!(
        ls.lines().filter(|l| !l.trim().is_empty()).count(),
        3,
        "., .. and one name:\n{ls}"
    );
}
