//! Adding itrees to, and removing them from, every directory of an image:
//! the engine side of `ext4kit tune -O itree` and `-O ^itree`.
//!
//! Each directory converts in one transaction (its nodes, the link and its
//! inode flag together), and the feature bit changes in a transaction of
//! its own: set before the first directory on the way in, cleared after
//! the last on the way out. An interrupted run therefore leaves an image in
//! which some directories have an itree and the feature is on, which is a
//! valid itree image; running the same command again finishes the job.
//! A directory whose conversion exceeds the journal is written in place,
//! as every oversized transaction is.

use ext4kit_format::features::RoCompatFeatures;
use ext4kit_format::htree::DxRoot;
use ext4kit_format::inode::{FileType, flags};
use ext4kit_format::itree::{LeafEntry, root_limit_with_link};

use super::has_itree;
use crate::error::{Error, Location, Result};
use crate::fs::Filesystem;
use crate::inode::Inode;
use crate::txn::Txn;

/// What a conversion did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ItreeConversion {
    /// Directories given (or relieved of) an itree.
    pub directories: u64,
    /// Names those itrees held.
    pub names: u64,
    /// Indexed directories left without one: their htree root uses the two
    /// slots the link needs (a root within two entries of full).
    pub skipped_full_root: u64,
}

impl Filesystem {
    /// Sets the `itree` feature and gives every indexed directory an itree.
    ///
    /// # Errors
    /// [`Error::ReadOnly`]; corruption met on the way (directories done so
    /// far keep their trees).
    pub fn itree_add_all(&self) -> Result<ItreeConversion> {
        self.in_txn(|txn| {
            let ro = txn.superblock().s_feature_ro_compat.get() | RoCompatFeatures::ITREE.0;
            txn.sb_mut().s_feature_ro_compat.set(ro);
            Ok(())
        })?;
        let mut out = ItreeConversion::default();
        for ino in self.directories()? {
            match self.in_txn(|txn| txn.itree_add_to(ino))? {
                Added::Built(names) => {
                    out.directories += 1;
                    out.names += names;
                }
                Added::FullRoot => out.skipped_full_root += 1,
                Added::Nothing => {}
            }
        }
        Ok(out)
    }

    /// Frees every directory's itree, then clears the `itree` feature: the
    /// image is again one any kernel and e2fsck accept.
    ///
    /// # Errors
    /// As for [`Filesystem::itree_add_all`].
    pub fn itree_remove_all(&self) -> Result<ItreeConversion> {
        let mut out = ItreeConversion::default();
        for ino in self.directories()? {
            let names = self.in_txn(|txn| {
                let mut dir = txn.inode_for_change(ino)?;
                if !has_itree(&dir) {
                    return Ok(None);
                }
                let names = txn.fs.itree_stats(&dir).map(|s| s.entries).unwrap_or(0);
                txn.itree_free(&mut dir)?;
                txn.write_inode(&mut dir)?;
                Ok(Some(names))
            })?;
            if let Some(n) = names {
                out.directories += 1;
                out.names += n;
            }
        }
        self.in_txn(|txn| {
            let ro = txn.superblock().s_feature_ro_compat.get() & !RoCompatFeatures::ITREE.0;
            txn.sb_mut().s_feature_ro_compat.set(ro);
            Ok(())
        })?;
        Ok(out)
    }

    /// Every directory reachable from the root, each once.
    fn directories(&self) -> Result<Vec<u32>> {
        let mut seen = std::collections::HashSet::new();
        let mut todo = vec![crate::inode::ROOT_INO];
        let mut out = Vec::new();
        while let Some(ino) = todo.pop() {
            if !seen.insert(ino) {
                continue;
            }
            out.push(ino);
            let dir = self.inode(ino)?;
            self.for_each_dir_entry(&dir, |e| {
                if e.name == b"." || e.name == b".." {
                    return Ok(true);
                }
                let is_dir = match e.file_type {
                    Some(t) => t == FileType::Directory,
                    None => self.inode(e.ino)?.is_dir(),
                };
                if is_dir {
                    todo.push(e.ino);
                }
                Ok(true)
            })?;
        }
        Ok(out)
    }
}

enum Added {
    Built(u64),
    FullRoot,
    Nothing,
}

impl Txn<'_> {
    fn itree_add_to(&mut self, ino: u32) -> Result<Added> {
        let dir = self.inode(ino)?;
        if has_itree(&dir) || !dir.raw.has_flag(flags::INDEX) || dir.has_inline_data() {
            return Ok(Added::Nothing);
        }
        let params = self.dx_params();
        let root_phys = self.phys_of(&dir, 0)?;
        let buf = self.block(root_phys, ino)?;
        let at = Location::Block {
            block: root_phys,
            inode: ino,
        };
        let root = DxRoot::parse(&buf, &params).map_err(|e| Error::format(at, e))?;
        if root.entries.len() > usize::from(root_limit_with_link(params.block_size, params.metadata_csum)) {
            return Ok(Added::FullRoot);
        }
        let code = root.header.info.hash_version;
        let names = self.itree_names(&dir, code)?;
        let n = names.len() as u64;
        let mut dir = self.inode_for_change(ino)?;
        self.itree_build(&mut dir, names)?;
        self.write_inode(&mut dir)?;
        Ok(Added::Built(n))
    }

    /// Every name of `dir` but "." and "..", hashed as its htree hashes.
    fn itree_names(&self, dir: &Inode, code: u8) -> Result<Vec<LeafEntry>> {
        let mut out = Vec::new();
        self.fs.for_each_dir_entry(dir, |e| {
            if e.name != b"." && e.name != b".." {
                let hash = self.name_hash(dir, &e.name, code)?;
                let file_type = e.file_type.map_or(0, |t| t.dirent_code());
                out.push(LeafEntry {
                    ino: e.ino,
                    hash,
                    file_type,
                    name: e.name,
                });
            }
            Ok(true)
        })?;
        Ok(out)
    }
}
