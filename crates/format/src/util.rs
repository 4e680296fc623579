//! Bounds-checked little-/big-endian field readers for structures whose layout
//! is not fixed (directory entries, xattr entries, jbd2 tags).

use crate::error::{FormatError, Result};

/// Returns `len` bytes of `buf` at `off`, or a truncation error for `structure`.
pub(crate) fn slice<'a>(buf: &'a [u8], off: usize, len: usize, structure: &'static str) -> Result<&'a [u8]> {
    let end = off
        .checked_add(len)
        .ok_or_else(|| FormatError::truncated(structure, usize::MAX, buf.len()))?;
    buf.get(off..end)
        .ok_or_else(|| FormatError::truncated(structure, end, buf.len()))
}

pub(crate) fn le16(buf: &[u8], off: usize, structure: &'static str) -> Result<u16> {
    let b = slice(buf, off, 2, structure)?;
    Ok(u16::from_le_bytes([b[0], b[1]]))
}

pub(crate) fn le32(buf: &[u8], off: usize, structure: &'static str) -> Result<u32> {
    let b = slice(buf, off, 4, structure)?;
    Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

#[allow(dead_code)] // the jbd2 structures read big-endian fields
pub(crate) fn be32(buf: &[u8], off: usize, structure: &'static str) -> Result<u32> {
    let b = slice(buf, off, 4, structure)?;
    Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
}

/// Joins a `_lo`/`_hi` field pair.
pub(crate) fn hilo64(hi: u32, lo: u32) -> u64 {
    (u64::from(hi) << 32) | u64::from(lo)
}
