//! Names in casefolded directories, against e2fsck 1.47 on the same
//! images (made by mke2fs, then `debugfs -w` links that the kernel would
//! refuse). In strict mode (`encoding_flags=strict`) e2fsck compares names
//! folded, so `Foo` next to `FOO` is a duplicate, and a name that is not
//! UTF-8 is illegal; without strict mode both are fine to it. The check's
//! verdict must be e2fsck's, and `fsck -y` must leave an image e2fsck
//! finds clean, every name unique once folded.

mod support;

use support::*;

use std::io::Write;
use std::process::Command;

use ext4kit_engine::device::MemDevice;
use ext4kit_fsck::{Mode, Options, Report};

/// A casefold image (`flags` the encoding flags) with `/d` flagged +F, and
/// the debugfs commands of `script` (raw bytes: names need not be UTF-8)
/// run on it; `None` (said loudly) without e2fsprogs.
fn made(flags: &str, script: &[u8]) -> Option<Vec<u8>> {
    if Command::new("mkfs.ext4").arg("-V").output().is_err() {
        ext4kit_testkit::skipped!("mkfs.ext4 is not installed (apt-get install e2fsprogs)");
        assert!(std::env::var_os("CI").is_none(), "CI has e2fsprogs");
        return None;
    }
    let img = tempfile::NamedTempFile::new().unwrap();
    let enc = format!("encoding=utf8,encoding_flags={flags}");
    let out = Command::new("mkfs.ext4")
        .args(["-q", "-F", "-b", "1024", "-O", "casefold", "-E", &enc])
        .arg(img.path())
        .arg("8M")
        .env("MKE2FS_CONFIG", "/etc/mke2fs.conf")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "mkfs.ext4: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let data = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(data.path(), b"hi\n").unwrap();
    let mut cmds = tempfile::NamedTempFile::new().unwrap();
    writeln!(cmds, "mkdir d\nset_inode_field d flags 0x40080000").unwrap();
    cmds.write_all(&script.replace_data(data.path())).unwrap();
    cmds.flush().unwrap();
    let out = Command::new("debugfs")
        .args(["-w", "-f"])
        .arg(cmds.path())
        .arg(img.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "debugfs: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(std::fs::read(img.path()).unwrap())
}

trait ReplaceData {
    fn replace_data(&self, path: &std::path::Path) -> Vec<u8>;
}

impl ReplaceData for [u8] {
    /// `DATA` in a script names the file `write` copies in.
    fn replace_data(&self, path: &std::path::Path) -> Vec<u8> {
        let p = path.display().to_string();
        let mut out = Vec::new();
        let mut rest = self;
        while let Some(i) = rest.windows(4).position(|w| w == b"DATA") {
            out.extend_from_slice(&rest[..i]);
            out.extend_from_slice(p.as_bytes());
            rest = &rest[i + 4..];
        }
        out.extend_from_slice(rest);
        out
    }
}

/// Three names each linked again under another casing: `Foo`/`FOO` and
/// `bar`/`BAR` to the same inode, `other`/`foo` to one whose folded name
/// is `Foo`'s. Link counts are set to match, so only the names are wrong.
const DUPLICATES: &[u8] = b"write DATA d/Foo\nwrite DATA d/bar\nwrite DATA d/other\n\
ln d/Foo d/FOO\nln d/bar d/BAR\nln d/other d/foo\n\
sif d/Foo links_count 2\nsif d/bar links_count 2\nsif d/other links_count 2\n";

/// A name with a byte that is not UTF-8.
const NOT_UTF8: &[u8] = b"write DATA d/Foo\nln d/Foo d/a\xffb\nsif d/Foo links_count 2\n";

fn check(bytes: &[u8]) -> Report {
    check_with(bytes, false)
}

fn check_with(bytes: &[u8], check_encoding: bool) -> Report {
    let dev = MemDevice::new(bytes.to_vec());
    let opts = Options {
        force: true,
        mode: Mode::Check,
        check_encoding,
        ..Options::default()
    };
    ext4kit_fsck::check(&dev, &opts, &mut |_| {}).expect("the check runs")
}

/// The check-only verdict is e2fsck's; returns the report and e2fsck's text.
fn agrees(bytes: &[u8], what: &str) -> (Report, String) {
    let rep = check(bytes);
    let (code, text) = e2fsck_fn(bytes);
    let ours = if rep.errors() > 0 { 4 } else { 0 };
    assert_eq!(Some(ours), code, "{what}: ours {:?}\ne2fsck -fn:\n{text}", rep.findings);
    (rep, text)
}

fn has(rep: &Report, code: &str) -> bool {
    rep.findings.iter().any(|f| f.code.name == code)
}

/// The names in `/d`, folded, and the inodes they name.
fn folded_names(bytes: &[u8]) -> Vec<(Vec<u8>, u32)> {
    let dev = MemDevice::new(bytes.to_vec());
    let fs = ext4kit_engine::Filesystem::open(Box::new(dev), ext4kit_engine::OpenOptions::default()).unwrap();
    let root = fs.inode(ext4kit_engine::ROOT_INO).unwrap();
    let d = fs.lookup(&root, b"d").unwrap();
    let mut v: Vec<_> = fs
        .read_dir(&fs.inode(d).unwrap())
        .unwrap()
        .into_iter()
        .filter(|e| e.name != b"." && e.name != b"..")
        .map(|e| (ext4kit_format::casefold::fold(&e.name).unwrap_or(e.name), e.ino))
        .collect();
    v.sort();
    v
}

#[test]
fn names_that_fold_alike_are_duplicates_in_strict_mode() {
    let Some(bad) = made("strict", DUPLICATES) else { return };
    let (rep, text) = agrees(&bad, "strict duplicates");
    assert!(text.contains("Duplicate entry 'FOO'"), "{text}");
    assert!(has(&rep, "P2_DUPLICATE_DIRENT"), "{:?}", rep.findings);
    // Entries a check leaves in place still count, as e2fsck -n counts them.
    assert!(!rep.findings.iter().any(|f| f.code.pass() == 4), "{:?}", rep.findings);
    let (out, after) = repair_yes(&bad);
    assert_eq!(out.verdict.unfixed_errors(), 0, "{:?}", out.verdict.findings);
    e2fsck_clean(&after);
    let names = folded_names(&after);
    let mut keys: Vec<_> = names.iter().map(|(n, _)| n.clone()).collect();
    keys.dedup();
    assert_eq!(keys.len(), names.len(), "a folded name repeats: {names:?}");
    let mut inodes: Vec<u32> = names.iter().map(|&(_, i)| i).collect();
    inodes.sort();
    inodes.dedup();
    assert_eq!(inodes.len(), 3, "every file keeps a name: {names:?}");
}

#[test]
fn without_strict_mode_names_compare_byte_for_byte() {
    let Some(img) = made("nostrict", DUPLICATES) else {
        return;
    };
    let (rep, _) = agrees(&img, "duplicates without strict mode");
    assert_eq!(rep.errors(), 0, "{:?}", rep.findings);
    let Some(img) = made("nostrict", NOT_UTF8) else { return };
    let (rep, _) = agrees(&img, "a non-UTF-8 name without strict mode");
    assert_eq!(rep.errors(), 0, "{:?}", rep.findings);
}

#[test]
fn a_name_that_is_not_utf8_is_illegal_in_strict_mode() {
    let Some(bad) = made("strict", NOT_UTF8) else { return };
    let (rep, text) = agrees(&bad, "strict, not UTF-8");
    assert!(text.contains("illegal UTF-8"), "{text}");
    assert!(has(&rep, "P2_BAD_ENCODED_NAME"), "{:?}", rep.findings);
    let (out, after) = repair_yes(&bad);
    assert_eq!(out.verdict.unfixed_errors(), 0, "{:?}", out.verdict.findings);
    e2fsck_clean(&after);
    assert!(
        folded_names(&after).iter().any(|(n, _)| n == b"a.."),
        "{:?}",
        folded_names(&after)
    );
}

/// `-E check_encoding` checks a directory without strict mode as if it
/// had it, for e2fsck and here.
#[test]
fn check_encoding_folds_without_strict_mode() {
    for (script, what) in [(DUPLICATES, "Duplicate entry 'FOO'"), (NOT_UTF8, "illegal UTF-8")] {
        let Some(img) = made("nostrict", script) else { return };
        let rep = check_with(&img, true);
        let f = temp_image(&img);
        let out = Command::new("e2fsck")
            .args(["-fn", "-E", "check_encoding"])
            .arg(f.path())
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(4), "{text}");
        assert!(text.contains(what), "{text}");
        assert!(rep.errors() > 0, "{what}: {:?}", rep.findings);
    }
}
