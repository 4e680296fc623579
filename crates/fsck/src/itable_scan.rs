//! Pass 1's inode-table reader on every core (issue 17).
//!
//! A check reads every inode table a group's flags do not rule out
//! (`bg_itable_unused`, INODE_UNINIT): with a cold cache and the flags
//! cleared that is most of the work, and most records are never-used
//! zeros. Worker threads read the tables in pieces of [`PIECE_BLOCKS`]
//! blocks (one read each, not one per block), and look at each record
//! once: all zero or not, and whether its checksum (`i_checksum_lo/hi`,
//! crc32c over the record) matches. Pass 1 then checks the records in
//! inode order on its own thread, exactly as the serial scan does, so
//! findings and their order do not depend on the thread count; only the
//! reading and these two verdicts move.
//!
//! Worker `w` takes pieces `w`, `w + n`, `w + 2n`… and hands them over
//! through its own bounded channel, so the consumer receives piece `i`
//! from channel `i % n`: the order is fixed, and at most
//! `n × (QUEUE + 1)` pieces (a few MiB) are in memory at once. When the
//! consumer stops early (cancel) it drops the receivers and every worker's
//! next send fails, which ends it.
//!
//! Repair runs keep the serial scan: a repair may write an inode record a
//! worker has already read.

use std::sync::mpsc::{Receiver, SyncSender, sync_channel};

use ext4kit_engine::BlockDevice;
use ext4kit_format::inode::verify_inode_checksum;

/// Table blocks per piece: 256 KiB with 4 KiB blocks.
pub const PIECE_BLOCKS: u64 = 64;
/// Pieces each worker may have read ahead of the consumer.
const QUEUE: usize = 4;

/// The thread count for [`crate::Options::threads`]: 0 is every core.
pub fn threads(asked: usize) -> usize {
    match asked {
        0 => std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get),
        n => n,
    }
}

/// What a worker learns of one record without the checker's state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Record {
    /// Every byte is zero: never used.
    pub zero: bool,
    /// Not zero, `metadata_csum` is on, and the checksum does not match.
    pub csum_bad: bool,
}

impl Record {
    /// Looks at record `rec` of inode `ino`.
    pub fn examine(rec: &[u8], ino: u32, csum: Option<u32>) -> Self {
        let zero = all_zero(rec);
        let csum_bad = !zero && csum.is_some_and(|seed| verify_inode_checksum(rec, seed, ino).is_err());
        Self { zero, csum_bad }
    }
}

/// Whether a record is all zeros: an OR over the whole record, which the
/// compiler vectorizes, is several times faster than stopping at the
/// first set byte (most records of a table read with the flags cleared
/// are zero).
pub fn all_zero(rec: &[u8]) -> bool {
    rec.iter().fold(0u8, |acc, &b| acc | b) == 0
}

/// A run of one group's inode table to read.
#[derive(Debug, Clone, Copy)]
pub struct Span {
    /// The group.
    pub group: u32,
    /// Index in the table of the first block.
    pub first: u64,
    /// Blocks.
    pub blocks: u64,
    /// Records of the group the scan looks at (the rest are not examined).
    pub limit: u32,
}

/// A span as read.
#[derive(Debug)]
pub struct Piece {
    /// The blocks, back to back; a block that could not be read is zeros.
    pub data: Vec<u8>,
    /// Per block: why it could not be read.
    pub failed: Vec<Option<String>>,
    /// Per record of the span (up to the group's limit).
    pub records: Vec<Record>,
}

/// How workers read: the device and the geometry they need, copied out
/// of the checker's state so that pass 1 keeps it to itself.
#[derive(Clone, Copy)]
pub struct Source<'a> {
    /// The image.
    pub dev: &'a dyn BlockDevice,
    /// `s_blocks_count`.
    pub blocks_count: u64,
    /// Block size in bytes.
    pub block_size: u32,
    /// `s_inode_size`.
    pub inode_size: u16,
    /// `s_inodes_per_group`.
    pub inodes_per_group: u32,
    /// The checksum seed when `metadata_csum` is on.
    pub csum: Option<u32>,
}

/// Runs `consume` with an iterator over `spans`' pieces, in order, read by
/// `n` workers.
pub fn run<R>(src: Source<'_>, tables: &[u64], spans: &[Span], n: usize, consume: impl FnOnce(Pieces) -> R) -> R {
    let n = n.clamp(1, spans.len().max(1));
    std::thread::scope(|s| {
        let mut rxs = Vec::with_capacity(n);
        for w in 0..n {
            let (tx, rx) = sync_channel(QUEUE);
            rxs.push(rx);
            s.spawn(move || work(src, tables, spans, w, n, &tx));
        }
        consume(Pieces { rxs, next: 0 })
    })
}

/// The pieces, in span order.
pub struct Pieces {
    rxs: Vec<Receiver<Piece>>,
    next: usize,
}

impl Iterator for Pieces {
    type Item = Piece;
    fn next(&mut self) -> Option<Piece> {
        let rx = &self.rxs[self.next % self.rxs.len()];
        self.next += 1;
        rx.recv().ok()
    }
}

fn work(src: Source<'_>, tables: &[u64], spans: &[Span], w: usize, n: usize, tx: &SyncSender<Piece>) {
    for span in spans.iter().skip(w).step_by(n) {
        let table = tables[span.group as usize];
        if tx.send(read(&src, table, span)).is_err() {
            return;
        }
    }
}

/// Reads `span` of the table starting at block `table` in one request
/// when every block lies inside the file system and the device, else
/// block by block, and examines its records.
fn read(src: &Source<'_>, table: u64, span: &Span) -> Piece {
    let bs = src.block_size as usize;
    let mut data = vec![0u8; span.blocks as usize * bs];
    let mut failed = vec![None; span.blocks as usize];
    let start = table + span.first;
    let end_byte = (start + span.blocks) * u64::from(src.block_size);
    let whole = start + span.blocks <= src.blocks_count && end_byte <= src.dev.len();
    if !whole || src.dev.read_at(start * u64::from(src.block_size), &mut data).is_err() {
        for (i, chunk) in data.chunks_exact_mut(bs).enumerate() {
            failed[i] = read_block(src, start + i as u64, chunk).err();
        }
    }
    let isz = usize::from(src.inode_size);
    let per_block = (bs / isz) as u64;
    let first_idx = span.first * per_block;
    let count = (u64::from(span.limit).saturating_sub(first_idx)).min(span.blocks * per_block);
    let base = span.group * src.inodes_per_group + first_idx as u32 + 1;
    let records = (0..count as usize)
        .map(|k| Record::examine(&data[k * isz..(k + 1) * isz], base + k as u32, src.csum))
        .collect();
    Piece { data, failed, records }
}

/// One block, with [`crate::fs::RawFs::read_block`]'s checks and messages.
fn read_block(src: &Source<'_>, blk: u64, buf: &mut [u8]) -> Result<(), String> {
    if blk >= src.blocks_count {
        return Err(format!("block {blk} is past the end"));
    }
    let off = blk * u64::from(src.block_size);
    if off + buf.len() as u64 > src.dev.len() {
        return Err(format!("block {blk} is past the end of the device"));
    }
    src.dev.read_at(off, buf).map_err(|e| e.to_string())
}

/// Cuts the first `limit` records of group `group`'s table into spans.
pub fn spans_of(group: u32, limit: u32, per_block: u64, out: &mut Vec<Span>) {
    let nblocks = u64::from(limit).div_ceil(per_block);
    let mut first = 0;
    while first < nblocks {
        let blocks = PIECE_BLOCKS.min(nblocks - first);
        out.push(Span {
            group,
            first,
            blocks,
            limit,
        });
        first += blocks;
    }
}
