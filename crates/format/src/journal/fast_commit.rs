//! ext4 fast commits: the tag-length-value log in the journal's fast-commit
//! area (`s_num_fc_blks` blocks after the normal log, 256 when the field is
//! 0). Each record is `struct ext4_fc_tl` (`fc_tag`, `fc_len`, both
//! little-endian, unlike the rest of jbd2) followed by `fc_len` bytes of
//! value. A fast commit is the records after the previous `TAIL` (or the
//! area's `HEAD`) up to its own `TAIL`, whose `fc_crc` is crc32c, seeded 0,
//! over every record of that commit and the tail's own tag, length and
//! `fc_tid`. Only commits whose tail carries the tid of the first
//! transaction the log does not hold (`info->end_transaction`) and a good
//! crc count; the first bad tail ends the area.
//!
//! This module decodes and checks; applying the records is the engine's.
//! See `Documentation/filesystems/ext4/journal.rst` ("Fast commits") and
//! `fs/ext4/fast_commit.h`.

use crate::checksum::crc32c_raw;
use crate::error::{FormatError, Result};
use zerocopy::IntoBytes;

use crate::extent::Extent;

/// `EXT4_FC_TAG_ADD_RANGE`: an extent mapped into an inode.
pub const TAG_ADD_RANGE: u16 = 1;
/// `EXT4_FC_TAG_DEL_RANGE`: logical blocks unmapped from an inode.
pub const TAG_DEL_RANGE: u16 = 2;
/// `EXT4_FC_TAG_CREAT`: a new inode's first directory entry.
pub const TAG_CREAT: u16 = 3;
/// `EXT4_FC_TAG_LINK`: a directory entry added to an existing inode.
pub const TAG_LINK: u16 = 4;
/// `EXT4_FC_TAG_UNLINK`: a directory entry removed.
pub const TAG_UNLINK: u16 = 5;
/// `EXT4_FC_TAG_INODE`: the inode record as it should be.
pub const TAG_INODE: u16 = 6;
/// `EXT4_FC_TAG_PAD`: filler to the end of the block.
pub const TAG_PAD: u16 = 7;
/// `EXT4_FC_TAG_TAIL`: ends one fast commit (tid, crc).
pub const TAG_TAIL: u16 = 8;
/// `EXT4_FC_TAG_HEAD`: opens the area (features, tid).
pub const TAG_HEAD: u16 = 9;
/// `EXT4_FC_SUPPORTED_FEATURES`: no `fc_features` bit is defined.
pub const SUPPORTED_FEATURES: u32 = 0;
/// `JBD2_DEFAULT_FAST_COMMIT_BLOCKS`: the area's size when `s_num_fc_blks` is 0.
pub const DEFAULT_BLOCKS: u32 = 256;
/// Size of `struct ext4_fc_tl`.
pub const TL_SIZE: usize = 4;
/// `EXT4_NAME_LEN`: the longest name a dentry record may carry.
const NAME_MAX: usize = 255;
const STRUCT: &str = "ext4_fc_tl";

/// The value of a `CREAT`, `LINK` or `UNLINK` record
/// (`struct ext4_fc_dentry_info`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dentry {
    /// `fc_parent_ino`: the directory.
    pub parent: u32,
    /// `fc_ino`: the inode the entry names.
    pub ino: u32,
    /// `fc_dname`: the name, 1–255 bytes.
    pub name: Vec<u8>,
}

/// One decoded record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Tag {
    /// `ADD_RANGE`: `fc_ino` and the extent (`fc_ex`, an `ext4_extent`).
    AddRange {
        /// The inode.
        ino: u32,
        /// The mapping it gains.
        extent: Extent,
    },
    /// `DEL_RANGE`: `fc_ino`, `fc_lblk`, `fc_len`.
    DelRange {
        /// The inode.
        ino: u32,
        /// First logical block unmapped.
        lblk: u32,
        /// Blocks unmapped.
        len: u32,
    },
    /// `CREAT`.
    Create(Dentry),
    /// `LINK`.
    Link(Dentry),
    /// `UNLINK`.
    Unlink(Dentry),
    /// `INODE`: `fc_ino` and the raw record (`struct ext4_inode`, as many
    /// bytes as the writer's inode size covers).
    Inode {
        /// The inode.
        ino: u32,
        /// The record, little-endian as on disk.
        raw: Vec<u8>,
    },
    /// `PAD`.
    Pad,
    /// `TAIL`: `fc_tid`, `fc_crc`.
    Tail {
        /// Transaction the commit follows.
        tid: u32,
        /// Stored crc.
        crc: u32,
    },
    /// `HEAD`: `fc_features`, `fc_tid`.
    Head {
        /// Feature bits (none defined).
        features: u32,
        /// Transaction the area's commits follow.
        tid: u32,
    },
}

/// One record as found in a block: the tag, and the bytes the crc covers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record<'a> {
    /// The decoded record.
    pub tag: Tag,
    /// Byte offset of its `ext4_fc_tl` in the block.
    pub offset: usize,
    /// The bytes the commit's crc covers: tag, length and value, except
    /// for a tail, whose `fc_crc` (and padding) are left out.
    pub crc_bytes: &'a [u8],
}

fn le32(v: &[u8], at: usize) -> u32 {
    let mut b = [0u8; 4];
    if let Some(s) = v.get(at..at + 4) {
        b.copy_from_slice(s);
    }
    u32::from_le_bytes(b)
}

/// Decodes the value of record `tag` (`fc_len` bytes in `v`), checking its
/// length as `ext4_fc_value_len_isvalid` does.
fn decode(tag: u16, v: &[u8], offset: usize) -> Result<Tag> {
    let bad = |field| FormatError::invalid(STRUCT, field, offset + 2, v.len() as u64);
    let dentry = || -> Result<Dentry> {
        let name = v.get(8..).filter(|n| (1..=NAME_MAX).contains(&n.len()));
        let name = name.ok_or_else(|| bad("fc_len"))?.to_vec();
        Ok(Dentry {
            parent: le32(v, 0),
            ino: le32(v, 4),
            name,
        })
    };
    Ok(match tag {
        TAG_ADD_RANGE if v.len() == 16 => {
            let raw_len = u16::from_le_bytes([v[8], v[9]]);
            let (len, unwritten) = if raw_len > 32768 {
                (raw_len - 32768, true)
            } else {
                (raw_len, false)
            };
            let physical = (u64::from(u16::from_le_bytes([v[10], v[11]])) << 32) | u64::from(le32(v, 12));
            let extent = Extent {
                logical: le32(v, 4),
                len,
                physical,
                unwritten,
            };
            Tag::AddRange {
                ino: le32(v, 0),
                extent,
            }
        }
        TAG_DEL_RANGE if v.len() == 12 => Tag::DelRange {
            ino: le32(v, 0),
            lblk: le32(v, 4),
            len: le32(v, 8),
        },
        TAG_CREAT => Tag::Create(dentry()?),
        TAG_LINK => Tag::Link(dentry()?),
        TAG_UNLINK => Tag::Unlink(dentry()?),
        TAG_INODE if v.len() > 4 => Tag::Inode {
            ino: le32(v, 0),
            raw: v[4..].to_vec(),
        },
        TAG_PAD => Tag::Pad,
        TAG_TAIL if v.len() >= 8 => Tag::Tail {
            tid: le32(v, 0),
            crc: le32(v, 4),
        },
        TAG_HEAD if v.len() == 8 => Tag::Head {
            features: le32(v, 0),
            tid: le32(v, 4),
        },
        TAG_ADD_RANGE | TAG_DEL_RANGE | TAG_INODE | TAG_TAIL | TAG_HEAD => return Err(bad("fc_len")),
        t => return Err(FormatError::invalid(STRUCT, "fc_tag", offset, t.into())),
    })
}

/// The records of one fast-commit block, in order. A record whose header
/// does not fit ends the block; a record running past the block (a tail's
/// padding may reach its end exactly) or with a bad tag or length is an
/// error, after which the iterator stops.
pub fn records(block: &[u8]) -> impl Iterator<Item = Result<Record<'_>>> {
    let mut at = 0usize;
    let mut failed = false;
    std::iter::from_fn(move || {
        if failed || at + TL_SIZE > block.len() {
            return None;
        }
        let offset = at;
        let tag = u16::from_le_bytes([block[at], block[at + 1]]);
        let len = usize::from(u16::from_le_bytes([block[at + 2], block[at + 3]]));
        let end = offset + TL_SIZE + len;
        let r = match block.get(offset + TL_SIZE..end) {
            None => Err(FormatError::truncated(STRUCT, end, block.len()).at(0)),
            Some(v) => decode(tag, v, offset).map(|tag| {
                let covered = if matches!(tag, Tag::Tail { .. }) {
                    TL_SIZE + 4
                } else {
                    end - offset
                };
                Record {
                    tag,
                    offset,
                    crc_bytes: &block[offset..offset + covered],
                }
            }),
        };
        failed = r.is_err();
        at = end;
        Some(r)
    })
}

/// What the area holds for replay.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Area {
    /// The records of the valid fast commits, in order, `HEAD`, `PAD` and
    /// `TAIL` included (replay skips them).
    pub tags: Vec<Tag>,
    /// Valid fast commits (good tails).
    pub commits: u32,
    /// Blocks of the area the valid commits use.
    pub blocks: u32,
}

/// Scan state between records (`struct ext4_fc_replay_state`).
struct ScanState {
    out: Area,
    pending: Vec<Tag>,
    crc: u32,
}

/// What one record does to the scan.
enum Step {
    Go,
    Stop,
}

impl ScanState {
    /// The jbd2 callback returns an error when no commit is valid yet and
    /// stops the scan otherwise.
    fn fail(&self, e: FormatError) -> Result<Step> {
        if self.out.commits == 0 { Err(e) } else { Ok(Step::Stop) }
    }

    fn record(&mut self, r: Record<'_>, expected_tid: u32, block: u32) -> Result<Step> {
        self.crc = crc32c_raw(self.crc, r.crc_bytes);
        match r.tag {
            Tag::Head { features, tid } => {
                if features & !SUPPORTED_FEATURES != 0 {
                    let off = r.offset + TL_SIZE;
                    return Err(FormatError::invalid(
                        "ext4_fc_head",
                        "fc_features",
                        off,
                        features.into(),
                    ));
                }
                if tid != expected_tid {
                    return Ok(Step::Stop);
                }
                self.pending.push(r.tag);
            }
            Tag::Tail { tid, crc } => {
                let computed = std::mem::take(&mut self.crc);
                if tid != expected_tid || crc != computed {
                    let off = r.offset + TL_SIZE + 4;
                    return self.fail(FormatError::checksum("ext4_fc_tail", "fc_crc", off, crc, computed));
                }
                self.pending.push(r.tag);
                self.out.tags.append(&mut self.pending);
                self.out.commits += 1;
                self.out.blocks = block + 1;
            }
            tag => self.pending.push(tag),
        }
        Ok(Step::Go)
    }
}

/// Scans the fast-commit area (its blocks in order, from `j_fc_first`)
/// for the commits that follow transaction `expected_tid`, the first one
/// the log does not hold, as the kernel's `ext4_fc_replay_scan` does: the
/// area must open with a `HEAD` of that tid (otherwise it is stale and
/// empty); commits count up to the last good tail before the first bad
/// record or tail.
///
/// # Errors
/// A `HEAD` with feature bits this code does not know; a bad record or
/// tail before any good tail (jbd2 fails the recovery then).
pub fn scan<'a>(blocks: impl IntoIterator<Item = &'a [u8]>, expected_tid: u32) -> Result<Area> {
    let mut st = ScanState {
        out: Area::default(),
        pending: Vec::new(),
        crc: 0,
    };
    for (i, block) in blocks.into_iter().enumerate() {
        let i = u32::try_from(i).unwrap_or(u32::MAX);
        let mut recs = records(block).peekable();
        if i == 0
            && !matches!(
                recs.peek(),
                Some(Ok(Record {
                    tag: Tag::Head { .. },
                    ..
                }))
            )
        {
            return Ok(st.out);
        }
        for r in recs {
            let step = match r {
                Ok(r) => st.record(r, expected_tid, i)?,
                Err(e) => st.fail(e)?,
            };
            if let Step::Stop = step {
                return Ok(st.out);
            }
        }
    }
    Ok(st.out)
}

/// The bytes of record `tag` (`ext4_fc_tl` and value). A tail is
/// encoded with the `fc_crc` given and no padding.
pub fn encode(tag: &Tag) -> Vec<u8> {
    let mut v = Vec::new();
    let dentry = |v: &mut Vec<u8>, d: &Dentry| {
        v.extend_from_slice(&d.parent.to_le_bytes());
        v.extend_from_slice(&d.ino.to_le_bytes());
        v.extend_from_slice(&d.name);
    };
    let code = match tag {
        Tag::AddRange { ino, extent } => {
            v.extend_from_slice(&ino.to_le_bytes());
            v.extend_from_slice(extent.to_raw().as_bytes());
            TAG_ADD_RANGE
        }
        Tag::DelRange { ino, lblk, len } => {
            for x in [ino, lblk, len] {
                v.extend_from_slice(&x.to_le_bytes());
            }
            TAG_DEL_RANGE
        }
        Tag::Create(d) => {
            dentry(&mut v, d);
            TAG_CREAT
        }
        Tag::Link(d) => {
            dentry(&mut v, d);
            TAG_LINK
        }
        Tag::Unlink(d) => {
            dentry(&mut v, d);
            TAG_UNLINK
        }
        Tag::Inode { ino, raw } => {
            v.extend_from_slice(&ino.to_le_bytes());
            v.extend_from_slice(raw);
            TAG_INODE
        }
        Tag::Pad => TAG_PAD,
        Tag::Tail { tid, crc } => {
            v.extend_from_slice(&tid.to_le_bytes());
            v.extend_from_slice(&crc.to_le_bytes());
            TAG_TAIL
        }
        Tag::Head { features, tid } => {
            v.extend_from_slice(&features.to_le_bytes());
            v.extend_from_slice(&tid.to_le_bytes());
            TAG_HEAD
        }
    };
    let mut out = Vec::with_capacity(TL_SIZE + v.len());
    out.extend_from_slice(&code.to_le_bytes());
    out.extend_from_slice(&(v.len() as u16).to_le_bytes());
    out.extend_from_slice(&v);
    out
}

/// The fast-commit area's size in blocks (`jbd2_journal_get_num_fc_blks`):
/// `s_num_fc_blks`, or 256 when that is 0.
pub fn area_blocks(s_num_fc_blks: u32) -> u32 {
    if s_num_fc_blks == 0 {
        DEFAULT_BLOCKS
    } else {
        s_num_fc_blks
    }
}

#[cfg(test)]
#[path = "fast_commit_tests.rs"]
mod tests;
