//! Defragmenting a file of a mounted image: `ext4kit defrag MOUNTPOINT/…`.
//!
//! `e4defrag` cannot reach an ext4kit mount: `EXT4_IOC_MOVE_EXT` carries a
//! donor file descriptor inside its argument, and FUSE passes an ioctl's
//! argument to the server as bytes, where a descriptor of the caller means
//! nothing. So the mount has a request of its own, in the style of the
//! sync request ([`crate::sync_request`]): reading the extended attribute
//! named by [`request_name`] of a regular file asks the server to run
//! [`ext4kit_engine::Filesystem::defrag_file`] on it, and the value read
//! is the outcome ([`encode_reply`], [`decode_reply`]).
//!
//! Why an extended attribute and not a private ioctl: FUSE passes
//! `getxattr(2)` of any name to the server unchanged and never caches it,
//! works without root, and needs no `unsafe` on the calling side (every
//! ioctl call in Rust is `unsafe`, which this workspace forbids). The name
//! is outside every namespace the kernel's file systems accept, so no
//! attribute of an image can have it, and any other file system refuses
//! it. The options travel in the name (`ext4kit.defrag.dry-run`,
//! `ext4kit.defrag.chunk-blocks=256`), so `getfattr -n` can make the
//! request too.
//!
//! The reply has a fixed length ([`reply_len`]) so that the size query of
//! `getxattr(2)` (a zero-sized buffer, which the server answers without
//! doing the work) predicts the size of the real answer. It is text, one
//! `key=value` line per field, values zero-padded to 20 digits, so it is
//! readable as it is.

mod serve;

use ext4kit_engine::frag::FileFrag;
use ext4kit_engine::{DEFAULT_CHUNK_BLOCKS, DefragOptions, DefragOutcome, DefragSkip};

/// The extended attribute whose reading is a defrag request.
pub const DEFRAG_XATTR: &str = "ext4kit.defrag";

/// The first line of every reply: an ext4kit server answered, in this
/// format.
const HEADER: &str = "ext4kit defrag v1\n";

/// The reply's fields, in order.
const FIELDS: [&str; 13] = [
    "ino",
    "blocks_before",
    "extents_before",
    "best_before",
    "score_before",
    "blocks_after",
    "extents_after",
    "best_after",
    "score_after",
    "fewest",
    "blocks_moved",
    "transactions",
    "skipped",
];

/// Digits of a value: enough for any `u64`.
const DIGITS: usize = 20;

/// Reasons a file was skipped, numbered from 1 in this order in replies
/// (0: it was not).
const SKIPS: [DefragSkip; 10] = [
    DefragSkip::NotRegular,
    DefragSkip::Special,
    DefragSkip::Removed,
    DefragSkip::Immutable,
    DefragSkip::AppendOnly,
    DefragSkip::InlineData,
    DefragSkip::BlockMapped,
    DefragSkip::AlreadyBest,
    DefragSkip::NoImprovement,
    DefragSkip::NoSpace,
];

/// The attribute name that asks for a defrag with `opts`.
pub fn request_name(opts: &DefragOptions) -> String {
    let mut name = String::from(DEFRAG_XATTR);
    if opts.dry_run {
        name.push_str(".dry-run");
    }
    if opts.chunk_blocks != DEFAULT_CHUNK_BLOCKS {
        name.push_str(&format!(".chunk-blocks={}", opts.chunk_blocks));
    }
    name
}

/// The options an attribute name asks for: `None` when it is no defrag
/// request, `Some(None)` when it is one the server does not understand.
pub fn parse_request(name: &[u8]) -> Option<Option<DefragOptions>> {
    let rest = name.strip_prefix(DEFRAG_XATTR.as_bytes())?;
    if !rest.is_empty() && !rest.starts_with(b".") {
        return None;
    }
    let mut opts = DefragOptions::default();
    for part in rest.split(|&b| b == b'.').skip(1) {
        match part {
            b"dry-run" => opts.dry_run = true,
            _ => match part.strip_prefix(b"chunk-blocks=").and_then(parse_u64) {
                Some(n) if (1..=u64::from(u32::MAX)).contains(&n) => opts.chunk_blocks = n as u32,
                _ => return Some(None),
            },
        }
    }
    Some(Some(opts))
}

fn parse_u64(digits: &[u8]) -> Option<u64> {
    std::str::from_utf8(digits).ok()?.parse().ok()
}

/// The length of every reply.
pub fn reply_len() -> usize {
    HEADER.len() + FIELDS.iter().map(|f| f.len() + 1 + DIGITS + 1).sum::<usize>()
}

fn skip_code(s: Option<DefragSkip>) -> u64 {
    s.and_then(|s| SKIPS.iter().position(|&k| k == s))
        .map_or(0, |i| i as u64 + 1)
}

/// The reply for `o`.
pub fn encode_reply(o: &DefragOutcome) -> Vec<u8> {
    let values = [
        u64::from(o.ino),
        o.before.blocks,
        o.before.extents,
        o.before.best,
        o.before.score,
        o.after.blocks,
        o.after.extents,
        o.after.best,
        o.after.score,
        o.fewest,
        o.blocks_moved,
        o.transactions,
        skip_code(o.skipped),
    ];
    let mut s = String::from(HEADER);
    for (k, v) in FIELDS.iter().zip(values) {
        s.push_str(&format!("{k}={v:0DIGITS$}\n"));
    }
    s.into_bytes()
}

/// The outcome in a reply; `None` when it is not a reply of this format
/// (not an ext4kit server, or another version of it).
pub fn decode_reply(reply: &[u8]) -> Option<DefragOutcome> {
    let text = std::str::from_utf8(reply).ok()?.strip_prefix(HEADER)?;
    let mut v = [0u64; FIELDS.len()];
    let mut lines = text.lines();
    for (slot, key) in v.iter_mut().zip(FIELDS) {
        let (k, value) = lines.next()?.split_once('=')?;
        if k != key {
            return None;
        }
        *slot = value.parse().ok()?;
    }
    let frag = |i: usize| FileFrag {
        blocks: v[i],
        extents: v[i + 1],
        best: v[i + 2],
        score: v[i + 3],
    };
    let skipped = match v[12] {
        0 => None,
        n => Some(*SKIPS.get(usize::try_from(n - 1).ok()?)?),
    };
    Some(DefragOutcome {
        ino: u32::try_from(v[0]).ok()?,
        before: frag(1),
        after: frag(5),
        fewest: v[9],
        blocks_moved: v[10],
        transactions: v[11],
        skipped,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(skipped: Option<DefragSkip>) -> DefragOutcome {
        let f = |n| FileFrag {
            blocks: 1200,
            extents: n,
            best: 1,
            score: u64::MAX,
        };
        DefragOutcome {
            ino: u32::MAX,
            before: f(1200),
            after: f(1),
            fewest: 1,
            blocks_moved: 1200,
            transactions: 5,
            skipped,
        }
    }

    #[test]
    fn replies_round_trip_at_a_fixed_length() {
        for s in std::iter::once(None).chain(SKIPS.map(Some)) {
            let r = encode_reply(&outcome(s));
            assert_eq!(r.len(), reply_len());
            assert_eq!(decode_reply(&r), Some(outcome(s)));
        }
        let mut bad = encode_reply(&outcome(None));
        bad[0] = b'E';
        assert_eq!(decode_reply(&bad), None);
        assert_eq!(decode_reply(b"ext4kit synced"), None);
    }

    #[test]
    fn names_carry_the_options() {
        for (dry_run, chunk_blocks) in [(false, DEFAULT_CHUNK_BLOCKS), (true, 1), (false, 256), (true, u32::MAX)] {
            let o = DefragOptions { dry_run, chunk_blocks };
            assert_eq!(parse_request(request_name(&o).as_bytes()), Some(Some(o)));
        }
        assert_eq!(request_name(&DefragOptions::default()), "ext4kit.defrag");
        assert_eq!(parse_request(b"ext4kit.sync"), None);
        assert_eq!(parse_request(b"ext4kit.defragment"), None);
        assert_eq!(parse_request(b"user.x"), None);
        for bad in [
            "ext4kit.defrag.chunk-blocks=0",
            "ext4kit.defrag.fast",
            "ext4kit.defrag.",
        ] {
            assert_eq!(parse_request(bad.as_bytes()), Some(None), "{bad}");
        }
    }
}
