//! `dx_hash` against e2fsprogs: every algorithm 0..=5, several seeds (the
//! all-zero one included) and names chosen to hit chunk boundaries and high
//! bytes 0x80..=0xff (where signed and unsigned char differ), compared with
//! what `debugfs dx_hash -h <code> [-s <uuid>] <name>` prints.

mod common;

use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::process::Command;

use ext4kit_format::hash::{EXT4_HTREE_EOF_32BIT, HashVersion, dx_hash, seed_from_bytes};

const SEEDS: [Option<&str>; 4] = [
    None,
    Some("01234567-89ab-cdef-0123-456789abcdef"),
    Some("d3b07384-d9a0-4c9b-8e2a-5f6e0a1b2c3d"),
    Some("ffffffff-ffff-ffff-ffff-ffffffffffff"),
];

/// Names that survive debugfs' command-line parser: no whitespace, quotes or
/// backslashes. The empty name is written as `""`.
fn names() -> Vec<Vec<u8>> {
    let mut names: Vec<Vec<u8>> = vec![
        b"".to_vec(),
        b"a".to_vec(),
        vec![0x80],
        vec![0xff],
        b"hello".to_vec(),
        b"h\xe9llo\xff".to_vec(),
        "caf\u{e9}-\u{65e5}\u{672c}".as_bytes().to_vec(),
    ];
    for len in [15, 16, 17, 31, 32, 33, 64, 100, 254, 255] {
        let name = (0..len).map(|i| b"abcXYZ019_-.\x80\xc3\xfe"[i % 15]).collect();
        names.push(name);
    }
    names.push((0u8..=254).map(|i| 0x80 | i).collect()); // 255 high bytes
    names
}

fn request(code: u8, seed: Option<&str>, name: &[u8]) -> Vec<u8> {
    let mut line = format!("dx_hash -h {code} ").into_bytes();
    if let Some(seed) = seed {
        line.extend_from_slice(format!("-s {seed} ").as_bytes());
    }
    if name.is_empty() {
        line.extend_from_slice(b"\"\"");
    } else {
        line.extend_from_slice(name);
    }
    line.push(b'\n');
    line
}

/// `Hash of <name> is 0x<major> (minor 0x<minor>)` → (name, major, minor).
fn parse_line(line: &[u8]) -> Option<(Vec<u8>, u32, u32)> {
    let rest = line.strip_prefix(b"Hash of ")?;
    let at = rest.windows(6).rposition(|w| w == b" is 0x")?;
    let (name, tail) = (&rest[..at], std::str::from_utf8(&rest[at + 6..]).ok()?);
    let (major, minor) = tail.split_once(" (minor 0x")?;
    let minor = minor.strip_suffix(')')?;
    let hex = |s: &str| u32::from_str_radix(s, 16).ok();
    Some((name.to_vec(), hex(major)?, hex(minor)?))
}

fn uuid_bytes(uuid: &str) -> [u8; 16] {
    let hex: String = uuid.chars().filter(|c| *c != '-').collect();
    let mut out = [0u8; 16];
    for (i, b) in out.iter_mut().enumerate() {
        *b = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap();
    }
    out
}

#[test]
fn dx_hash_matches_debugfs() {
    let Some(tools) = common::tools(&["mkfs.ext4", "debugfs"]) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("hash.img");
    common::mkfs(&tools[0], &img, &[], None, "4M");

    let mut cases = Vec::new();
    let mut script = Vec::new();
    for code in 0..=5u8 {
        for seed in SEEDS {
            for name in names() {
                script.extend(request(code, seed, &name));
                cases.push((code, seed, name));
            }
        }
    }
    let cmds = dir.path().join("cmds");
    std::fs::File::create(&cmds).unwrap().write_all(&script).unwrap();
    let out = common::run(
        Command::new(&tools[1])
            .arg("-f")
            .arg(std::ffi::OsStr::from_bytes(cmds.as_os_str().as_bytes()))
            .arg(&img),
    );
    let results: Vec<_> = out.split(|&b| b == b'\n').filter_map(parse_line).collect();
    assert_eq!(results.len(), cases.len(), "one debugfs answer per request");

    let mut eof_moved = 0;
    for ((code, seed, name), (echoed, major, minor)) in cases.iter().zip(results) {
        assert_eq!(&echoed, name, "debugfs saw a different name");
        let words = seed.map_or([0; 4], |s| seed_from_bytes(&uuid_bytes(s)));
        let version = HashVersion::from_code(*code).unwrap();
        let got = dx_hash(name, version, &words).unwrap();
        // e2fsprogs' ext2fs_dirhash only clears bit 0; the kernel also moves
        // the end-of-directory value down, and dx_hash follows the kernel.
        let major = if major == EXT4_HTREE_EOF_32BIT << 1 {
            eof_moved += 1;
            (EXT4_HTREE_EOF_32BIT - 1) << 1
        } else {
            major
        };
        assert_eq!(
            (got.major, got.minor),
            (major, minor),
            "code {code} seed {seed:?} name {name:x?}"
        );
    }
    eprintln!(
        "dx_hash: {} debugfs vectors matched ({eof_moved} at the EOF value)",
        cases.len()
    );
}
