//! Moving an inline body out of the inode (`ext4_convert_inline_data`,
//! `ext4_convert_inline_data_nolock`) before a change the inline layout
//! cannot hold: the file's bytes or the directory's entries go to a block
//! (extent- or block-mapped), the `system.data` attribute and the
//! `INLINE_DATA` flag go away: what the kernel does once a body outgrows
//! the inode (changes that fit are made in place, `inline_write`,
//! `inline_dir`).

use ext4kit_format::dir_entry::{self, encode_entry, rec_len_for};
use ext4kit_format::extent::Extent;
use ext4kit_format::features::IncompatFeatures;
use ext4kit_format::inline::{DOTDOT_SIZE, I_BLOCK_SIZE, InlineDir};
use ext4kit_format::inode::{FileType, flags};

use crate::error::{Error, Location, Result};
use crate::inode::Inode;
use crate::inode::extent_write::{charge_blocks, init_root};
use crate::txn::Txn;

impl Txn<'_> {
    /// Inode `ino` ready for a change: read, and converted out of inline
    /// data (and written back) when it was inline.
    pub(crate) fn inode_for_change(&mut self, ino: u32) -> Result<Inode> {
        let mut inode = self.inode(ino)?;
        if inode.has_inline_data() && inode.file_type()? != FileType::Symlink {
            self.uninline(&mut inode)?;
            self.write_inode(&mut inode)?;
        }
        Ok(inode)
    }

    /// Converts `inode` from inline data to a mapped body.
    pub(crate) fn uninline(&mut self, inode: &mut Inode) -> Result<()> {
        let at = Location::Inode(inode.ino);
        let body = self.fs.inline_body(inode)?;
        let system_data = self.system_data_value(inode)?;
        let is_dir = inode.is_dir();
        let dir_block = if is_dir {
            Some(self.dir_block_from_inline(inode, &system_data)?)
        } else {
            None
        };
        self.drop_system_data(inode)?;
        inode.raw.i_flags.set(inode.raw.flags() & !flags::INLINE_DATA);
        inode.raw.i_block = [0; 60];
        if self.fs.geo.features.incompat.contains(IncompatFeatures::EXTENTS) {
            inode.raw.i_flags.set(inode.raw.flags() | flags::EXTENTS);
            init_root(&mut inode.raw);
        }
        match dir_block {
            Some(bytes) => {
                let block = self.first_dir_block(inode)?;
                self.put_block(block, bytes.into());
            }
            None => {
                let size = inode.size();
                self.write_range(inode, 0, &body)?;
                inode.raw.set_size(size);
            }
        }
        if inode.has_inline_data() {
            return Err(Error::inconsistent(at, "inline flag survived conversion"));
        }
        Ok(())
    }

    /// Allocates, maps and accounts block 0 of the empty body of directory
    /// `dir`; the caller fills the block. Its goal is any new file's
    /// ([`Txn::first_goal`], as the kernel's `ext4_ext_find_goal` falls
    /// back to `ext4_inode_to_goal_block`): with flex groups, the flex
    /// group's first group, right after the inode tables that stat and
    /// unlink read between directory blocks.
    pub(crate) fn first_dir_block(&mut self, dir: &mut Inode) -> Result<u64> {
        let goal = self.first_goal(dir);
        let (block, charge) = self.alloc_file_block(dir, 0, goal)?;
        self.map_run(
            dir,
            Extent {
                logical: 0,
                len: 1,
                physical: block,
                unwritten: false,
            },
        )?;
        charge_blocks(&mut dir.raw, charge, self.fs.geo.block_size);
        dir.raw.set_size(u64::from(self.fs.geo.block_size));
        Ok(block)
    }

    /// A directory block holding ".", ".." and the inline entries, their
    /// records copied as they are, the last one stretched to the end of
    /// the block (`ext4_finish_convert_inline_dir`).
    fn dir_block_from_inline(&self, dir: &Inode, system_data: &[u8]) -> Result<Vec<u8>> {
        let at = Location::Inode(dir.ino);
        let parsed = InlineDir::parse(&dir.raw.i_block, system_data).map_err(|e| Error::format(at, e))?;
        for e in parsed.entries() {
            e.map_err(|err| Error::format(at, err))?;
        }
        let bs = self.fs.block_size();
        let csum = self.fs.geo.features.metadata_csum();
        let used = if csum { bs - dir_entry::TAIL_SIZE } else { bs };
        let mut buf = vec![0u8; bs];
        let dots = 2 * rec_len_for(2);
        let region = dir.raw.i_block[DOTDOT_SIZE..].iter().chain(system_data).copied();
        let len = I_BLOCK_SIZE - DOTDOT_SIZE + system_data.len();
        if dots + len > used {
            return Err(Error::inconsistent(at, "inline directory does not fit one block"));
        }
        encode_entry(&mut buf, 0, dir.ino, rec_len_for(1), self.entry_ft(2), b".", bs);
        encode_entry(
            &mut buf,
            rec_len_for(1),
            parsed.parent,
            rec_len_for(2),
            self.entry_ft(2),
            b"..",
            bs,
        );
        for (d, b) in buf[dots..dots + len].iter_mut().zip(region) {
            *d = b;
        }
        let mut last = dots;
        let mut off = dots;
        while off < dots + len {
            let rec = usize::from(u16::from_le_bytes([buf[off + 4], buf[off + 5]]));
            if rec < 8 {
                return Err(Error::inconsistent(at, "inline directory record too short"));
            }
            last = off;
            off += rec;
        }
        let rec = u16::try_from(used - last).map_err(|_| Error::inconsistent(at, "directory record length"))?;
        buf[last + 4..last + 6].copy_from_slice(&rec.to_le_bytes());
        if csum {
            dir_entry::set_block_checksum(&mut buf, self.fs.inode_csum_seed(dir));
        }
        Ok(buf)
    }
}
