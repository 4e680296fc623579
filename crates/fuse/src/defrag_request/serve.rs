//! The server's side of a defrag request: checks, then one call into the
//! engine, which holds every rule about what moves and how.

use ext4kit_engine::DefragOptions;
use fuser::{Errno, INodeNo};

use crate::adapter::Caller;

use super::{encode_reply, reply_len};
use crate::adapter::Ext4Fuse;
use crate::options::IdMap;

impl Ext4Fuse {
    /// Answers a read, of size `size`, of the defrag request for `ino`
    /// with `opts`. A size query (`size == 0`) gets the reply's length
    /// and does nothing; a buffer too short for the reply is ERANGE before
    /// anything moves, so the caller never loses an outcome.
    ///
    /// The file may be open and written meanwhile: the engine holds its
    /// inode lock for the run and writes back the file's delayed blocks
    /// first, and since the moved blocks hold the same bytes, the pages
    /// the kernel caches stay valid. Only the attributes are dropped from
    /// the kernel's cache: `st_blocks` counts extent-tree blocks, which a
    /// defrag frees.
    pub(crate) fn defrag_request(
        &self,
        req: &Caller,
        ino: INodeNo,
        opts: DefragOptions,
        size: u32,
    ) -> Result<Vec<u8>, Errno> {
        let len = reply_len();
        if size == 0 {
            return Ok(vec![0; len]);
        }
        if (size as usize) < len {
            return Err(Errno::ERANGE);
        }
        // Dry runs too: the plan is made in a transaction, as offline.
        self.writable()?;
        let e4 = self.ino(ino)?;
        self.may_defrag(req, e4)?;
        if !opts.dry_run {
            self.check_space()?;
        }
        let out = self.fs().defrag_file(e4, &opts).map_err(|e| self.errno(e))?;
        if out.blocks_moved > 0 && !opts.dry_run {
            self.drop_cached_attrs(ino);
        }
        Ok(encode_reply(&out))
    }

    /// Root or the file's owner, as `e4defrag` allows (the kernel checked
    /// only read permission for a `getxattr`; `EXT4_IOC_MOVE_EXT` wants
    /// the file open for writing).
    fn may_defrag(&self, req: &Caller, ino: u32) -> Result<(), Errno> {
        if req.uid() == 0 {
            return Ok(());
        }
        let owner = self.inode(ino)?.raw.uid();
        if owner == IdMap::to_image(self.cfg.uid_map, req.uid()) {
            Ok(())
        } else {
            Err(Errno::EACCES)
        }
    }

    /// Drops the kernel's cached attributes of `ino`, not its pages
    /// (a negative offset to `FUSE_NOTIFY_INVAL_INODE`).
    fn drop_cached_attrs(&self, ino: INodeNo) {
        if let Some(n) = self.notifier.get()
            && let Err(e) = n.inval_inode(ino, -1, 0)
        {
            log::debug!("ext4kit: invalidating attributes of {ino:?}: {e}");
        }
    }
}
