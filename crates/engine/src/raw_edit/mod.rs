//! Raw edits, as debugfs's writing commands make them: a named field of
//! the superblock, an inode or a group descriptor set to a value
//! (`set_super_value`, `set_inode_field`, `set_bg`), bitmap bits set or
//! cleared without touching any count (`setb`/`freeb`, `seti`/`freei`),
//! and directory entries added or removed without touching link counts
//! (`link`/`unlink`). They exist to repair by hand and to build damaged
//! images for tests, so they check nothing about consistency — but each
//! is one journaled transaction, so a crash leaves the image before or
//! after it, and checksums are recomputed unless a checksum is what is set.
//!
//! The engine keeps the geometry it read at open: a superblock edit that
//! changes it (block counts, group sizes, features) takes effect for the
//! next open.
//!
//! Calls: the transaction layer (`txn`), bitmaps (`alloc::bitmap`),
//! directory entry insertion and removal (`dir`, `inode::inline_dir`),
//! and `ext4kit_format::fields` for the names.

mod bits;
mod names;

use ext4kit_format::fields::{self, Context, Field, Kind, Value};
use ext4kit_format::group_desc::RawGroupDesc;
use ext4kit_format::inode::RawInode;
use ext4kit_format::superblock::RawSuperblock;
use zerocopy::{FromBytes, IntoBytes};

use crate::error::{Error, Result};
use crate::fs::Filesystem;
use crate::txn::Txn;

/// The structure a field edit changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// The superblock (`set_super_value`).
    Superblock,
    /// An inode (`set_inode_field`).
    Inode(u32),
    /// A group descriptor (`set_bg`).
    Group(u32),
}

impl Target {
    fn table(self) -> &'static [Field] {
        match self {
            Target::Superblock => fields::SUPERBLOCK,
            Target::Inode(_) => fields::INODE,
            Target::Group(_) => fields::GROUP_DESC,
        }
    }
}

/// The field names `target` takes, in table order (`set_super_value -l`).
pub fn field_names(target: Target) -> Vec<(&'static str, usize)> {
    target.table().iter().map(|f| (f.name, f.count)).collect()
}

impl Filesystem {
    /// Sets field `spec` (`name` or `name[i]`) of `target` to `text`, read
    /// as debugfs reads it, in one transaction.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an unknown field, a bad value, or a
    /// checksum the commit would recompute anyway (superblock, descriptor,
    /// bitmap checksums: only `calc` is taken); what the commit meets.
    pub fn set_field(&self, target: Target, spec: &str, text: &str) -> Result<()> {
        let (field, idx) = fields::find(target.table(), spec)
            .ok_or_else(|| Error::InvalidArgument(format!("{spec}: no such field (list them with -l)")))?;
        let value = fields::parse(field, text, &context()).map_err(Error::InvalidArgument)?;
        self.check_target(target)?;
        let recomputed = field.kind == Kind::Checksum || field.name.ends_with("_csum");
        if recomputed && value != Value::Calc && !matches!(target, Target::Inode(_)) {
            return Err(Error::InvalidArgument(format!(
                "{spec}: recomputed at every commit; only `calc` can be given"
            )));
        }
        self.in_txn(|txn| match target {
            Target::Superblock => {
                let sb = txn.sb_mut();
                let mut bytes = sb.as_bytes().to_vec();
                field.store(&mut bytes, idx, &value);
                *sb = RawSuperblock::read_from_bytes(&bytes).map_err(|_| Error::InvalidArgument(spec.into()))?;
                Ok(())
            }
            Target::Inode(ino) => txn.set_inode_field(ino, field, idx, &value),
            Target::Group(g) => txn.set_group_field(g, field, idx, &value),
        })?;
        if target == Target::Superblock && field.name == "state" {
            // What unmount writes back is the state set here, not the one found at open.
            self.session.set_mount_state(self.sb.read().s_state.get());
        }
        Ok(())
    }

    /// The current value of field `spec` of `target`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for an unknown field; what reading meets.
    pub fn field_value(&self, target: Target, spec: &str) -> Result<Value> {
        let (field, idx) = fields::find(target.table(), spec)
            .ok_or_else(|| Error::InvalidArgument(format!("{spec}: no such field")))?;
        self.check_target(target)?;
        let bytes = match target {
            Target::Superblock => self.sb.read().as_bytes().to_vec(),
            Target::Inode(ino) => self.inode(ino)?.record.to_vec(),
            Target::Group(g) => self.group_desc(g)?.as_bytes()[..usize::from(self.geo.desc_size)].to_vec(),
        };
        Ok(field.load(&bytes, idx))
    }

    fn check_target(&self, target: Target) -> Result<()> {
        let geo = &self.geo;
        let bad = match target {
            Target::Superblock => None,
            Target::Inode(i) => (i == 0 || i > geo.inodes_per_group * geo.group_count)
                .then(|| format!("no inode {i} (1..={})", geo.inodes_per_group * geo.group_count)),
            Target::Group(g) => (g >= geo.group_count).then(|| format!("no group {g} (0..{})", geo.group_count)),
        };
        bad.map_or(Ok(()), |m| Err(Error::InvalidArgument(m)))
    }
}

impl Txn<'_> {
    /// The record is edited as stored (so `extra_isize` itself can be
    /// set), re-read, and written with its checksum; a checksum given as
    /// a number then overwrites the computed one in the table block.
    fn set_inode_field(&mut self, ino: u32, field: &Field, idx: usize, value: &Value) -> Result<()> {
        let mut inode = self.inode(ino)?;
        field.store(&mut inode.record, idx, value);
        let mut full = [0u8; 160];
        let n = inode.record.len().min(160);
        full[..n].copy_from_slice(&inode.record[..n]);
        inode.raw = RawInode::read_from_bytes(&full).map_err(|_| Error::InvalidArgument(field.name.into()))?;
        self.write_inode(&mut inode)?;
        if field.kind == Kind::Checksum && *value != Value::Calc {
            let slot = self.fs.inode_slot(ino)?;
            let len = inode.record.len();
            let buf = self.block_mut(slot.block, ino)?;
            field.store(&mut buf[slot.offset..slot.offset + len], idx, value);
        }
        Ok(())
    }

    fn set_group_field(&mut self, g: u32, field: &Field, idx: usize, value: &Value) -> Result<()> {
        let d = self.fs.group_desc(g)?;
        let ds = usize::from(self.fs.geo.desc_size);
        let mut bytes = d.as_bytes()[..ds.min(64)].to_vec();
        field.store(&mut bytes, idx, value);
        let d = RawGroupDesc::parse(&bytes, bytes.len()).map_err(|e| Error::InvalidArgument(e.to_string()))?;
        self.set_group(g, d);
        Ok(())
    }
}

fn context() -> Context {
    Context {
        now: crate::clock::now().secs,
        random: crate::mkfs::random_uuid(),
    }
}
