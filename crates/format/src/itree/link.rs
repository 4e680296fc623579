//! The link from an htree root (`dx_root`) to its itree: the last two
//! `dx_entry` slots of the root, which the htree of such a directory never
//! fills. Slots past `dx_countlimit.count` are neither read by the kernel's
//! `dx_probe` nor covered by `ext4_dx_csum`, so the link leaves the
//! directory readable by a kernel that knows nothing of it.

use crate::error::{FormatError, Result};
use crate::htree::{DX_ENTRY_SIZE, DX_ROOT_COUNT_OFFSET, root_limit};
use crate::util::{le32, slice};

/// `"ILNK"` read as a little-endian `u32`.
pub const LINK_MAGIC: u32 = u32::from_le_bytes(*b"ILNK");
/// Bytes of the link: two `dx_entry` slots.
pub const LINK_SIZE: usize = 2 * DX_ENTRY_SIZE;

const LINK: &str = "itree_link";

/// Where the itree's root is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Link {
    /// Block of the root node.
    pub root: u64,
    /// Level of the root node (0: the root is the only leaf).
    pub levels: u8,
}

/// Entries the htree root of a directory with an itree may use: the
/// kernel's `dx_root_limit` less the two slots of the link.
pub fn root_limit_with_link(block_size: u32, metadata_csum: bool) -> u16 {
    root_limit(block_size, metadata_csum).saturating_sub(2)
}

/// Byte offset of the link in the root block.
pub fn link_offset(block_size: u32, metadata_csum: bool) -> usize {
    DX_ROOT_COUNT_OFFSET + usize::from(root_limit_with_link(block_size, metadata_csum)) * DX_ENTRY_SIZE
}

/// Reads the link of the root block `buf`: `None` when its magic is absent
/// (no itree linked there).
///
/// # Errors
/// `Truncated` `itree_link` for a short buffer; `Invalid` `itree_link.root`
/// for block 0 or `itree_link.levels` beyond [`super::MAX_LEVELS`].
pub fn read_link(buf: &[u8], block_size: u32, metadata_csum: bool) -> Result<Option<Link>> {
    let off = link_offset(block_size, metadata_csum);
    let raw = slice(buf, off, LINK_SIZE, LINK)?;
    if le32(raw, 8, LINK)? != LINK_MAGIC {
        return Ok(None);
    }
    let root = u64::from(le32(raw, 0, LINK)?) | (u64::from(le32(raw, 4, LINK)?) << 32);
    let levels = raw[12];
    if root == 0 {
        return Err(FormatError::invalid(LINK, "root", off, 0));
    }
    if levels > super::MAX_LEVELS {
        return Err(FormatError::invalid(LINK, "levels", off + 12, levels.into()));
    }
    Ok(Some(Link { root, levels }))
}

/// Writes `link` into the root block `buf`, or zeroes the slots for `None`.
///
/// # Errors
/// `Truncated` `itree_link` for a short buffer.
pub fn write_link(buf: &mut [u8], block_size: u32, metadata_csum: bool, link: Option<Link>) -> Result<()> {
    let off = link_offset(block_size, metadata_csum);
    let have = buf.len();
    let raw = buf
        .get_mut(off..off + LINK_SIZE)
        .ok_or_else(|| FormatError::truncated(LINK, off + LINK_SIZE, have))?;
    raw.fill(0);
    if let Some(l) = link {
        raw[..8].copy_from_slice(&l.root.to_le_bytes());
        raw[8..12].copy_from_slice(&LINK_MAGIC.to_le_bytes());
        raw[12] = l.levels;
    }
    Ok(())
}
