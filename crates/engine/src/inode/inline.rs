//! Inline data (`inlinedata.rst`): bodies of small files and directories kept
//! in `i_block` and the value of the `system.data` xattr in the inode body.

use ext4kit_format::inline::{InlineDir, content};
use ext4kit_format::xattr::{XattrValue, ibody_region, parse_ibody};

use crate::dir::{DirEntry, file_type_code};
use crate::error::{Error, Location, Result};
use crate::fs::Filesystem;
use crate::inode::Inode;

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
            crate::dir::check_name(e.name, at, e.offset)?;
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
