//! Writing metadata back during a repair run: blocks, inode records with
//! their checksums, and the superblock and descriptor table with every
//! copy the layout keeps (`blockgroup.rst`, "Redundancy"). The writes go
//! to the device the run was given, which for a repair is the in-memory
//! [`crate::repair::overlay::Overlay`]; only the commit touches the image.
//!
//! The superblock and descriptors live in [`RawFs`] while the passes run;
//! a fix changes them there and marks them dirty, and [`RawFs::flush_meta`]
//! writes them once at the end of the run.

use std::io;

use ext4kit_format::features::IncompatFeatures;
use ext4kit_format::inode::set_inode_checksum;
use ext4kit_format::superblock::SUPERBLOCK_OFFSET;

use crate::fs::RawFs;

impl RawFs<'_> {
    /// Writes block `blk` (which must lie inside the file system).
    pub fn write_block(&self, blk: u64, data: &[u8]) -> io::Result<()> {
        if blk >= self.geo.blocks_count || data.len() != self.bs() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("refusing to write block {blk} ({} bytes)", data.len()),
            ));
        }
        self.dev.write_at(blk * u64::from(self.geo.block_size), data)
    }

    /// Writes the record of inode `ino`, with its checksum set when the
    /// file system has metadata_csum (`ext4_inode_csum_set`).
    pub fn write_inode_record(&self, ino: u32, rec: &mut [u8]) -> io::Result<()> {
        if self.geo.features.metadata_csum() {
            set_inode_checksum(rec, self.seed, ino)
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))?;
        }
        let (g, idx) = self
            .geo
            .inode_location(ino)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, format!("inode {ino} out of range")))?;
        let table = self
            .groups
            .get(g as usize)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no descriptor"))?
            .inode_table();
        let byte = u64::from(idx) * u64::from(self.geo.inode_size);
        let blk = table + byte / u64::from(self.geo.block_size);
        let mut b = self.read_block(blk)?;
        let off = (byte % u64::from(self.geo.block_size)) as usize;
        let n = rec.len().min(usize::from(self.geo.inode_size));
        b[off..off + n].copy_from_slice(&rec[..n]);
        self.write_block(blk, &b)
    }

    /// Writes what the run changed in the superblock and descriptors: the
    /// primary copies, and every backup when [`RawFs::dirty_backups`] asks.
    pub fn flush_meta(&mut self) -> io::Result<()> {
        if self.dirty_groups || self.dirty_backups {
            self.write_descriptors()?;
        }
        if self.dirty_sb || self.dirty_backups {
            self.write_superblocks()?;
        }
        self.dirty_sb = false;
        self.dirty_groups = false;
        self.dirty_backups = false;
        Ok(())
    }

    /// The superblock as group `g`'s copy records it.
    fn superblock_copy(&self, g: u32) -> [u8; 1024] {
        let mut sb = self.sb;
        sb.s_block_group_nr.set(u16::try_from(g).unwrap_or(u16::MAX));
        if self.geo.features.metadata_csum() {
            sb.set_checksum();
        }
        sb.encode()
    }

    fn write_superblocks(&self) -> io::Result<()> {
        self.dev.write_at(SUPERBLOCK_OFFSET, &self.superblock_copy(0))?;
        if !self.dirty_backups {
            return Ok(());
        }
        for g in 1..self.geo.group_count {
            if self.has_super(g) {
                let at = self.geo.group_first_block(g) * u64::from(self.geo.block_size);
                self.dev.write_at(at, &self.superblock_copy(g))?;
            }
        }
        Ok(())
    }

    /// Descriptor table block `i`, checksums recomputed.
    fn descriptor_block(&mut self, i: u64) -> Vec<u8> {
        let ds = usize::from(self.geo.desc_size);
        let dpb = u64::from(self.geo.descs_per_block());
        let mut buf = vec![0u8; self.bs()];
        let f = self.geo.features;
        for j in 0..dpb {
            let g = i * dpb + j;
            let Some(gd) = self.groups.get_mut(g as usize) else {
                break;
            };
            let c = gd.compute_checksum(&f, self.seed, &self.sb.s_uuid, g as u32, ds);
            gd.bg_checksum.set(c);
            gd.encode_into(&mut buf[j as usize * ds..(j as usize + 1) * ds]);
        }
        buf
    }

    /// Where copies of descriptor block `i` live: the primary first, then
    /// (with backups) each backup group's copy.
    fn descriptor_homes(&self, i: u64, backups: bool) -> Vec<u64> {
        let first_meta = u64::from(self.sb.s_first_meta_bg.get());
        let meta_bg = self.geo.features.incompat.contains(IncompatFeatures::META_BG);
        if meta_bg && i >= first_meta {
            let dpb = u64::from(self.geo.descs_per_block());
            let first = i * dpb;
            let mut gs = vec![first];
            if backups {
                gs.extend([first + 1, first + dpb - 1]);
            }
            return gs
                .into_iter()
                .filter(|&g| g < u64::from(self.geo.group_count))
                .map(|g| {
                    let g = g as u32;
                    self.group_base(g) + u64::from(self.has_super(g))
                })
                .collect();
        }
        let mut out = vec![self.group_base(0) + 1 + i];
        if backups {
            for g in 1..self.geo.group_count {
                if self.has_super(g) {
                    out.push(self.geo.group_first_block(g) + 1 + i);
                }
            }
        }
        out
    }

    fn write_descriptors(&mut self) -> io::Result<()> {
        for i in 0..self.gdt_blocks() {
            let buf = self.descriptor_block(i);
            for home in self.descriptor_homes(i, self.dirty_backups) {
                self.write_block(home, &buf)?;
            }
        }
        Ok(())
    }
}
