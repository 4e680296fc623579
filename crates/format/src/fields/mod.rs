//! Named on-disk fields, as debugfs's `set_super_value`, `set_inode_field`
//! and `set_bg` name them (`debugfs/set_fields.c`): where each lies in
//! `struct ext4_super_block`, `struct ext4_inode` and `struct
//! ext4_group_desc` (its low part and, for wide values, the `_hi` part),
//! and how a value given as text is read. Offsets come from the raw
//! structures themselves (`offset_of!`), so the tables cannot drift from
//! the layouts the rest of the crate parses.
//!
//! Pure: the caller reads and writes the bytes and recomputes checksums.

mod tables;
mod value;

pub use tables::{GROUP_DESC, INODE, SUPERBLOCK};
pub use value::{Context, Value, number, parse};

/// How a field's text value is read (debugfs's `parse_*` functions).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// An unsigned number: decimal, `0x` hex or `0` octal.
    Uint,
    /// A signed number.
    Int,
    /// Seconds in a 32-bit field whose high bits (32–39) live in an `_hi`
    /// byte: the superblock's times.
    SbTime,
    /// Seconds in a 32-bit field whose epoch bits (32–33) are the low two
    /// bits of the `_extra` word: an inode's times.
    InodeTime,
    /// Text, zero-padded to the field's length.
    Text,
    /// A UUID: `null`/`clear`, `random`, `time`, or the usual hex form.
    Uuid,
    /// A directory hash: `legacy`, `half_md4`, `tea` (and `_unsigned`), a number.
    HashAlg,
    /// A checksum: a number, or `calc` to have it recomputed.
    Checksum,
}

/// A byte range of a structure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Part {
    /// Byte offset in the structure.
    pub offset: usize,
    /// Length in bytes (of one element, for arrays).
    pub len: usize,
}

/// One named field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Field {
    /// debugfs's name (without the `s_`/`i_`/`bg_` prefix).
    pub name: &'static str,
    /// The low part, or the whole field.
    pub lo: Part,
    /// The high part of a value split in two (`_hi`, `_high`, `_extra`).
    pub hi: Option<Part>,
    /// How its value is read.
    pub kind: Kind,
    /// Elements, for arrays (`jnl_blocks[3]`, `block[IND]`); 1 otherwise.
    pub count: usize,
}

/// A field named in `table`, with its array index: `name`, `s_name`,
/// `name[3]`, and for `block` also `block[IND]`, `[DIND]`, `[TIND]`.
pub fn find(table: &'static [Field], spec: &str) -> Option<(&'static Field, usize)> {
    let (name, index) = match spec.split_once('[') {
        Some((n, rest)) => (n, Some(rest.strip_suffix(']')?)),
        None => (spec, None),
    };
    let name = ["s_", "i_", "bg_"]
        .iter()
        .find_map(|p| name.strip_prefix(p))
        .unwrap_or(name);
    let field = table.iter().find(|f| f.name.eq_ignore_ascii_case(name))?;
    let idx = match index {
        None if field.count == 1 => 0,
        None => return None,
        Some(i) => match i.to_ascii_uppercase().as_str() {
            "IND" => 12,
            "DIND" => 13,
            "TIND" => 14,
            n => n.parse().ok()?,
        },
    };
    (idx < field.count).then_some((field, idx))
}

impl Field {
    /// Width in bits of the whole value (both parts).
    pub fn bits(&self) -> u32 {
        let hi = match (self.kind, self.hi) {
            (_, None) => 0,
            (Kind::SbTime, _) => 8,
            (Kind::InodeTime, _) => 2,
            (_, Some(h)) => h.len as u32 * 8,
        };
        (self.lo.len as u32 * 8 + hi).min(64)
    }

    /// Writes `v` into `buf` (the structure's bytes) at element `idx`;
    /// a high part beyond `buf` (a small inode or descriptor) is left out,
    /// and [`Value::Calc`] writes nothing (the caller recomputes).
    pub fn store(&self, buf: &mut [u8], idx: usize, v: &Value) {
        let at = self.lo.offset + idx * self.lo.len;
        match v {
            Value::Calc => {}
            Value::Bytes(b) => put(buf, at, self.lo.len, b),
            Value::Num(n) => {
                put_le(buf, at, self.lo.len, *n);
                let Some(h) = self.hi else { return };
                let high = n >> (self.lo.len * 8);
                match self.kind {
                    // The _extra word keeps its nanoseconds: only the epoch bits change.
                    Kind::InodeTime => {
                        let old = get_le(buf, h.offset, h.len).unwrap_or(0);
                        put_le(buf, h.offset, h.len, (old & !3) | (high & 3));
                    }
                    _ => put_le(buf, h.offset, h.len, high),
                }
            }
        }
    }

    /// The value at element `idx` of `buf`, as [`Field::store`] writes it.
    pub fn load(&self, buf: &[u8], idx: usize) -> Value {
        let at = self.lo.offset + idx * self.lo.len;
        if matches!(self.kind, Kind::Text | Kind::Uuid) {
            return Value::Bytes(buf.get(at..at + self.lo.len).unwrap_or_default().to_vec());
        }
        let lo = get_le(buf, at, self.lo.len).unwrap_or(0);
        let hi = self.hi.and_then(|h| get_le(buf, h.offset, h.len)).unwrap_or(0);
        let hi = if self.kind == Kind::InodeTime { hi & 3 } else { hi };
        Value::Num(if self.lo.len >= 8 {
            lo
        } else {
            lo | hi << (self.lo.len * 8)
        })
    }
}

fn put(buf: &mut [u8], at: usize, len: usize, bytes: &[u8]) {
    if let Some(dst) = buf.get_mut(at..at + len) {
        dst.fill(0);
        let n = bytes.len().min(len);
        dst[..n].copy_from_slice(&bytes[..n]);
    }
}

fn put_le(buf: &mut [u8], at: usize, len: usize, v: u64) {
    if let Some(dst) = buf.get_mut(at..at + len) {
        dst.copy_from_slice(&v.to_le_bytes()[..len]);
    }
}

fn get_le(buf: &[u8], at: usize, len: usize) -> Option<u64> {
    let src = buf.get(at..at + len)?;
    let mut b = [0u8; 8];
    b[..len].copy_from_slice(src);
    Some(u64::from_le_bytes(b))
}
