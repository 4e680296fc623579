//! Walking an xattr entry list the way e2fsck's pass 1 does
//! (`attributes.rst`: `struct ext4_xattr_entry`, the in-inode area after
//! `i_extra_isize` and the external block with its 32-byte header).
//!
//! Unlike the format crate's parser, which rejects anything the kernel
//! would not write, this walk reports the first fault in e2fsck's terms:
//! every entry and value must take space no other entry, value or header
//! took ("allocation collision"), names and values must fit, and inline
//! values must match their `e_hash`. `ea_inode` entries are returned for the
//! caller, which needs the value inodes to judge them.

use ext4kit_format::xattr::{XATTR_ENTRY_SIZE, XATTR_HEADER_SIZE, entry_hash};

/// Largest inline value e2fsck accepts in a block (`EXT2_XATTR_SIZE_MAX`).
const XATTR_SIZE_MAX: u32 = 1 << 16;

/// One entry as stored.
#[derive(Debug, Clone, Copy)]
pub struct Entry<'a> {
    /// Byte offset of the entry in the walked buffer.
    pub off: usize,
    /// `e_name_index`.
    pub index: u8,
    /// `e_name` (the suffix after the index's prefix).
    pub name: &'a [u8],
    /// `e_value_offs`.
    pub value_offs: u16,
    /// `e_value_inum` (0: the value is inline).
    pub value_inum: u32,
    /// `e_value_size`.
    pub value_size: u32,
    /// `e_hash`.
    pub hash: u32,
}

/// Why the walk stopped, as e2fsck names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Two parts claim the same bytes, or a part runs off the end.
    Collision,
    /// The name runs past the space left (`e_name_len`).
    NameLen(u8),
    /// The value needs more space than is left (`e_value_size`).
    ValueSize(u32),
    /// `e_hash` matches neither hash variant of the name and value.
    Hash(u32),
    /// A block entry with name index 0.
    BadName,
    /// A block value past the block, or too large.
    BadValue,
}

/// What a walk found: the entries before the fault, and the fault.
#[derive(Debug, Default)]
pub struct Walk<'a> {
    /// Entries, in on-disk order, up to the first fault.
    pub entries: Vec<Entry<'a>>,
    /// The first fault, if any.
    pub fault: Option<Fault>,
}

/// Byte ranges already taken in a buffer of `max` bytes (e2fsck's region).
/// At most one span per entry, and entries are at least 16 bytes apart,
/// so the list stays small.
struct Region {
    spans: Vec<(usize, usize)>,
    max: usize,
}

impl Region {
    fn new(max: usize) -> Self {
        Self { spans: Vec::new(), max }
    }

    /// Takes `len` bytes at `start`; false if they run off the end, are
    /// empty, or overlap bytes already taken.
    fn take(&mut self, start: usize, len: usize) -> bool {
        let Some(end) = start.checked_add(len).filter(|&e| e <= self.max) else {
            return false;
        };
        if len == 0 || self.spans.iter().any(|&(s, e)| start < e && s < end) {
            return false;
        }
        self.spans.push((start, end));
        true
    }
}

fn pad4(n: usize) -> usize {
    (n + 3) & !3
}

fn le32(b: &[u8], at: usize) -> u32 {
    b.get(at..at + 4)
        .map_or(0, |s| u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
}

/// The entry at `off` (its fixed 16 bytes lie inside `buf`).
fn entry_at(buf: &[u8], off: usize) -> Option<Entry<'_>> {
    let f = buf.get(off..off + XATTR_ENTRY_SIZE)?;
    let name_len = usize::from(f[0]);
    let name = buf
        .get(off + XATTR_ENTRY_SIZE..off + XATTR_ENTRY_SIZE + name_len)
        .unwrap_or(&[]);
    Some(Entry {
        off,
        index: f[1],
        name,
        value_offs: u16::from_le_bytes([f[2], f[3]]),
        value_inum: le32(f, 4),
        value_size: le32(f, 8),
        hash: le32(f, 12),
    })
}

/// True when `e_hash` is the hash of the name and the inline value at
/// `buf[at..]` (padded to whole words), by either name-byte signedness.
fn hash_ok(buf: &[u8], e: &Entry, at: usize) -> bool {
    let len = pad4(e.value_size as usize);
    let value = buf.get(at..at.saturating_add(len).min(buf.len())).unwrap_or(&[]);
    [false, true]
        .into_iter()
        .any(|s| entry_hash(e.name, value, s) == e.hash)
}

/// Walks the in-inode area `region` (from its magic to the end of the
/// record), as e2fsck's `check_ea_in_inode`: a zero `e_hash` is allowed.
pub fn ibody(region: &[u8]) -> Walk<'_> {
    let mut w = Walk::default();
    let mut taken = Region::new(region.len());
    if !taken.take(0, 4) {
        w.fault = Some(Fault::Collision);
        return w;
    }
    let mut remain = region.len() - 4;
    let mut off = 4;
    while remain >= XATTR_ENTRY_SIZE && le32(region, off) != 0 {
        let Some(e) = entry_at(region, off) else { break };
        let elen = pad4(XATTR_ENTRY_SIZE + usize::from(region[off]));
        if !taken.take(off, elen) {
            w.fault = Some(Fault::Collision);
            return w;
        }
        remain -= XATTR_ENTRY_SIZE;
        let nlen = pad4(usize::from(region[off]));
        if nlen > remain {
            w.fault = Some(Fault::NameLen(region[off]));
            return w;
        }
        remain -= nlen;
        if e.value_inum == 0 {
            if e.value_size as usize > remain {
                w.fault = Some(Fault::ValueSize(e.value_size));
                return w;
            }
            let at = 4 + usize::from(e.value_offs);
            if e.value_size != 0 && !taken.take(at, pad4(e.value_size as usize)) {
                w.fault = Some(Fault::Collision);
                return w;
            }
            if e.hash != 0 && !hash_ok(region, &e, at) {
                w.fault = Some(Fault::Hash(e.hash));
                return w;
            }
            remain -= e.value_size as usize;
        }
        w.entries.push(e);
        off += elen;
    }
    if !taken.take(off, 4) {
        w.fault = Some(Fault::Collision);
    }
    w
}

/// Walks the entries of an external block `buf` (whose header the caller
/// has checked), as e2fsck's `check_ext_attr`: every inline value must
/// match its `e_hash`.
pub fn block(buf: &[u8]) -> Walk<'_> {
    let mut w = Walk::default();
    let mut taken = Region::new(buf.len());
    taken.take(0, XATTR_HEADER_SIZE);
    let mut off = XATTR_HEADER_SIZE;
    while off < buf.len() && le32(buf, off) != 0 {
        let Some(e) = entry_at(buf, off) else {
            w.fault = Some(Fault::Collision);
            return w;
        };
        let elen = pad4(XATTR_ENTRY_SIZE + usize::from(buf[off]));
        w.fault = block_entry(buf, &mut taken, &e, elen);
        if w.fault.is_some() {
            return w;
        }
        w.entries.push(e);
        off += elen;
    }
    if !taken.take(off, 4) {
        w.fault = Some(Fault::Collision);
    }
    w
}

/// One block entry's checks; the first fault.
fn block_entry(buf: &[u8], taken: &mut Region, e: &Entry, elen: usize) -> Option<Fault> {
    if !taken.take(e.off, elen) || e.name.len() + XATTR_ENTRY_SIZE + e.off > buf.len() {
        return Some(Fault::Collision);
    }
    if e.index == 0 {
        return Some(Fault::BadName);
    }
    if e.value_inum != 0 {
        return None;
    }
    let at = usize::from(e.value_offs);
    if e.value_size > XATTR_SIZE_MAX || at + e.value_size as usize > buf.len() {
        return Some(Fault::BadValue);
    }
    if e.value_size != 0 && !taken.take(at, pad4(e.value_size as usize)) {
        return Some(Fault::Collision);
    }
    (!hash_ok(buf, e, at)).then_some(Fault::Hash(e.hash))
}

/// The length of the inline-data value (`system.data`, index 7) among
/// `entries`, when there is one.
pub fn system_data(entries: &[Entry]) -> Option<usize> {
    entries
        .iter()
        .find(|e| e.index == 7 && e.name == b"data" && e.value_inum == 0)
        .map(|e| e.value_size as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ibody_with(entries: &[(u8, &[u8], u16, &[u8])]) -> Vec<u8> {
        let mut r = vec![0u8; 96];
        r[..4].copy_from_slice(&0xEA02_0000u32.to_le_bytes());
        let mut off = 4;
        for &(idx, name, voff, val) in entries {
            r[off] = name.len() as u8;
            r[off + 1] = idx;
            r[off + 2..off + 4].copy_from_slice(&voff.to_le_bytes());
            r[off + 8..off + 12].copy_from_slice(&(val.len() as u32).to_le_bytes());
            r[off + 16..off + 16 + name.len()].copy_from_slice(name);
            let at = 4 + usize::from(voff);
            r[at..at + val.len()].copy_from_slice(val);
            off += pad4(16 + name.len());
        }
        r
    }

    #[test]
    fn sound_area_walks_clean() {
        let r = ibody_with(&[(7, b"data", 60, b"abcd")]);
        let w = ibody(&r);
        assert_eq!(w.fault, None);
        assert_eq!(system_data(&w.entries), Some(4));
    }

    #[test]
    fn value_over_entries_collides() {
        let r = ibody_with(&[(1, b"a", 0, b"xy")]);
        assert_eq!(ibody(&r).fault, Some(Fault::Collision));
    }

    #[test]
    fn bad_hash_is_found() {
        let mut r = ibody_with(&[(1, b"a", 60, b"xy")]);
        r[4 + 12] = 1;
        assert!(matches!(ibody(&r).fault, Some(Fault::Hash(_))));
    }
}
