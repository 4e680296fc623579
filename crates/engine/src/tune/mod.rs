//! `tune`: changing the tunable parameters of an unmounted image, the
//! subset of `tune2fs` that users reach for: `-O` feature changes that can
//! be made safely ([`features`] holds the table), `-L`, `-U`, `-e`, `-c`,
//! `-i`, `-E hash_seed=` and `-E encoding=` (`casefold`).
//!
//! Every request is validated whole before the first write; a refusal
//! names what is unsafe. The new contents of every block that changes
//! (superblock and its backups, group descriptors, and for a checksum
//! change every checksummed structure) are built in memory ([`rewrite`]),
//! then written as **one jbd2 transaction** through the image's own
//! journal ([`commit`]): a crash leaves either the old image or, once the
//! commit block is down, a journal that the kernel, e2fsck and ext4kit all
//! replay into the new one. Without a journal only superblock changes are
//! made, primary last, as e2fsprogs orders them.
//!
//! What this module does not own: the in-use checks of the device layer
//! (the image lock, kernel mounts: `crate::device::inuse`; MMP: `crate::mmp`),
//! which [`tune_image`] relies on through [`mounted`].

mod casefold;
pub(crate) mod commit;
mod csum;
mod dirs;
mod features;
mod groups;
mod itree;
mod journal;
mod mounted;
mod quota;
mod rewrite;
mod superblock;
mod uninit;

use ext4kit_format::superblock::{RawSuperblock, STATE_ERROR};

use crate::device::BlockDevice;
use crate::error::{Error, Result};
use crate::fs::{Filesystem, OpenOptions};

pub use casefold::EncodingEdit;
pub use features::tunable_features;
pub use journal::{add_journal, attach_external, remove_journal};
pub use mounted::{open_for_tune, tune_image};
pub use quota::{QuotaEdit, parse_quota_edit};
pub use superblock::{parse_interval, time_uuid};

/// How `-U` changes the file-system UUID.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UuidChange {
    /// All zeros (`clear`).
    Clear,
    /// A fresh version-4 UUID (`random`).
    Random,
    /// A fresh version-1 (time-based) UUID (`time`).
    Time,
    /// The UUID given.
    Set([u8; 16]),
}

/// `s_errors`: what the kernel does on an error (`-e`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorBehavior {
    /// `continue` (1).
    Continue = 1,
    /// `remount-ro` (2).
    RemountRo = 2,
    /// `panic` (3).
    Panic = 3,
}

/// One `-O` item: a feature name as tune2fs spells it, turned on or off
/// (`^name`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FeatureEdit {
    /// The name (`dir_index`, `metadata_csum`, `uninit_bg`, …).
    pub name: String,
    /// On (`name`) or off (`^name`).
    pub enable: bool,
}

/// What to change; `None` and empty leave a parameter alone.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TuneRequest {
    /// `-O`, applied in order.
    pub features: Vec<FeatureEdit>,
    /// `-L`: at most 16 bytes are kept, as tune2fs truncates.
    pub label: Option<String>,
    /// `-U`.
    pub uuid: Option<UuidChange>,
    /// `-e`.
    pub errors: Option<ErrorBehavior>,
    /// `-c`: stored as given; 0 means -1 (no mount-count check), as tune2fs does.
    pub max_mount_count: Option<i16>,
    /// `-i`, in seconds (0 turns time-based checks off).
    pub check_interval: Option<u32>,
    /// `-E hash_seed=UUID`.
    pub hash_seed: Option<[u8; 16]>,
    /// `-E encoding=…,encoding_flags=…` (see `tune::casefold`).
    pub encoding: EncodingEdit,
    /// `-Q`, applied in order (see `tune::quota`).
    pub quota: Vec<QuotaEdit>,
}

/// What [`tune`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TuneReport {
    /// Blocks whose contents changed (superblock backups included).
    pub blocks_changed: usize,
    /// True when the change went through the journal as one transaction.
    pub journaled: bool,
    /// Things the user should know (a truncated label, a feature turned on
    /// as a side effect, a change that was already in place).
    pub notes: Vec<String>,
}

/// Applies `req` to the file system on `dev`, which the caller has claimed
/// for writing ([`open_for_tune`] does for an image path).
///
/// The image is opened as a mount would (the journal is replayed, orphans
/// are finished, MMP is claimed: those writes happen first, as at any
/// mount), checked against the request, and changed in one atomic step.
/// Nothing of the tune is written when a refusal or an error comes first.
///
/// # Errors
/// - [`Error::InvalidArgument`] for a request that cannot be carried out,
///   naming the reason (a feature in use, a directory block without room
///   for its checksum, a journal too small for the rewrite, …).
/// - [`Error::Unsupported`] for features this command does not change.
/// - What opening and reading the image finds (corruption is located).
pub fn tune(dev: Box<dyn BlockDevice>, req: &TuneRequest) -> Result<TuneReport> {
    let opts = OpenOptions {
        count_mount: false,
        ..OpenOptions::default()
    };
    let fs = Filesystem::open(dev, opts)?;
    if let Some(why) = fs.read_only_reason() {
        return Err(Error::InvalidArgument(format!("the image cannot be written: {why}")));
    }
    if fs.session.in_use() {
        // Orphan cleanup committed at open: end that session first, so the
        // log is empty and the superblock clean before the tune starts.
        fs.close()?;
    }
    if let Some(enable) = itree::requested(&fs, req)? {
        return itree::run(fs, enable);
    }
    if let Some(want) = quota::requested(&fs, req)? {
        return quota::run(fs, want);
    }
    let plan = features::plan(&fs, req)?;
    let unchanged = plan.new.encode() == plan.old.encode();
    if !unchanged && plan.rewrite_inodes() && plan.old.s_state.get() & STATE_ERROR != 0 {
        return Err(Error::InvalidArgument(
            "the file system has recorded errors: run e2fsck -f before rewriting its metadata".into(),
        ));
    }
    if unchanged && !plan.rewrite_inodes() && !plan.rewrite_groups() {
        let mut notes = plan.notes;
        notes.push("nothing to change".into());
        return Ok(TuneReport {
            notes,
            ..TuneReport::default()
        });
    }
    let mut rw = rewrite::Rewrite::new(&fs);
    if plan.rewrite_inodes() {
        csum::rewrite_all(&mut rw, &plan)?;
    }
    let zero = if plan.init_groups {
        uninit::initialize(&mut rw, &plan)?
    } else {
        Vec::new()
    };
    features::run_rewrites(&mut rw, &plan, req)?;
    if plan.rewrite_groups() {
        groups::rewrite(&mut rw, &plan)?;
    }
    superblock::stage(&mut rw, &plan)?;
    let mut report = TuneReport {
        notes: plan.notes.clone(),
        ..TuneReport::default()
    };
    let changed = rw.changed();
    report.blocks_changed = changed.len();
    report.journaled = commit::commit(&fs, changed, &zero, &plan.old, &plan.new)?;
    Ok(report)
}

/// The superblock `tune` starts from and the one it writes, with what the
/// request needs beyond the superblock.
#[derive(Debug, Clone)]
pub(crate) struct Plan {
    pub(crate) old: RawSuperblock,
    pub(crate) new: RawSuperblock,
    /// Every checksummed structure is rewritten (metadata_csum on or off).
    pub(crate) csum: bool,
    /// Indexed directories lose `INDEX_FL` (`^dir_index`).
    pub(crate) clear_index: bool,
    /// Group descriptors are rewritten (their checksum scheme or seed changed).
    pub(crate) groups: bool,
    /// Group flags and `bg_itable_unused` are reset (a group checksum
    /// feature is turned on where none was, so they were never kept).
    pub(crate) reset_group_flags: bool,
    /// No group checksum remains: uninitialized groups are written out
    /// ([`uninit`]).
    pub(crate) init_groups: bool,
    pub(crate) notes: Vec<String>,
}

impl Plan {
    fn rewrite_inodes(&self) -> bool {
        self.csum || self.clear_index
    }

    fn rewrite_groups(&self) -> bool {
        self.groups || self.csum || self.init_groups
    }

    /// The checksum seed after the change.
    pub(crate) fn new_seed(&self) -> u32 {
        self.new.csum_seed()
    }
}
