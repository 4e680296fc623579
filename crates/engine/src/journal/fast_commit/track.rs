//! What the running transaction changed that a fast commit must say, as
//! the kernel tracks it (`ext4_fc_track_create`, `_link`, `_unlink`,
//! `ext4_fc_mark_ineligible`): the name changes in the order they were
//! made, and whether anything happened that a fast commit cannot carry.
//!
//! Each operation notes its changes in its [`Txn`] ([`FcNotes`]); the
//! publish hands them to the running transaction ([`FcPending`]), where a
//! fast commit takes the names and inodes changed since the previous one.
//! An ineligible change holds until the transaction's full commit.

use std::collections::HashSet;

use ext4kit_format::journal::fast_commit::{Dentry, Tag};

use crate::inode::Inode;
use crate::txn::Txn;

/// A name change, in the order made (`struct ext4_fc_dentry_update`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum NameChange {
    /// `EXT4_FC_TAG_CREAT`: a new inode got its first name.
    Create(Dentry),
    /// `EXT4_FC_TAG_LINK`: an inode got one more name.
    Link(Dentry),
    /// `EXT4_FC_TAG_UNLINK`: an inode that keeps other names lost one.
    Unlink(Dentry),
}

impl NameChange {
    pub(crate) fn dentry(&self) -> &Dentry {
        match self {
            Self::Create(d) | Self::Link(d) | Self::Unlink(d) => d,
        }
    }

    pub(crate) fn tag(&self) -> Tag {
        match self {
            Self::Create(d) => Tag::Create(d.clone()),
            Self::Link(d) => Tag::Link(d.clone()),
            Self::Unlink(d) => Tag::Unlink(d.clone()),
        }
    }
}

/// One operation's notes, published with its blocks.
#[derive(Debug, Default)]
pub(crate) struct FcNotes {
    names: Vec<NameChange>,
    ineligible: Option<&'static str>,
}

/// The running transaction's notes (`s_fc_dentry_q`, `s_fc_q`,
/// `EXT4_MF_FC_INELIGIBLE`).
#[derive(Debug, Default)]
pub(crate) struct FcPending {
    /// Name changes no fast commit has carried yet.
    pub(crate) names: Vec<NameChange>,
    /// Inodes written since the last fast commit.
    pub(crate) inodes: HashSet<u32>,
    /// Directories whose entries this transaction changed through noted
    /// names: their blocks may be dirty (a replay re-adds the names).
    pub(crate) dirs: HashSet<u32>,
    /// Why the transaction needs a full commit, once anything said so.
    pub(crate) ineligible: Option<&'static str>,
}

impl FcPending {
    /// Takes on an operation's notes and the inodes it wrote.
    pub(crate) fn note(&mut self, notes: FcNotes, inodes: &[u32]) {
        self.inodes.extend(inodes);
        for n in &notes.names {
            self.dirs.insert(n.dentry().parent);
        }
        self.names.extend(notes.names);
        self.ineligible = self.ineligible.or(notes.ineligible);
    }

    /// Takes on `later`'s notes too (a failed commit's go back under the
    /// running transaction's).
    pub(crate) fn absorb(&mut self, later: FcPending) {
        self.names.extend(later.names);
        self.inodes.extend(later.inodes);
        self.dirs.extend(later.dirs);
        // The failed commit's names came first: their order is lost.
        self.ineligible = self.ineligible.or(later.ineligible).or(Some("failed commit"));
    }

    /// A fast commit carried the names and inodes so far.
    pub(crate) fn carried(&mut self) {
        self.names.clear();
        self.inodes.clear();
    }
}

impl Txn<'_> {
    /// The next fsync must be a full commit (`ext4_fc_mark_ineligible`).
    pub(crate) fn fc_ineligible(&mut self, why: &'static str) {
        self.fc.ineligible = self.fc.ineligible.or(Some(why));
    }

    /// Notes a name change made in directory `before` (as it was before
    /// the change) that left it as `after`. A directory that grew, shrank
    /// or holds its entries inline, or in an itree, makes the transaction
    /// ineligible: a replay re-adds names into the blocks on disk, with
    /// the layout the last full commit left, and keeps the directory's
    /// mapping.
    pub(crate) fn fc_name(&mut self, before: &Inode, after: &Inode, change: NameChange) {
        let itree = after.raw.flags() & ext4kit_format::itree::ITREE_FL != 0;
        if before.size() != after.size() || after.has_inline_data() || before.has_inline_data() || itree {
            self.fc_ineligible("directory layout change");
            return;
        }
        self.fc.names.push(change);
    }
}

/// `Dentry` of `name` in `parent` naming `ino`.
pub(crate) fn dentry(parent: u32, ino: u32, name: &[u8]) -> Dentry {
    Dentry {
        parent,
        ino,
        name: name.to_vec(),
    }
}
