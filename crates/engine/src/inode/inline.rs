//! Inline data (`inlinedata.rst`): bodies of small files and directories kept
//! in `i_block` and the `system.data` xattr. Pending: the xattr part.

use ext4kit_format::dir_entry::DirEntryIter;
use ext4kit_format::features::IncompatFeatures;

use crate::dir::DirEntry;
use crate::error::{Error, Location, Result};
use crate::fs::Filesystem;
use crate::inode::Inode;

impl Filesystem {
    /// The inline body: `i_block` followed by the `system.data` value.
    pub(crate) fn inline_body(&self, inode: &Inode) -> Result<Vec<u8>> {
        Ok(inode.raw.i_block.to_vec())
    }

    pub(crate) fn for_each_inline_dir_entry(
        &self,
        dir: &Inode,
        mut f: impl FnMut(DirEntry) -> Result<bool>,
    ) -> Result<()> {
        let body = self.inline_body(dir)?;
        let parent = u32::from_le_bytes([body[0], body[1], body[2], body[3]]);
        let at = Location::Inode(dir.ino);
        for (name, ino) in [(&b"."[..], dir.ino), (&b".."[..], parent)] {
            if !f(DirEntry {
                ino,
                name: name.to_vec(),
                file_type: Some(ext4kit_format::inode::FileType::Directory),
            })? {
                return Ok(());
            }
        }
        let filetype = self
            .geo
            .features
            .incompat
            .contains(IncompatFeatures::FILETYPE);
        let bs = self.block_size();
        for region in [&body[4..60], &body[60..]] {
            for e in DirEntryIter::new(region, bs, filetype) {
                let e = e.map_err(|e| Error::format(at, e))?;
                if e.inode == 0 {
                    continue;
                }
                if !f(DirEntry {
                    ino: e.inode,
                    name: e.name.to_vec(),
                    file_type: crate::dir::file_type_code(e.file_type),
                })? {
                    return Ok(());
                }
            }
        }
        Ok(())
    }
}
