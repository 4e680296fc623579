//! Writing a finished repair to the image, ordered so that a crash part
//! way cannot hide the damage: first the primary superblock loses
//! `EXT2_VALID_FS` (the next boot or `fsck -p` then checks in full), then
//! every changed page except the first, then the first page, which holds
//! the primary superblock with its final state. A rerun after a crash
//! starts from the original image with some of the repair applied, which
//! is something the checker repairs like any other damage.

use std::io;

use ext4kit_engine::BlockDevice;
use ext4kit_format::superblock::{EXT4_SUPER_MAGIC, RawSuperblock, STATE_VALID, SUPERBLOCK_OFFSET, SUPERBLOCK_SIZE};

use super::overlay::{Overlay, PAGE};

/// What [`commit`] wrote.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Written {
    /// Pages of the image rewritten.
    pub pages: usize,
    /// Bytes rewritten.
    pub bytes: u64,
}

/// Writes every page of `o` to its base device, in the safe order.
///
/// # Errors
/// The base device's write or flush error.
pub fn commit(o: &Overlay) -> io::Result<Written> {
    let base = o.base();
    let pages = o.pages();
    if pages.is_empty() {
        return Ok(Written::default());
    }
    mark_in_repair(base)?;
    let mut bytes = 0;
    for (&p, data) in pages.range(1..) {
        base.write_at(p * PAGE, data)?;
        bytes += data.len() as u64;
    }
    base.flush()?;
    if let Some(first) = pages.get(&0) {
        base.write_at(0, first)?;
        bytes += first.len() as u64;
        base.flush()?;
    }
    Ok(Written {
        pages: pages.len(),
        bytes,
    })
}

/// Clears `EXT2_VALID_FS` in the primary superblock on the image (when it
/// parses: a primary too damaged to read is already "not valid").
fn mark_in_repair(base: &dyn BlockDevice) -> io::Result<()> {
    let mut buf = [0u8; SUPERBLOCK_SIZE];
    base.read_at(SUPERBLOCK_OFFSET, &mut buf)?;
    let Ok(mut sb) = RawSuperblock::parse(&buf) else {
        return Ok(());
    };
    if sb.s_magic.get() != EXT4_SUPER_MAGIC || sb.s_state.get() & STATE_VALID == 0 {
        return Ok(());
    }
    // A checksum that was wrong stays wrong, so the marker cannot make a
    // damaged superblock look sound.
    let csum_ok = sb.verify_checksum().is_ok();
    sb.s_state.set(sb.s_state.get() & !STATE_VALID);
    if sb.features().metadata_csum() && csum_ok {
        sb.set_checksum();
    }
    base.write_at(SUPERBLOCK_OFFSET, &sb.encode())?;
    base.flush()
}
