//! `ext4kit debug IMG htree DIR` on a casefolded, encrypted directory
//! (hash version 6): each name is shown with the hash stored after it
//! (SipHash of the folded plaintext, which needs the key to compute), as
//! read straight from the image's bytes, with or without the key. The
//! index part matches debugfs's `htree`; debugfs cannot show these
//! hashes (it tries to compute SipHash and fails), so the image's bytes
//! are the oracle for them.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use ext4kit_format::dir_entry::{DirEntryIter, stored_hash};
use ext4kit_testkit::tools::{assert_fsck_clean, debugfs, debugfs_write, require_tools};

fn ext4kit(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_ext4kit")).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "ext4kit {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `(ino, hash, minor)` of every name line in a dump, by leaf block.
fn shown(dump: &str) -> BTreeMap<u32, Vec<(u32, u32, u32)>> {
    let mut out: BTreeMap<u32, Vec<_>> = BTreeMap::new();
    let mut leaf = None;
    for line in dump.lines() {
        if let Some(rest) = line.strip_prefix("Reading directory block ") {
            leaf = rest.split(',').next().and_then(|l| l.parse().ok());
            continue;
        }
        let Some(leaf) = leaf else { continue };
        // "INO 0xHASH-MINOR (REC_LEN) NAME   ", several to a line.
        let words: Vec<&str> = line.split(' ').collect();
        for w in words.windows(3) {
            let (Ok(ino), Some(h), true) = (w[0].parse::<u32>(), w[1].strip_prefix("0x"), w[2].starts_with('(')) else {
                continue;
            };
            let Some((hash, minor)) = h.split_once('-') else {
                continue;
            };
            let (Ok(hash), Ok(minor)) = (u32::from_str_radix(hash, 16), u32::from_str_radix(minor, 16)) else {
                continue;
            };
            out.entry(leaf).or_default().push((ino, hash, minor));
        }
    }
    out
}

/// The same, read from the image: each leaf's records and the hash each stores.
fn stored(img: &Path, leaves: impl Iterator<Item = u32>) -> BTreeMap<u32, Vec<(u32, u32, u32)>> {
    let bytes = std::fs::read(img).unwrap();
    let i = img.to_str().unwrap();
    leaves
        .map(|l| {
            let p: usize = debugfs(img, &format!("bmap /ce {l}")).unwrap().trim().parse().unwrap();
            let buf = &bytes[p * 1024..(p + 1) * 1024];
            let v = DirEntryIter::new(&buf[..1012], 1024, true)
                .map(Result::unwrap)
                .filter(|e| e.inode != 0)
                .map(|e| {
                    let (h, m) = stored_hash(buf, &e).unwrap_or_else(|| panic!("{i}: leaf {l} lacks a hash"));
                    (e.inode, h, m)
                })
                .collect();
            (l, v)
        })
        .collect()
}

fn index_lines(s: &str) -> Vec<String> {
    let mut v: Vec<String> = s
        .lines()
        .map(str::trim)
        .filter(|l| {
            ["Entry #", "Number of entries", "Hash Version", "Indirect"]
                .iter()
                .any(|p| l.starts_with(p))
        })
        .map(str::to_string)
        .collect();
    v.sort();
    v.dedup();
    v
}

#[test]
fn htree_shows_the_hash_each_entry_stores() {
    if let Err(why) = require_tools(&["debugfs", "e2fsck"]) {
        ext4kit_testkit::skipped!("debug htree: {why}");
        assert!(std::env::var_os("CI").is_none(), "CI has e2fsprogs: {why}");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("img");
    let i = img.to_str().unwrap();
    let key = dir.path().join("key");
    std::fs::write(&key, [0x3cu8; 64]).unwrap();
    let k = key.to_str().unwrap();
    ext4kit(&["mkfs", "-q", "-b", "1024", "-O", "casefold,encrypt", i, "32M"]);
    ext4kit(&["mkdir", i, "/ce"]);
    debugfs_write(&img, "set_inode_field /ce flags 0x40080000").unwrap();
    ext4kit(&["key", "set-policy", i, "/ce", "--key", k]);
    let names: Vec<String> = (0..300).map(|n| format!("/ce/Straße-{n:05}-Файл")).collect();
    let mut args = vec!["touch", i, "--key", k];
    args.extend(names.iter().map(String::as_str));
    ext4kit(&args);
    assert_fsck_clean(&img).unwrap();

    let ours = ext4kit(&["debug", i, "htree", "/ce"]);
    assert!(ours.contains("Hash Version: 6"), "{ours}");
    assert_eq!(index_lines(&ours), index_lines(&debugfs(&img, "htree /ce").unwrap()));
    let got = shown(&ours);
    assert!(got.len() > 2, "several leaves:\n{ours}");
    assert_eq!(got.values().map(Vec::len).sum::<usize>(), 300);
    assert_eq!(got, stored(&img, got.keys().copied()));
    assert!(got.values().flatten().all(|&(_, h, _)| h != 0), "{got:?}");
    // With the key, the same stored hashes.
    assert_eq!(shown(&ext4kit(&["debug", "--key", k, i, "htree", "/ce"])), got);
}
