//! Directories both casefolded and encrypted store each name's hash (the
//! SipHash of the folded plaintext, which only the key gives) after the
//! name, and index by those hashes (htree hash version 6). Without the
//! key the check uses the stored hashes as e2fsck 1.47 does: a hash moved
//! out of its leaf's range is "bad max/min hash", a record with no room
//! for its hash is a corrupt directory, a root of another hash version is
//! refused. The verdicts are compared with e2fsck -fn on the same images
//! (built by the engine), and a repair rebuilds the index from the
//! stored hashes, leaving an image e2fsck finds clean whose names still
//! read and look up with the key.

mod support;

use support::*;

use std::sync::Arc;

use ext4kit_engine::device::MemDevice;
use ext4kit_engine::{Attr, BlockDevice, Filesystem, NodeKind, OpenOptions, Policy, ROOT_INO};
use ext4kit_format::dir_entry::{DirEntryIter, rec_len_for};
use ext4kit_format::htree::{DxParams, DxRoot};
use ext4kit_format::inode::flags::CASEFOLD;
use ext4kit_fsck::{Mode, Options, Report};

const KEY: [u8; 64] = [0x3c; 64];
const DIR: Attr = Attr {
    perm: 0o755,
    uid: 0,
    gid: 0,
};
const N: usize = 300;
/// Names left after [`image`]'s unlinks.
const LEFT: usize = N - N.div_ceil(7);

fn name(i: usize) -> Vec<u8> {
    format!("Straße-{i:05}-Файл").into_bytes()
}

/// A 1 KiB-block image with `features`, holding `/ce` (casefolded, then
/// given a v2 policy, when `encrypt`) with [`N`] names made with the key,
/// then every seventh unlinked.
fn image(features: &str, encrypt: bool) -> (Vec<u8>, u32) {
    let (dev, fs) = engine_fs(32 << 20, 0x5c, |o| o.add_features(features));
    let id = fs.add_key(&KEY, None).unwrap();
    let ce = fs.create(ROOT_INO, b"ce", NodeKind::Directory, DIR).unwrap();
    fs.set_flags(ce.ino, ce.raw.flags() | CASEFOLD, false).unwrap();
    if encrypt {
        fs.set_encryption_policy(ce.ino, &Policy::new(id, 2)).unwrap();
    }
    for i in 0..N {
        fs.create(ce.ino, &name(i), NodeKind::Regular, ATTR).unwrap();
    }
    // Holes: every seventh name unlinked, by another casing.
    for i in (0..N).step_by(7) {
        fs.unlink(ce.ino, format!("STRASSE-{i:05}-файл").as_bytes()).unwrap();
    }
    fs.unmount().unwrap();
    (dev.snapshot(), ce.ino)
}

fn check(bytes: &[u8]) -> Report {
    let dev = MemDevice::new(bytes.to_vec());
    let opts = Options {
        force: true,
        mode: Mode::Check,
        ..Options::default()
    };
    ext4kit_fsck::check(&dev, &opts, &mut |_| {}).expect("the check runs")
}

/// Our check-only verdict is e2fsck's; returns our report and its text.
fn agrees(bytes: &[u8], what: &str) -> (Report, String) {
    let rep = check(bytes);
    let (code, text) = e2fsck_fn(bytes);
    let ours = if rep.errors() > 0 { 4 } else { 0 };
    assert_eq!(
        Some(ours),
        code,
        "{what}: ours {:#?}\ne2fsck -fn:\n{text}",
        rep.findings
    );
    (rep, text)
}

fn finding<'a>(rep: &'a Report, code: &str) -> &'a ext4kit_fsck::Finding {
    rep.findings
        .iter()
        .find(|f| f.code.name == code)
        .unwrap_or_else(|| panic!("no {code} in {:#?}", rep.findings))
}

/// The leaves the root of `/ce` points at, in hash order (a one-level tree).
fn leaves(bytes: &[u8], ino: u32) -> Vec<u32> {
    let at = bmap(bytes, ino, 0) * 1024;
    let params = DxParams {
        block_size: 1024,
        metadata_csum: false,
        large_dir: false,
    };
    let root = DxRoot::parse(&bytes[at..at + 1024], &params).unwrap();
    assert_eq!(root.indirect_levels(), 0);
    assert!(root.entries.len() > 2, "several leaves");
    root.entries.iter().map(|e| e.block).collect()
}

/// Byte offset in the image of the `nth` live record of `/ce`'s logical
/// block `lblk`, and its record.
fn record(bytes: &[u8], ino: u32, lblk: u32, nth: usize) -> (usize, usize, usize) {
    let at = bmap(bytes, ino, lblk) * 1024;
    let e = DirEntryIter::new(&bytes[at..at + 1024], 1024, true)
        .map(Result::unwrap)
        .filter(|e| e.inode != 0)
        .nth(nth)
        .unwrap();
    (at + e.offset, e.rec_len, e.name.len())
}

/// Sets the major hash stored after the `nth` name of leaf `lblk`.
fn set_hash(bytes: &mut [u8], ino: u32, lblk: u32, nth: usize, hash: u32) {
    let (at, _, name_len) = record(bytes, ino, lblk, nth);
    let h = at + rec_len_for(name_len);
    bytes[h..h + 4].copy_from_slice(&hash.to_le_bytes());
}

/// With the key: `/ce` lists `want` names and each of them but `except`
/// (whose stored hash a test changed) is found by lookup.
fn names_read_back(bytes: &[u8], ino: u32, want: usize, except: Option<&[u8]>) {
    let dev: Arc<dyn BlockDevice> = Arc::new(MemDevice::new(bytes.to_vec()));
    let fs = Filesystem::open(Box::new(dev), OpenOptions::default()).unwrap();
    fs.add_key(&KEY, None).unwrap();
    let d = fs.inode(ino).unwrap();
    let names: Vec<Vec<u8>> = fs
        .read_dir(&d)
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .filter(|n| n != b"." && n != b"..")
        .collect();
    assert_eq!(names.len(), want);
    for n in names.iter().filter(|n| Some(n.as_slice()) != except) {
        fs.lookup(&d, n)
            .unwrap_or_else(|e| panic!("{}: {e}", String::from_utf8_lossy(n)));
    }
}

/// The name of the `nth` live record of leaf `lblk`, read with the key.
fn plain_name(bytes: &[u8], ino: u32, lblk: u32, nth: usize) -> Vec<u8> {
    let dev: Arc<dyn BlockDevice> = Arc::new(MemDevice::new(bytes.to_vec()));
    let fs = Filesystem::open(Box::new(dev), OpenOptions::default()).unwrap();
    fs.add_key(&KEY, None).unwrap();
    let (at, _, _) = record(bytes, ino, lblk, nth);
    let target = u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap());
    let d = fs.inode(ino).unwrap();
    fs.read_dir(&d)
        .unwrap()
        .into_iter()
        .find(|e| e.ino == target)
        .unwrap()
        .name
}

#[test]
fn an_engine_image_is_clean_and_indexed_by_siphash() {
    for features in ["casefold,encrypt", "casefold,encrypt,^metadata_csum"] {
        let (bytes, ce) = image(features, true);
        let (rep, _) = agrees(&bytes, features);
        assert_eq!(rep.errors(), 0, "{features}: {:#?}", rep.findings);
        let tree = debugfs_out(&bytes, "htree /ce");
        assert!(tree.contains("Hash Version: 6"), "{tree}");
        assert!(tree.matches("Reading directory block").count() > 2, "{tree}");
        assert!(bmap(&bytes, ce, 2) > 0);
    }
}

#[test]
fn a_stored_hash_above_its_leaf_is_bad_max_hash_and_below_bad_min_hash() {
    let (clean, ce) = image("casefold,encrypt,^metadata_csum", true);
    let order = leaves(&clean, ce);
    let (first, last) = (order[0], *order.last().unwrap());
    let moved = plain_name(&clean, ce, first, 0);

    let mut bytes = clean.clone();
    set_hash(&mut bytes, ce, first, 0, 0xffff_fffe);
    let (rep, text) = agrees(&bytes, "a hash above its leaf");
    assert!(text.contains(&format!("block #{first} has bad max hash")), "{text}");
    let f = finding(&rep, "P2_HTREE_MAX_HASH");
    assert!(f.message.contains(&format!("htree leaf {first} ")), "{}", f.message);
    assert!(f.message.contains("0xfffffffe"), "{}", f.message);

    // Past the end of the last leaf: no name hashes to an odd value.
    let mut odd = clean.clone();
    set_hash(&mut odd, ce, last, 0, 0xffff_ffff);
    let (rep, text) = agrees(&odd, "an odd hash in the last leaf");
    assert!(text.contains(&format!("block #{last} has bad max hash")), "{text}");
    finding(&rep, "P2_HTREE_MAX_HASH");

    let mut low = clean.clone();
    set_hash(&mut low, ce, last, 0, 0);
    let (rep, text) = agrees(&low, "a hash below its leaf");
    assert!(text.contains(&format!("block #{last} has bad min hash")), "{text}");
    finding(&rep, "P2_HTREE_MIN_HASH");

    // The repair rebuilds the index from the stored hashes: clean, still
    // SipHash, every name there; the moved one now sits where its wrong
    // hash puts it, as after e2fsck's rebuild.
    let (out, after) = repair_yes(&bytes);
    assert_eq!(out.verdict.unfixed_errors(), 0, "{:#?}", out.verdict.findings);
    let fixed = fixed_codes(&out);
    assert!(fixed.contains(&"P2_HTREE_MAX_HASH"), "{fixed:?}");
    assert!(fixed.contains(&"P3A_OPTIMIZE_DIR"), "{fixed:?}");
    e2fsck_clean(&after);
    assert_eq!(check(&after).errors(), 0);
    assert!(debugfs_out(&after, "htree /ce").contains("Hash Version: 6"));
    names_read_back(&after, ce, LEFT, Some(&moved));
}

#[test]
fn a_record_without_room_for_its_hash_is_a_corrupt_directory() {
    let (mut bytes, ce) = image("casefold,encrypt,^metadata_csum", true);
    let leaf = leaves(&bytes, ce)[0];
    // The name grows over the hash: the record still holds the name, not the hash.
    let (at, rec_len, _) = record(&bytes, ce, leaf, 1);
    bytes[at + 6] = (rec_len - 8) as u8;
    let off = at % 1024;
    // e2fsck -n, refused the salvage, gives up (exit 12); we go on and
    // report what follows from it too.
    let rep = check(&bytes);
    let (code, text) = e2fsck_fn(&bytes);
    assert_eq!(code, Some(12), "{text}");
    let what = format!("Directory inode {ce}, block #{leaf}, offset {off}: directory corrupted");
    assert!(text.contains(&what), "{text}");
    let f = finding(&rep, "P2_DIR_CORRUPTED");
    let ours = format!("directory block {leaf} is corrupt at offset {off}: rec_len {rec_len}");
    assert!(f.message.starts_with(&ours), "{}", f.message);
    assert!(f.message.contains("no room for the stored name hash"), "{}", f.message);
    assert_eq!((f.inode, f.block), (Some(ce), Some((at / 1024) as u64)));
    let (out, after) = repair_yes(&bytes);
    assert_eq!(out.verdict.unfixed_errors(), 0, "{:#?}", out.verdict.findings);
    e2fsck_clean(&after);
    assert_eq!(check(&after).errors(), 0);
}

#[test]
fn a_root_of_another_hash_version_is_cleared_and_rebuilt_by_siphash() {
    for features in ["casefold,encrypt,^metadata_csum", "casefold,encrypt"] {
        let (mut bytes, ce) = image(features, true);
        // dx_root_info.hash_version, after `.` and `..`'s headers.
        let at = bmap(&bytes, ce, 0) * 1024 + 28;
        assert_eq!(bytes[at], 6);
        bytes[at] = 1;
        let (rep, text) = agrees(&bytes, features);
        assert!(text.contains("but should use SipHash (6)"), "{text}");
        finding(&rep, "P1_HTREE_NEEDS_SIPHASH");
        let (out, after) = repair_yes(&bytes);
        assert_eq!(out.verdict.unfixed_errors(), 0, "{:#?}", out.verdict.findings);
        e2fsck_clean(&after);
        assert_eq!(check(&after).errors(), 0, "{features}");
        let tree = debugfs_out(&after, "htree /ce");
        assert!(
            tree.contains("Hash Version: 6"),
            "{features}: rebuilt as an htree\n{tree}"
        );
        names_read_back(&after, ce, LEFT, None);
    }
}

#[test]
fn siphash_in_a_directory_that_stores_no_hashes_is_refused() {
    let (mut bytes, ce) = image("casefold,encrypt,^metadata_csum", false);
    let at = bmap(&bytes, ce, 0) * 1024 + 28;
    assert_ne!(bytes[at], 6);
    bytes[at] = 6;
    let (rep, text) = agrees(&bytes, "SipHash in a casefolded directory");
    assert!(text.contains("uses SipHash, but should not"), "{text}");
    finding(&rep, "P1_HTREE_CANNOT_SIPHASH");
    let (out, after) = repair_yes(&bytes);
    assert_eq!(out.verdict.unfixed_errors(), 0, "{:#?}", out.verdict.findings);
    e2fsck_clean(&after);
}
