//! The casefold fold against e2fsprogs 1.47.0's utf8-12.1 tables: for a
//! name around every code point of planes 0 to 2, the half-MD4 hash of
//! `casefold::hash_input` equals what `debugfs dx_hash -c -e utf8` prints
//! (which hashes its own fold). Characters assigned after Unicode 12.1,
//! which the crates fold and e2fsprogs passes through, are the only
//! allowed differences (see `docs/casefold.md`).

mod common;

use std::io::Write;
use std::process::Command;

use ext4kit_format::casefold;
use ext4kit_format::hash::{HashVersion, dx_hash, seed_from_bytes};

const SEED: &str = "01234567-89ab-cdef-0123-456789abcdef";
const SEED_BYTES: [u8; 16] = [
    0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef, 0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef,
];

/// Code points debugfs' command-line parser passes through unchanged.
fn usable(c: char) -> bool {
    !c.is_whitespace() && !c.is_control() && !matches!(c, '"' | '\\' | '\u{85}')
}

#[test]
fn folded_hashes_match_debugfs_over_planes_0_to_2() {
    let Some(tools) = common::tools(&["mkfs.ext4", "debugfs"]) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("cf.img");
    common::mkfs(&tools[0], &img, &["-O", "casefold"], None, "4M");
    let names: Vec<String> = (0x20u32..0x30000)
        .filter_map(char::from_u32)
        .filter(|&c| usable(c))
        .map(|c| format!("x{c}Y"))
        .collect();
    let mut script = Vec::new();
    for n in &names {
        writeln!(script, "dx_hash -c -e utf8 -h 1 -s {SEED} {n}").unwrap();
    }
    let cmds = dir.path().join("cmds");
    std::fs::write(&cmds, script).unwrap();
    let out = common::run(Command::new(&tools[1]).arg("-f").arg(&cmds).arg(&img));
    let majors: Vec<u32> = String::from_utf8_lossy(&out)
        .lines()
        .filter_map(|l| l.rsplit_once(" is 0x")?.1.split_once(' ').map(|(h, _)| h.to_string()))
        .filter_map(|h| u32::from_str_radix(&h, 16).ok())
        .collect();
    assert_eq!(majors.len(), names.len(), "one debugfs answer per request");
    let mut differ = Vec::new();
    for (n, theirs) in names.iter().zip(majors) {
        let ours = dx_hash(
            &casefold::hash_input(n.as_bytes()),
            HashVersion::HalfMd4,
            &seed_from_bytes(&SEED_BYTES),
        )
        .unwrap();
        if ours.major != theirs {
            differ.push(n.chars().nth(1).unwrap() as u32);
        }
    }
    eprintln!("{} names, {} differ: {:x?}", names.len(), differ.len(), differ);
    assert!(differ.is_empty(), "{:x?}", differ);
}
