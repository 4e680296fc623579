//! Resolving `/`-separated paths inside the image. Intermediate symbolic
//! links are followed (at most 40, as `MAXSYMLINKS`); the last component is
//! followed only when asked, like `stat` versus `lstat`.

use ext4kit_format::inode::FileType;

use crate::error::{Error, Result};
use crate::fs::Filesystem;
use crate::inode::{Inode, ROOT_INO};

const MAX_SYMLINKS: u32 = 40;
/// Longest symlink target read while resolving.
const MAX_LINK: u64 = 4096;

impl Filesystem {
    /// Resolves `path` (absolute or relative to the root) to its inode,
    /// without following a final symbolic link.
    ///
    /// # Errors
    /// [`Error::NotFound`], [`Error::NotDir`], [`Error::SymlinkLoop`], or corruption.
    pub fn resolve(&self, path: &[u8]) -> Result<Inode> {
        self.resolve_opts(path, false)
    }

    /// Resolves `path`, following a final symbolic link when `follow` is set.
    pub fn resolve_opts(&self, path: &[u8], follow: bool) -> Result<Inode> {
        self.reading("resolve_opts", || self.resolve_opts_unrecorded(path, follow))
    }

    fn resolve_opts_unrecorded(&self, path: &[u8], follow: bool) -> Result<Inode> {
        let mut budget = MAX_SYMLINKS;
        self.walk(self.inode(ROOT_INO)?, path, follow, &mut budget)
    }

    fn walk(&self, start: Inode, path: &[u8], follow: bool, budget: &mut u32) -> Result<Inode> {
        let mut cur = if path.first() == Some(&b'/') {
            self.inode(ROOT_INO)?
        } else {
            start
        };
        let parts: Vec<&[u8]> = path.split(|&b| b == b'/').filter(|p| !p.is_empty()).collect();
        for (i, part) in parts.iter().enumerate() {
            if !cur.is_dir() {
                return Err(Error::NotDir(String::from_utf8_lossy(path).into_owned()));
            }
            let parent = cur.clone();
            let ino = self.lookup(&cur, part).map_err(|e| match e {
                Error::NotFound(_) => Error::NotFound(String::from_utf8_lossy(path).into_owned()),
                other => other,
            })?;
            cur = self.inode(ino)?;
            let last = i + 1 == parts.len();
            if cur.file_type()? == FileType::Symlink && (!last || follow) {
                if *budget == 0 {
                    return Err(Error::SymlinkLoop(String::from_utf8_lossy(path).into_owned()));
                }
                *budget -= 1;
                let target = self.read_link(&cur)?;
                cur = self.walk(parent, &target, true, budget)?;
            }
        }
        Ok(cur)
    }

    /// The target of symbolic link `inode`: fast links live in `i_block`,
    /// others in the body (blocks or inline data).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] when `inode` is not a symbolic link; corruption.
    pub fn read_link(&self, inode: &Inode) -> Result<Vec<u8>> {
        self.reading("read_link", || self.read_link_unrecorded(inode))
    }

    fn read_link_unrecorded(&self, inode: &Inode) -> Result<Vec<u8>> {
        if inode.file_type()? != FileType::Symlink {
            return Err(Error::InvalidArgument(format!(
                "inode {} is not a symbolic link",
                inode.ino
            )));
        }
        let size = inode.size();
        let body = if self.is_fast_symlink(inode) {
            inode.raw.i_block[..size as usize].to_vec()
        } else {
            self.read_all_unlocked(inode, MAX_LINK)?
        };
        self.present_link(inode, body)
    }

    /// Fast symlinks keep the target in `i_block`: no data blocks (beyond an
    /// xattr block), no inline-data flag, and a target shorter than 60 bytes.
    /// Their `i_block` is text, not a mapping: nothing may walk it.
    pub fn is_fast_symlink(&self, inode: &Inode) -> bool {
        if inode.file_type().ok() != Some(ext4kit_format::inode::FileType::Symlink) {
            return false;
        }
        if inode.has_inline_data() || inode.size() >= 60 {
            return false;
        }
        let ea_sectors = if inode.raw.file_acl() != 0 {
            u64::from(self.geo.block_size / 512)
        } else {
            0
        };
        let huge = self
            .geo
            .features
            .ro_compat
            .contains(ext4kit_format::features::RoCompatFeatures::HUGE_FILE);
        inode
            .raw
            .blocks_512(huge, self.geo.block_size)
            .saturating_sub(ea_sectors)
            == 0
    }
}
