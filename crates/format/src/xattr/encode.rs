//! Building an xattr block or in-inode region from a list of attributes, for
//! the writable engine.
//!
//! Layout rules, which match what both the kernel and e2fsprogs produce for a
//! freshly written region: entries are laid out from the front, each value
//! padded to 4 bytes and packed from the end of the region downwards in entry
//! order (the first entry's value ends at the end of the region), and the
//! list ends with four zero bytes. Block entries are sorted the way the kernel
//! keeps them (`ext4_xattr_find_entry` with `sorted`): by name index, then
//! name length, then name bytes. In-inode entries keep the caller's order
//! (the kernel does not sort them; e2fsprogs puts `system.data` first).
//!
//! See `Documentation/filesystems/ext4/attributes.rst`.

use zerocopy::IntoBytes;
use zerocopy::little_endian::{U16, U32};

use super::{
    RawXattrEntry, RawXattrHeader, XATTR_ENTRY_SIZE, XATTR_HEADER_SIZE, XATTR_IBODY_HEADER_SIZE, XATTR_MAGIC,
    block_hash_of, entry_hash, entry_hash_ea_inode, pad4,
};
use crate::error::{FormatError, Result};

/// The value of an attribute to encode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NewValue<'a> {
    /// Bytes stored in the region itself.
    Bytes(&'a [u8]),
    /// `ea_inode`: the value lives in inode `inum` (`size` bytes) whose
    /// stored value hash is `value_hash`.
    EaInode {
        /// `e_value_inum`.
        inum: u32,
        /// `e_value_size`.
        size: u32,
        /// The value inode's hash, folded into `e_hash`.
        value_hash: u32,
    },
}

/// One attribute to encode: `e_name_index`, the name suffix and the value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NewXattr<'a> {
    /// `e_name_index` (see [`super::NAME_PREFIXES`]).
    pub index: u8,
    /// The name without the index's prefix (≤ 255 bytes).
    pub name: &'a [u8],
    /// The value.
    pub value: NewValue<'a>,
}

impl NewXattr<'_> {
    fn value_len(&self) -> Result<usize> {
        match self.value {
            NewValue::Bytes(v) => pad4(v.len()).ok_or_else(|| too_big(self)),
            NewValue::EaInode { .. } => Ok(0),
        }
    }

    fn entry_len(&self) -> Result<usize> {
        u8::try_from(self.name.len()).map_err(|_| too_big(self))?;
        pad4(XATTR_ENTRY_SIZE.saturating_add(self.name.len())).ok_or_else(|| too_big(self))
    }
}

fn too_big(x: &NewXattr<'_>) -> FormatError {
    let len = u64::try_from(x.name.len()).unwrap_or(u64::MAX);
    FormatError::invalid("ext4_xattr_entry", "e_name_len", 0, len)
}

/// The kernel's block order: index, then name length, then name bytes.
pub fn sort_for_block(attrs: &mut [NewXattr<'_>]) {
    attrs.sort_by(|a, b| (a.index, a.name.len(), a.name).cmp(&(b.index, b.name.len(), b.name)));
}

/// Builds an external xattr block of `block_size` bytes: header with
/// `h_magic`, `h_refcount` = `refcount`, `h_blocks` = 1, entries sorted by
/// [`sort_for_block`], each `e_hash` and the block's `h_hash` computed as the
/// kernel does. `h_checksum` is left zero: set it with
/// [`super::set_block_checksum`] once the block number is known.
///
/// # Errors
/// Truncated on `ext4_xattr_header` (need > have) when the attributes do
/// not fit; invalid `e_name_len` for a name longer than 255 bytes or an
/// inline value that does not fit a 16-bit offset.
pub fn encode_block(attrs: &[NewXattr<'_>], block_size: usize, refcount: u32) -> Result<Vec<u8>> {
    let mut sorted = attrs.to_vec();
    sort_for_block(&mut sorted);
    let mut block = vec![0u8; block_size.max(XATTR_HEADER_SIZE)];
    let hashes = write_entries(&mut block, XATTR_HEADER_SIZE, 0, &sorted, true)?;
    let header = RawXattrHeader {
        h_magic: U32::new(XATTR_MAGIC),
        h_refcount: U32::new(refcount),
        h_blocks: U32::new(1),
        h_hash: U32::new(block_hash_of(hashes.into_iter())),
        h_checksum: U32::new(0),
        h_reserved: [U32::new(0); 3],
    };
    block
        .get_mut(..XATTR_HEADER_SIZE)
        .ok_or_else(|| FormatError::truncated("ext4_xattr_header", XATTR_HEADER_SIZE, block_size))?
        .copy_from_slice(header.as_bytes());
    Ok(block)
}

/// Builds the in-inode region of `region_len` bytes (inode size − 128 −
/// `i_extra_isize`): the magic, then the entries in the given order with
/// value offsets relative to the first entry. `e_hash` is 0 for inline values
/// (neither the kernel nor e2fsprogs hashes in-inode entries) and the
/// `ea_inode` hash otherwise. An empty list gives an all-zero region (no
/// magic), as the kernel leaves an inode without in-inode attributes.
///
/// # Errors
/// As [`encode_block`], with the truncation reported on
/// `ext4_xattr_ibody_header`.
pub fn encode_ibody(attrs: &[NewXattr<'_>], region_len: usize) -> Result<Vec<u8>> {
    let mut region = vec![0u8; region_len];
    if attrs.is_empty() {
        return Ok(region);
    }
    let magic = region
        .get_mut(..XATTR_IBODY_HEADER_SIZE)
        .ok_or_else(|| FormatError::truncated("ext4_xattr_ibody_header", XATTR_IBODY_HEADER_SIZE, region_len))?;
    magic.copy_from_slice(&XATTR_MAGIC.to_le_bytes());
    let first = XATTR_IBODY_HEADER_SIZE;
    write_entries(&mut region, first, first, attrs, false)?;
    Ok(region)
}

/// Writes entries from `first` and values from the end of `buf`; returns the
/// `e_hash` of each entry. Offsets are stored relative to `value_base`.
fn write_entries(
    buf: &mut [u8],
    first: usize,
    value_base: usize,
    attrs: &[NewXattr<'_>],
    hash_values: bool,
) -> Result<Vec<u32>> {
    let structure = if hash_values {
        "ext4_xattr_header"
    } else {
        "ext4_xattr_ibody_header"
    };
    let need = total_len(first, attrs)?;
    if need > buf.len() {
        return Err(FormatError::truncated(structure, need, buf.len()));
    }
    let (mut off, mut end) = (first, buf.len());
    let mut hashes = Vec::with_capacity(attrs.len());
    for x in attrs {
        let (entry_len, value_len) = (x.entry_len()?, x.value_len()?);
        // `need` covered every entry, value and the terminator: no underflow.
        end = end.saturating_sub(value_len);
        let (raw, hash) = raw_entry(x, end, value_base, hash_values)?;
        put(buf, off, raw.as_bytes());
        put(buf, off.saturating_add(XATTR_ENTRY_SIZE), x.name);
        if let NewValue::Bytes(v) = x.value {
            put(buf, end, v);
        }
        hashes.push(hash);
        off = off.saturating_add(entry_len);
    }
    Ok(hashes)
}

fn total_len(first: usize, attrs: &[NewXattr<'_>]) -> Result<usize> {
    attrs.iter().try_fold(first.saturating_add(4), |acc, x| {
        Ok(acc.saturating_add(x.entry_len()?).saturating_add(x.value_len()?))
    })
}

fn raw_entry(x: &NewXattr<'_>, value_at: usize, value_base: usize, hash_values: bool) -> Result<(RawXattrEntry, u32)> {
    let name_len = u8::try_from(x.name.len()).map_err(|_| too_big(x))?;
    let (offs, inum, size, hash) = match x.value {
        NewValue::Bytes(v) => {
            let offs = u16::try_from(value_at.saturating_sub(value_base)).map_err(|_| too_big(x))?;
            let size = u32::try_from(v.len()).map_err(|_| too_big(x))?;
            let hash = if hash_values { entry_hash(x.name, v, false) } else { 0 };
            (offs, 0, size, hash)
        }
        NewValue::EaInode { inum, size, value_hash } => (0, inum, size, entry_hash_ea_inode(x.name, value_hash, false)),
    };
    let raw = RawXattrEntry {
        e_name_len: name_len,
        e_name_index: x.index,
        e_value_offs: U16::new(offs),
        e_value_inum: U32::new(inum),
        e_value_size: U32::new(size),
        e_hash: U32::new(hash),
    };
    Ok((raw, hash))
}

/// Copies `src` to `buf[at..]`; the caller has checked the room.
fn put(buf: &mut [u8], at: usize, src: &[u8]) {
    if let Some(dst) = buf.get_mut(at..at.saturating_add(src.len())) {
        dst.copy_from_slice(src);
    }
}
