//! The journal's transactions as stored (`debugfs logdump`): from
//! `s_start` with `s_sequence`, each descriptor with its tags, revoke
//! records and commit blocks, until a block without the jbd2 magic, with
//! another sequence, or of an unknown type. Checksums are not checked: the
//! dump shows what is there, as debugfs does. At most one pass of the log.
//! Then the fast-commit area's records (`fast_commit.rst`), until one of an
//! older transaction or one that does not decode.

use ext4kit_format::journal::fast_commit::{self, Tag};
use ext4kit_format::journal::{BlockType, RawJournalHeader, descriptor, revoke};

use crate::error::Result;
use crate::fs::Filesystem;
use crate::journal::JournalSummary;
use crate::journal::log::Log;

/// The walk of the log.
#[derive(Debug, Clone)]
pub struct LogDump {
    /// The journal superblock.
    pub superblock: JournalSummary,
    /// Blocks read, in log order.
    pub blocks: Vec<LogBlock>,
    /// Why the walk stopped (`None`: the journal is empty, `s_start` 0).
    pub end: Option<LogEnd>,
    /// The fast-commit area's records, in order, while they belong to the
    /// transaction after the last commit or a newer one.
    pub fast_commits: Vec<Tag>,
}

/// One metadata block of the log.
#[derive(Debug, Clone)]
pub enum LogBlock {
    /// A descriptor: `(file-system block, journal block, t_flags)` per tag.
    Descriptor {
        /// Journal block of the descriptor.
        block: u32,
        /// `h_sequence`.
        sequence: u32,
        /// The tags and where their data lies in the log.
        tags: Vec<(u64, u32, u32)>,
    },
    /// A revoke block and the blocks it revokes.
    Revoke {
        /// Journal block.
        block: u32,
        /// `h_sequence`.
        sequence: u32,
        /// Revoked file-system blocks.
        revoked: Vec<u64>,
    },
    /// A commit block: its transaction is whole.
    Commit {
        /// Journal block.
        block: u32,
        /// `h_sequence`.
        sequence: u32,
    },
}

/// Where and why the walk stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogEnd {
    /// No jbd2 magic at this journal block.
    NoMagic(u32),
    /// A block of another transaction: `(block, found, expected)`.
    Sequence(u32, u32, u32),
    /// An unknown block type: `(block, h_blocktype)`.
    UnknownType(u32, u32),
    /// The walk went once round the log.
    Wrapped(u32),
}

impl Filesystem {
    /// Walks the journal from its start.
    ///
    /// # Errors
    /// No journal ([`crate::Error::InvalidArgument`]); a journal superblock
    /// that does not decode; an unmapped journal block.
    pub fn log_dump(&self) -> Result<LogDump> {
        let info = self.journal_info();
        if !info.present {
            return Err(crate::Error::InvalidArgument("the file system has no journal".into()));
        }
        let log = Log::open(self, info.inode)?;
        let superblock = crate::journal::info::summary(&log.sb);
        let (block, mut seq) = (log.sb.s_start.get(), log.sb.s_sequence.get());
        let mut out = LogDump {
            superblock,
            blocks: Vec::new(),
            end: None,
            fast_commits: Vec::new(),
        };
        if block != 0 {
            out.end = Some(walk_log(&log, block, &mut seq, &mut out.blocks)?);
        }
        out.fast_commits = fast_commits(&log, seq)?;
        Ok(out)
    }
}

/// Walks the log from `block` while blocks carry sequence `seq`, which it
/// advances past each commit.
fn walk_log(log: &Log<'_>, mut block: u32, seq: &mut u32, blocks: &mut Vec<LogBlock>) -> Result<LogEnd> {
    let mut budget = log.log_len();
    Ok(loop {
        if budget == 0 {
            break LogEnd::Wrapped(block);
        }
        let buf = log.read(block)?;
        let Ok(h) = RawJournalHeader::parse(&buf) else {
            break LogEnd::NoMagic(block);
        };
        let found = h.h_sequence.get();
        if found != *seq {
            break LogEnd::Sequence(block, found, *seq);
        }
        let here = block;
        block = log.next(block);
        budget -= 1;
        match h.block_type() {
            Some(BlockType::Descriptor) => {
                let mut tags = Vec::new();
                if let Ok((_, it)) = descriptor::tags(&buf, &log.params) {
                    for t in it.map_while(|t| t.ok()) {
                        tags.push((t.blocknr, block, t.flags));
                        block = log.next(block);
                        budget = budget.saturating_sub(1);
                    }
                }
                blocks.push(LogBlock::Descriptor {
                    block: here,
                    sequence: found,
                    tags,
                });
            }
            Some(BlockType::Revoke) => {
                let revoked = revoke::revoked(&buf, &log.params)
                    .map(|(_, r)| r.collect())
                    .unwrap_or_default();
                blocks.push(LogBlock::Revoke {
                    block: here,
                    sequence: found,
                    revoked,
                });
            }
            Some(BlockType::Commit) => {
                blocks.push(LogBlock::Commit {
                    block: here,
                    sequence: found,
                });
                *seq = seq.wrapping_add(1);
            }
            _ => break LogEnd::UnknownType(here, h.h_blocktype.get()),
        }
    })
}

/// The fast-commit records after the log (as debugfs's `dump_fc_block`):
/// a head or tail of a transaction older than `seq` ends them, and so does
/// the block holding a record that does not decode.
fn fast_commits(log: &Log<'_>, seq: u32) -> Result<Vec<Tag>> {
    let mut out = Vec::new();
    for block in log.fc.clone() {
        let buf = log.read(block)?;
        let mut broken = false;
        for r in fast_commit::records(&buf) {
            let Ok(r) = r else {
                broken = true;
                break;
            };
            let old = matches!(r.tag, Tag::Head { tid, .. } | Tag::Tail { tid, .. } if tid < seq);
            out.push(r.tag);
            if old {
                return Ok(out);
            }
        }
        if broken {
            break;
        }
    }
    Ok(out)
}
