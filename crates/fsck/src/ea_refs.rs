//! References to `ea_inode`s (`attributes.rst`, "Extended attribute
//! values in inodes"): an inode with EA_INODE_FL holds one xattr value;
//! its reference count is kept in `i_ctime` (high 32 bits) and
//! `i_version` (`l_i_version`, low 32 bits), its value's hash in `i_atime`.
//!
//! Pass 1 counts the entries naming each value inode ([`EaState::add_ref`]);
//! pass 4 ([`pass4`]) compares, as e2fsck's `check_ea_inode`: a referenced
//! value inode counts as linked once, and its stored count is set to the
//! references found (PR_4_EA_INODE_REF_COUNT); a flagged inode nothing
//! references and no directory names is a normal file whose flag is
//! cleared (PR_4_EA_INODE_SPURIOUS_FLAG), then reconnected as any
//! unattached inode.

use std::collections::BTreeMap;

use ext4kit_format::inode::flags;

use crate::inode_edit;
use crate::problem::{self as p, Finding};
use crate::state::Ctx;

/// What pass 1 learns of `ea_inode` values. Bounded by the xattr entries
/// scanned.
#[derive(Debug, Default)]
pub struct EaState {
    /// Value inode -> entries naming it.
    refs: BTreeMap<u32, u64>,
    /// Owning inode -> value inodes its xattrs hold (quota counts them
    /// with the owner); only nonzero counts.
    owned: BTreeMap<u32, u32>,
}

impl EaState {
    /// One more entry names value inode `inum`.
    pub fn add_ref(&mut self, inum: u32) {
        *self.refs.entry(inum).or_default() += 1;
    }

    /// Entries naming `inum`.
    pub fn refs(&self, inum: u32) -> u64 {
        self.refs.get(&inum).copied().unwrap_or(0)
    }

    /// Records that inode `owner` holds `n` value inodes.
    pub fn set_owned(&mut self, owner: u32, n: u32) {
        if n == 0 {
            self.owned.remove(&owner);
        } else {
            self.owned.insert(owner, n);
        }
    }

    /// Value inodes inode `owner` holds.
    pub fn owned(&self, owner: u32) -> u32 {
        self.owned.get(&owner).copied().unwrap_or(0)
    }
}

/// Pass 4 for inode `ino` before its link count is checked. A value inode
/// some entry names counts as linked once (`ctx.refs` becomes 1).
pub fn pass4(ctx: &mut Ctx, ino: u32) {
    let refs = ctx.ea.refs(ino);
    let flagged = ctx.ea_inode.get(u64::from(ino));
    if refs == 0 {
        if flagged && ctx.refs[ino as usize] == 0 {
            spurious_flag(ctx, ino);
        }
        return;
    }
    ctx.refs[ino as usize] = 1;
    let Ok(rec) = ctx.fs.inode_record(ino) else { return };
    let raw = crate::pass1::decode(&rec);
    let stored = (u64::from(raw.i_ctime.get()) << 32) | u64::from(raw.i_version_lo.get());
    // Lustre's old value inodes keep no count; their ctime equals atime.
    if stored == refs || raw.i_ctime.get() == raw.i_atime.get() {
        return;
    }
    let msg = format!("extended attribute inode {ino} ref count is {stored}, should be {refs}");
    if !ctx.fix(Finding::new(p::P4_EA_INODE_REF_COUNT, msg, "set it").ino(ino)) {
        return;
    }
    let res = inode_edit::update(&ctx.fs, ino, |r| {
        r.i_ctime.set((refs >> 32) as u32);
        r.i_version_lo.set(refs as u32);
    });
    if let Err(e) = res {
        ctx.not_fixed(e);
    }
}

/// PR_4_EA_INODE_SPURIOUS_FLAG: EA_INODE_FL on an inode nothing names.
fn spurious_flag(ctx: &mut Ctx, ino: u32) {
    let f = Finding::new(
        p::P4_EA_INODE_SPURIOUS_FLAG,
        format!("regular file inode {ino} has the EA_INODE flag set"),
        "clear the flag",
    );
    if !ctx.fix(f.ino(ino)) {
        return;
    }
    match inode_edit::update(&ctx.fs, ino, |r| r.i_flags.set(r.i_flags.get() & !flags::EA_INODE)) {
        Ok(()) => ctx.ea_inode.clear(u64::from(ino)),
        Err(e) => ctx.not_fixed(e),
    }
}
