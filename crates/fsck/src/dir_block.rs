//! One directory block as pass 2 checks and repairs it (`directory.rst`,
//! "Linear Directories"): the `ext4_dir_entry_2` records read in place,
//! the edits a repair makes to them (inode, rec_len, name_len, file type,
//! name), salvage of a corrupt record chain, the 12-byte checksum tail, and
//! the write back with its checksum recomputed (a dirent tail for a leaf,
//! the `dx_tail` for an htree node).

use ext4kit_format::dir_entry::{
    HASH_LEN, TAIL_SIZE, has_tail, rec_len_for, rec_len_from_disk, rec_len_hashed, rec_len_to_disk, set_block_checksum,
};
use ext4kit_format::htree::set_dx_checksum;

/// Bytes of a record before its name (`inode`, `rec_len`, `name_len`, `file_type`).
pub const HEADER: usize = 8;

/// One record's header, read from the block.
#[derive(Debug, Clone, Copy)]
pub struct Ent {
    /// Offset in the block.
    pub pos: usize,
    /// `inode`.
    pub inode: u32,
    /// Decoded `rec_len`.
    pub rec_len: usize,
    /// `name_len` (with the high byte when the file system has no filetype feature).
    pub name_len: usize,
    /// `file_type` (0 without the filetype feature).
    pub ft: u8,
}

/// A directory block and whether a repair changed it.
pub struct DirBuf {
    /// The block.
    pub buf: Vec<u8>,
    /// A repair changed it: it must be written back.
    pub dirty: bool,
    /// The file system has the filetype feature (`name_len` is one byte).
    pub filetype: bool,
}

impl DirBuf {
    /// Block size.
    pub fn bs(&self) -> usize {
        self.buf.len()
    }

    /// The record header at `pos`; `None` when fewer than 8 bytes remain before `end`.
    pub fn ent(&self, pos: usize, end: usize) -> Option<Ent> {
        if pos + HEADER > end.min(self.buf.len()) {
            return None;
        }
        let b = &self.buf;
        let inode = u32::from_le_bytes([b[pos], b[pos + 1], b[pos + 2], b[pos + 3]]);
        let rec_len = rec_len_from_disk(u16::from_le_bytes([b[pos + 4], b[pos + 5]]), self.bs());
        let (mut name_len, mut ft) = (usize::from(b[pos + 6]), b[pos + 7]);
        if !self.filetype {
            name_len |= usize::from(ft) << 8;
            ft = 0;
        }
        Some(Ent {
            pos,
            inode,
            rec_len,
            name_len,
            ft,
        })
    }

    /// The name of `e` (empty if it does not fit in the block).
    pub fn name(&self, e: &Ent) -> &[u8] {
        self.buf.get(e.pos + HEADER..e.pos + HEADER + e.name_len).unwrap_or(&[])
    }

    /// The `ext4_dir_entry_hash` (major, minor) stored after the name of
    /// `e` in a directory both casefolded and encrypted; `None` when the
    /// record has no room for it.
    pub fn stored_hash(&self, e: &Ent) -> Option<(u32, u32)> {
        let at = e.pos + rec_len_for(e.name_len);
        if rec_len_for(e.name_len) + HASH_LEN > e.rec_len {
            return None;
        }
        let w = |i: usize| {
            self.buf
                .get(i..i + 4)
                .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        };
        Some((w(at)?, w(at + 4)?))
    }

    /// Sets the record's inode number.
    pub fn set_inode(&mut self, pos: usize, ino: u32) {
        self.buf[pos..pos + 4].copy_from_slice(&ino.to_le_bytes());
        self.dirty = true;
    }

    /// Sets the record's `rec_len`.
    pub fn set_rec_len(&mut self, pos: usize, len: usize) {
        let raw = rec_len_to_disk(len, self.bs());
        self.buf[pos + 4..pos + 6].copy_from_slice(&raw.to_le_bytes());
        self.dirty = true;
    }

    /// Sets the record's `name_len` and file type (the type is the
    /// `name_len` high byte without the filetype feature: 0 there).
    pub fn set_name_len(&mut self, pos: usize, len: usize, ft: u8) {
        self.buf[pos + 6] = len as u8;
        self.buf[pos + 7] = if self.filetype { ft } else { (len >> 8) as u8 };
        self.dirty = true;
    }

    /// Sets the record's file type (filetype feature only).
    pub fn set_ft(&mut self, pos: usize, ft: u8) {
        if self.filetype {
            self.buf[pos + 7] = ft;
            self.dirty = true;
        }
    }

    /// Writes a whole record: `inode`, `rec_len`, and `name` followed by a
    /// NUL when the record has room for one.
    pub fn put(&mut self, pos: usize, inode: u32, rec_len: usize, ft: u8, name: &[u8]) {
        self.set_inode(pos, inode);
        self.set_rec_len(pos, rec_len);
        self.set_name_len(pos, name.len(), ft);
        let at = pos + HEADER;
        self.buf[at..at + name.len()].copy_from_slice(name);
        if name.len() < rec_len - HEADER {
            self.buf[at + name.len()] = 0;
        }
    }

    /// Repairs the record chain at `pos` that failed the rec_len/name_len
    /// checks, as e2fsck's salvage does: a record of 8 bytes is squeezed
    /// out; a record running past `end` whose name fits is cut at `end`; a
    /// well-formed length is absorbed by the previous record; otherwise the
    /// rest of the block goes to the previous record, or becomes one empty
    /// record. With `hashed` (a record that must carry its stored hash)
    /// the lengths a name needs include the 8-byte hash. Returns where
    /// checking resumes.
    pub fn salvage(&mut self, pos: usize, prev: Option<usize>, end: usize, inodes_count: u32, hashed: bool) -> usize {
        let (name_len, rec_len, inode) = match self.ent(pos, end) {
            Some(e) => (e.name_len, e.rec_len, e.inode),
            None => (0, end - pos, 0),
        };
        let left = end as i64 - pos as i64 - rec_len as i64;
        if left >= rec_len_hashed(1, hashed) as i64 && rec_len == HEADER {
            let left = left as usize;
            self.buf.copy_within(pos + HEADER..pos + HEADER + left, pos);
            self.buf[pos + left..pos + left + HEADER].fill(0);
            self.dirty = true;
            return pos;
        }
        let room = end - pos;
        if left < 0 && room > HEADER && rec_len_hashed(name_len, hashed) <= room && inode <= inodes_count && {
            let name = self.buf.get(pos + HEADER..pos + HEADER + name_len).unwrap_or(&[0]);
            !name.contains(&0)
        } {
            self.set_rec_len(pos, room);
            return pos;
        }
        if let Some(p) = prev {
            let prev_len = self.ent(p, end).map_or(0, |e| e.rec_len);
            if rec_len != 0 && rec_len.is_multiple_of(4) && pos + rec_len <= end {
                self.set_rec_len(p, prev_len + rec_len);
                return pos + rec_len;
            }
            self.set_rec_len(p, prev_len + room);
            return end;
        }
        if room < HEADER {
            return end;
        }
        self.put(pos, 0, room, 0, b"");
        pos
    }

    /// Makes room for the checksum tail in the last 12 bytes (e2fsck's
    /// `insert_dirent_tail`): the record that runs into them is shortened
    /// if its name still fits. False when it does not.
    pub fn insert_tail(&mut self, seed: u32) -> bool {
        let top = self.bs() - TAIL_SIZE;
        let mut pos = 0;
        while let Some(e) = self.ent(pos, top)
            && e.rec_len >= 12
            && e.rec_len.is_multiple_of(4)
            && pos + e.rec_len <= top
        {
            pos += e.rec_len;
            if pos == top {
                break;
            }
        }
        if pos != top {
            let Some(e) = self.ent(pos, top) else { return false };
            if rec_len_for(e.name_len) > top - pos {
                return false;
            }
            self.set_rec_len(pos, top - pos);
        }
        set_block_checksum(&mut self.buf, seed);
        self.dirty = true;
        true
    }

    /// The block with its checksum recomputed, ready to write: a leaf's
    /// dirent tail (when it has one), an htree node's `dx_tail`.
    pub fn sealed(&mut self, metadata_csum: bool, is_node: bool, seed: u32) -> &[u8] {
        if metadata_csum {
            if is_node {
                let bs = self.bs() as u32;
                let _ = set_dx_checksum(&mut self.buf, bs, seed);
            } else if has_tail(&self.buf) {
                set_block_checksum(&mut self.buf, seed);
            }
        }
        &self.buf
    }
}

/// An empty directory block: one unused record over the whole block, and
/// the checksum tail with `metadata_csum`.
pub fn empty_block(bs: usize, metadata_csum: bool, seed: u32) -> Vec<u8> {
    let mut d = DirBuf {
        buf: vec![0u8; bs],
        dirty: false,
        filetype: true,
    };
    let end = if metadata_csum { bs - TAIL_SIZE } else { bs };
    d.put(0, 0, end, 0, b"");
    if metadata_csum {
        set_block_checksum(&mut d.buf, seed);
    }
    d.buf
}

/// e2fsck's way of making a duplicate name unique: a name already ending
/// in `~digits` counts up; any other gets `~0` inside the padding its
/// record already has, overwriting its last bytes when there is none (the
/// caller checks that a counted-up name still fits its record).
pub fn mutate_name(name: &mut Vec<u8>) {
    let l = name.len();
    let digits = name.iter().rev().take_while(|c| c.is_ascii_digit()).count();
    let tilde = digits > 0 && l > digits + 1 && name[l - digits - 1] == b'~';
    if !tilde {
        let nl = if l.saturating_sub(1) & 3 < 2 {
            l + 2
        } else {
            (l + 3) & !3
        };
        let nl = nl.clamp(2, 255);
        name.resize(nl, 0);
        name[nl - 2] = b'~';
        name[nl - 1] = b'0';
        return;
    }
    let mut i = l - 1;
    while name[i] == b'9' {
        name[i] = b'0';
        if name[i - 1] == b'~' {
            name.insert(i, b'1');
            return;
        }
        i -= 1;
    }
    name[i] += 1;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(s: &str) -> String {
        let mut v = s.as_bytes().to_vec();
        mutate_name(&mut v);
        String::from_utf8(v).unwrap()
    }

    #[test]
    fn mutated_names_keep_their_record_size() {
        assert_eq!(m("a"), "a~0");
        assert_eq!(m("ab"), "ab~0");
        assert_eq!(m("abc"), "ab~0");
        assert_eq!(m("abcd"), "ab~0");
        assert_eq!(m("abcde"), "abcde~0");
        assert_eq!(m("ab~0"), "ab~1");
        assert_eq!(m("ab~9"), "ab~10");
        for s in ["a", "abc", "abcdefg", "x~8", "ab~98"] {
            assert_eq!(rec_len_for(m(s).len()), rec_len_for(s.len()), "{s}");
        }
    }

    #[test]
    fn salvage_squeezes_an_eight_byte_record() {
        let bs = 1024;
        let mut d = DirBuf {
            buf: vec![0u8; bs],
            dirty: false,
            filetype: true,
        };
        d.put(0, 2, 12, 2, b".");
        d.put(12, 2, 8, 2, b"");
        d.put(20, 11, bs - 20, 1, b"file");
        let at = d.salvage(12, Some(0), bs, 100, false);
        assert_eq!(at, 12);
        let e = d.ent(12, bs).unwrap();
        assert_eq!((e.inode, e.name_len), (11, 4));
    }
}
