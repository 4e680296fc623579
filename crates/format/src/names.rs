//! The names e2fsprogs prints for the superblock's enumerated fields
//! (`dumpe2fs -h`, lib/e2p), so inspection output says `Continue` and
//! `half_md4` where the disk says 1 and 1. Unknown values are named by
//! number, never dropped: a newer or damaged image must still be readable.

use crate::superblock::{FLAGS_SIGNED_HASH, FLAGS_UNSIGNED_HASH, STATE_ERROR, STATE_ORPHAN, STATE_VALID};

/// `s_errors`: what the kernel does on an error (`errors=`).
pub fn errors_behaviour(v: u16) -> String {
    match v {
        1 => "Continue".into(),
        2 => "Remount read-only".into(),
        3 => "Panic".into(),
        n => format!("Unknown (continue) ({n})"),
    }
}

/// `s_creator_os`.
pub fn creator_os(v: u32) -> String {
    match v {
        0 => "Linux".into(),
        1 => "Hurd".into(),
        2 => "Masix".into(),
        3 => "FreeBSD".into(),
        4 => "Lites".into(),
        n => format!("(unknown os {n})"),
    }
}

/// `s_def_hash_version` (and an htree root's hash version): lib/e2p's
/// names for the three functions; the `_unsigned` variants are what the
/// kernel uses on an image flagged `unsigned_directory_hash`.
pub fn hash_version(v: u8) -> String {
    match v {
        0 => "legacy".into(),
        1 => "half_md4".into(),
        2 => "tea".into(),
        3 => "legacy_unsigned".into(),
        4 => "half_md4_unsigned".into(),
        5 => "tea_unsigned".into(),
        6 => "siphash".into(),
        n => format!("HASHALG_{n}"),
    }
}

/// `s_rev_level` with dumpe2fs's qualifier.
pub fn revision(v: u32) -> String {
    match v {
        0 => "0 (original)".into(),
        1 => "1 (dynamic)".into(),
        n => format!("{n} (unknown)"),
    }
}

/// `s_state`: `clean`, `not clean`, plus `with errors` and `orphans being
/// recovered` when those bits are set.
pub fn state(v: u16) -> String {
    let mut s = String::from(if v & STATE_VALID != 0 { "clean" } else { "not clean" });
    if v & STATE_ERROR != 0 {
        s.push_str(" with errors");
    }
    if v & STATE_ORPHAN != 0 {
        s.push_str(", orphans being recovered");
    }
    s
}

/// `s_flags` (the directory hash's char signedness, a test file system).
pub fn fs_flags(v: u32) -> Vec<String> {
    let known = [
        (FLAGS_SIGNED_HASH, "signed_directory_hash"),
        (FLAGS_UNSIGNED_HASH, "unsigned_directory_hash"),
        (0x4, "test_filesystem"),
    ];
    bit_names(v, &known, "FLAG_")
}

/// `s_default_mount_opts`: the journal mode is a two-bit field, the rest
/// are single bits.
pub fn default_mount_opts(v: u32) -> Vec<String> {
    const JMODE: u32 = 0x60;
    let mut out = Vec::new();
    match v & JMODE {
        0x20 => out.push("journal_data".to_string()),
        0x40 => out.push("journal_data_ordered".to_string()),
        0x60 => out.push("journal_data_writeback".to_string()),
        _ => {}
    }
    let known = [
        (0x1, "debug"),
        (0x2, "bsdgroups"),
        (0x4, "user_xattr"),
        (0x8, "acl"),
        (0x10, "uid16"),
        (0x100, "nobarrier"),
        (0x200, "block_validity"),
        (0x400, "discard"),
        (0x800, "nodelalloc"),
    ];
    out.extend(bit_names(v & !JMODE, &known, "MNTOPT_"));
    out
}

/// `s_checksum_type`.
pub fn checksum_type(v: u8) -> String {
    match v {
        1 => "crc32c".into(),
        n => format!("unknown ({n})"),
    }
}

/// The jbd2 superblock's features, as `dumpe2fs` lists them (lib/e2p's
/// journal feature names; unknown bits as `FEATURE_C<bit>`/`FEATURE_I<bit>`).
pub fn journal_features(compat: u32, incompat: u32) -> Vec<String> {
    let mut out = bit_names(compat, &[(0x1, "journal_checksum")], "FEATURE_C");
    let known = [
        (0x1, "journal_incompat_revoke"),
        (0x2, "journal_64bit"),
        (0x4, "journal_async_commit"),
        (0x8, "journal_checksum_v2"),
        (0x10, "journal_checksum_v3"),
    ];
    out.extend(bit_names(incompat, &known, "FEATURE_I"));
    out
}

fn bit_names(v: u32, known: &[(u32, &str)], unknown: &str) -> Vec<String> {
    (0..32)
        .map(|b| 1u32 << b)
        .filter(|bit| v & bit != 0)
        .map(|bit| {
            known.iter().find(|(b, _)| *b == bit).map_or_else(
                || format!("{unknown}{}", bit.trailing_zeros()),
                |(_, n)| (*n).to_string(),
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mke2fs_defaults_read_as_dumpe2fs_prints_them() {
        assert_eq!(errors_behaviour(1), "Continue");
        assert_eq!(hash_version(1), "half_md4");
        assert_eq!(state(1), "clean");
        assert_eq!(state(3), "clean with errors");
        assert_eq!(default_mount_opts(0x0c), ["user_xattr", "acl"]);
        assert_eq!(
            default_mount_opts(0x60 | 0x1000),
            ["journal_data_writeback", "MNTOPT_12"]
        );
        assert_eq!(fs_flags(1), ["signed_directory_hash"]);
        assert_eq!(errors_behaviour(9), "Unknown (continue) (9)");
        assert_eq!(
            journal_features(0, 0x1 | 0x2 | 0x10 | 0x20),
            [
                "journal_incompat_revoke",
                "journal_64bit",
                "journal_checksum_v3",
                "FEATURE_I5"
            ]
        );
    }
}
