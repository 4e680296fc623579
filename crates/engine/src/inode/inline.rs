//! Inline data (`inlinedata.rst`): bodies of small files and directories kept
//! in `i_block` and the value of the `system.data` xattr in the inode body.

use ext4kit_format::inline::{InlineDir, content};
use ext4kit_format::xattr::{XattrValue, ibody_region, parse_ibody};

use crate::dir::{DirEntry, file_type_code};
use crate::error::{Error, Location, Result};
use crate::fs::Filesystem;
use crate::inode::Inode;

/// Whose layout new inline bodies follow ([`crate::OpenOptions::inline`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum InlinePolicy {
    /// The kernel's (`fs/ext4/inline.c`): a new regular file becomes
    /// inline at its first write that fits the inode; a directory's
    /// entries fill `i_block`, then `system.data` grown to the inode's
    /// room, and only then a block.
    #[default]
    Kernel,
    /// `mke2fs -d`'s (libext2fs): a regular file is inline, empty, from
    /// its creation; a directory moves to a block once `i_block` is full.
    Mke2fs,
}

/// Regular files made this session and not yet written: the kernel's
/// `EXT4_STATE_MAY_INLINE_DATA`, which `__ext4_new_inode` sets on a new
/// inode and the first write ends. Such a file is created with an empty
/// extent tree and becomes inline only if its first write fits the inode.
/// Like the kernel's state it lives in memory: after a remount the first
/// write of an empty file goes to blocks. Bounded: the set starts over
/// when full, which only sends those files' first writes to blocks.
#[derive(Debug, Default)]
pub(crate) struct MayInline(parking_lot::Mutex<std::collections::HashSet<u32>>);

/// Files tracked at once.
const MAX_MAY_INLINE: usize = 65536;

impl MayInline {
    pub(crate) fn note(&self, ino: u32) {
        let mut set = self.0.lock();
        if set.len() >= MAX_MAY_INLINE {
            set.clear();
        }
        set.insert(ino);
    }

    pub(crate) fn contains(&self, ino: u32) -> bool {
        self.0.lock().contains(&ino)
    }

    /// Ends the state of `ino`: true when it was set.
    pub(crate) fn take(&self, ino: u32) -> bool {
        self.0.lock().remove(&ino)
    }
}

impl Filesystem {
    /// The `system.data` value (empty when absent).
    fn system_data<'a>(&self, inode: &'a Inode) -> Result<&'a [u8]> {
        let at = Location::Inode(inode.ino);
        if inode.record.len() <= 128 {
            return Ok(&[]);
        }
        let region = ibody_region(&inode.record, inode.raw.i_extra_isize.get()).map_err(|e| Error::format(at, e))?;
        let entries = parse_ibody(region).map_err(|e| Error::format(at, e))?;
        Ok(entries
            .into_iter()
            .find(|e| {
                e.index() == ext4kit_format::inline::SYSTEM_DATA_INDEX
                    && e.name == ext4kit_format::inline::SYSTEM_DATA_NAME
            })
            .and_then(|e| match e.value {
                XattrValue::Inline(v) => Some(v),
                XattrValue::EaInode { .. } => None,
            })
            .unwrap_or(&[]))
    }

    /// The inline body: `i_block` followed by the `system.data` value, up to
    /// `i_size` bytes. A size beyond what is stored reads as zeros past the
    /// stored bytes, as the kernel's inline read path zero-fills (mke2fs -d
    /// 1.47.0 leaves such files when a sparse file is copied in).
    pub(crate) fn inline_body(&self, inode: &Inode) -> Result<Vec<u8>> {
        let data = self.system_data(inode)?;
        let stored = (ext4kit_format::inline::I_BLOCK_SIZE + data.len()) as u64;
        content(&inode.raw.i_block, data, inode.size().min(stored))
            .map_err(|e| Error::format(Location::Inode(inode.ino), e))
    }

    pub(crate) fn for_each_inline_dir_entry(
        &self,
        dir: &Inode,
        mut f: impl FnMut(DirEntry) -> Result<bool>,
    ) -> Result<()> {
        let at = Location::Inode(dir.ino);
        let data = self.system_data(dir)?;
        let d = InlineDir::parse(&dir.raw.i_block, data).map_err(|e| Error::format(at, e))?;
        let dir_type = Some(ext4kit_format::inode::FileType::Directory);
        for (name, ino) in [(&b"."[..], dir.ino), (&b".."[..], d.parent)] {
            if !f(DirEntry {
                ino,
                name: name.to_vec(),
                file_type: dir_type,
            })? {
                return Ok(());
            }
        }
        for e in d.entries() {
            let e = e.map_err(|e| Error::format(at, e))?;
            if e.inode > self.geo.inodes_count {
                return Err(Error::inconsistent(
                    at,
                    format!("inline entry names inode {} beyond the inode count", e.inode),
                ));
            }
            if !self.is_encrypted(dir) {
                crate::dir::check_name(e.name, at, e.offset)?;
            }
            if !f(DirEntry {
                ino: e.inode,
                name: e.name.to_vec(),
                file_type: file_type_code(e.file_type),
            })? {
                return Ok(());
            }
        }
        Ok(())
    }
}
