//! Directory and inline-data repairs on images mke2fs and debugfs make:
//! each test damages one field precisely, runs `repair` as `fsck -y`, and
//! asserts that the verdict is clean, that the expected problem was
//! repaired, that `e2fsck -fn` agrees, and that the names survive.

mod support;

use support::*;

use std::io::Write;
use std::process::{Command, Stdio};

use ext4kit_fsck::repair::Outcome;

const BS: usize = 1024;
/// `i_block` within an inode record.
const I_BLOCK: usize = 0x28;
const I_MODE: usize = 0;

/// A 4 MiB image made by mke2fs with `features` and `args`, then
/// `script` run by `debugfs -w`.
fn make(features: &str, args: &[&str], script: &str) -> Vec<u8> {
    let f = tempfile::NamedTempFile::new().unwrap();
    let st = Command::new("mke2fs")
        .args(["-q", "-F", "-o", "Linux", "-b", "1024", "-I", "256", "-O", features])
        .args(args)
        .arg(f.path())
        .arg("4096")
        .status()
        .expect("mke2fs");
    assert!(st.success());
    let mut child = Command::new("debugfs")
        .args(["-w", "-f", "-"])
        .arg(f.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("debugfs");
    child.stdin.take().unwrap().write_all(script.as_bytes()).unwrap();
    assert!(child.wait().unwrap().success());
    std::fs::read(f.path()).unwrap()
}

/// Byte offset of inode `ino`'s record in the image.
fn inode_at(bytes: &[u8], ino: u32) -> usize {
    let out = debugfs_out(bytes, &format!("imap <{ino}>"));
    let blk: usize = out
        .split("located at block ")
        .nth(1)
        .and_then(|s| s.split(',').next())
        .and_then(|s| s.trim().parse().ok())
        .expect("imap block");
    let off = out.split("offset 0x").nth(1).expect("imap offset").trim();
    blk * BS + usize::from_str_radix(off, 16).unwrap()
}

/// (inode, name) of every entry in use of directory `ino`, `.` and `..` included.
fn entries(bytes: &[u8], ino: u32) -> Vec<(u32, String)> {
    debugfs_out(bytes, &format!("ls -p <{ino}>"))
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split('/').collect();
            Some((f.get(1)?.parse().ok()?, (*f.get(5)?).to_owned()))
        })
        .filter(|(i, _)| *i != 0)
        .collect()
}

fn names(bytes: &[u8], ino: u32) -> Vec<String> {
    let mut v: Vec<String> = entries(bytes, ino)
        .into_iter()
        .map(|(_, n)| n)
        .filter(|n| !n.is_empty() && n != "." && n != "..")
        .collect();
    v.sort();
    v
}

/// Every finding of the repair runs and the verdict: (code, fixed).
fn all(out: &Outcome) -> Vec<(&'static str, bool)> {
    out.runs
        .iter()
        .chain(std::iter::once(&out.verdict))
        .flat_map(|r| r.findings.iter())
        .map(|f| (f.code.name, f.fixed))
        .collect()
}

/// Repairs; asserts `code` was repaired (or, for a warning, found), the
/// verdict is clean and e2fsck agrees.
fn fix_clean(bytes: Vec<u8>, code: &str) -> Vec<u8> {
    let (after, out) = fix(bytes);
    let found = all(&out);
    assert!(found.iter().any(|f| f.0 == code), "{code} not among {found:?}");
    let left: Vec<_> = out
        .verdict
        .findings
        .iter()
        .map(|f| (f.code.name, f.message.clone()))
        .collect();
    assert_eq!(out.verdict.unfixed_errors(), 0, "left: {left:?}");
    e2fsck_clean(&after);
    after
}

const INLINE: &str = "^has_journal,^metadata_csum,inline_data";
const TWO_FILES: &str = "mkdir d\nwrite /dev/null d/f1\nwrite /dev/null d/f2\n";

#[test]
fn an_inline_directory_record_with_a_bad_rec_len_is_salvaged() {
    let mut bytes = make(INLINE, &[], TWO_FILES);
    assert_eq!(names(&bytes, 12), ["f1", "f2"]);
    // i_block: parent (4 bytes), f1 (12 bytes), then f2's record.
    let at = inode_at(&bytes, 12) + I_BLOCK + 16 + 4;
    bytes[at..at + 2].copy_from_slice(&0xFFu16.to_le_bytes());
    let after = fix_clean(bytes, "P2_DIR_CORRUPTED");
    assert_eq!(names(&after, 12), ["f1", "f2"]);
}

#[test]
fn an_inline_directory_parent_out_of_range_is_pointed_at_the_root() {
    let mut bytes = make(INLINE, &[], TWO_FILES);
    let at = inode_at(&bytes, 12) + I_BLOCK;
    bytes[at..at + 4].copy_from_slice(&0x7FFF_FF00u32.to_le_bytes());
    let after = fix_clean(bytes, "P2_BAD_INO");
    assert!(
        entries(&after, 12).contains(&(2, "..".into())),
        "{:?}",
        entries(&after, 12)
    );
    assert_eq!(names(&after, 12), ["f1", "f2"]);
}

#[test]
fn inline_data_without_its_xattr_is_truncated_and_the_directory_cleared() {
    let mut bytes = make(INLINE, &[], TWO_FILES);
    // i_extra_isize 2: the in-inode xattrs, system.data among them, are unreadable.
    let at = inode_at(&bytes, 12) + 128;
    bytes[at..at + 2].copy_from_slice(&2u16.to_le_bytes());
    let after = fix_clean(bytes, "P1_INLINE_DATA_NO_ATTR");
    assert!(!names(&after, 2).contains(&"d".to_string()));
}

#[test]
fn a_directory_extent_marked_uninitialized_is_made_initialized() {
    let mut bytes = make("^has_journal,^metadata_csum,extent", &[], TWO_FILES);
    // The first extent's ee_len (i_block + 12 + 4): set its top bit.
    let at = inode_at(&bytes, 12) + I_BLOCK + 16;
    let len = u16::from_le_bytes([bytes[at], bytes[at + 1]]);
    bytes[at..at + 2].copy_from_slice(&(len | 0x8000).to_le_bytes());
    let after = fix_clean(bytes, "P1_UNINIT_DBLOCK");
    assert_eq!(names(&after, 12), ["f1", "f2"]);
}

#[test]
fn a_directory_whose_mode_says_socket_becomes_a_directory_again() {
    let mut bytes = make("^has_journal,^metadata_csum,^extent", &[], TWO_FILES);
    let at = inode_at(&bytes, 12) + I_MODE;
    bytes[at..at + 2].copy_from_slice(&0o140_755u16.to_le_bytes());
    let after = fix_clean(bytes, "P1_TREAT_AS_DIRECTORY");
    assert_eq!(names(&after, 12), ["f1", "f2"]);
    assert!(debugfs_out(&after, "stat <12>").contains("Type: directory"));
}

#[test]
fn with_no_inode_for_lost_found_an_unattached_file_goes_into_the_root() {
    // 16 inodes: after the 10 reserved ones and the files, none is free.
    let data = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(data.path(), b"some bytes").unwrap();
    let mut script = String::from("rmdir lost+found\n");
    for i in 0..6 {
        script += &format!("write {} f{i}\n", data.path().display());
    }
    script += "unlink f0\n";
    let bytes = make("^has_journal,^metadata_csum,^resize_inode", &["-N", "16"], &script);
    let before = names(&bytes, 2);
    assert!(!before.contains(&"f0".to_string()) && !before.contains(&"lost+found".to_string()));
    let after = fix_clean(bytes, "P3_LPF_NO_SPACE");
    let root = entries(&after, 2);
    assert!(root.iter().any(|(i, n)| *n == format!("#{i}")), "{root:?}");
}
