//! logdump: the journal superblock, then each block of each transaction
//! as debugfs `logdump -a` lists them (without the data hex dumps), then
//! the fast-commit area's records.

use anyhow::Result;
use ext4kit_engine::Filesystem;
use ext4kit_engine::inspect::{LogBlock, LogEnd};
use ext4kit_format::journal::fast_commit::{Dentry, Tag};

pub(super) fn logdump(fs: &Filesystem, _args: &[String]) -> Result<()> {
    let d = fs.log_dump()?;
    let s = &d.superblock;
    outln!(
        "Journal superblock: block size {}, first {}, max length {}, features compat 0x{:x} incompat 0x{:x}",
        s.block_size,
        s.first,
        s.max_len,
        s.compat,
        s.incompat
    );
    outln!("Journal starts at block {}, transaction {}", s.start, s.sequence);
    for b in &d.blocks {
        match b {
            LogBlock::Descriptor { block, sequence, tags } => {
                outln!("Found expected sequence {sequence}, type 1 (descriptor block) at block {block}");
                for (fs_block, at, flags) in tags {
                    outln!("  FS block {fs_block} logged at journal block {at} (flags 0x{flags:x})");
                }
            }
            LogBlock::Revoke {
                block,
                sequence,
                revoked,
            } => {
                outln!("Found expected sequence {sequence}, type 5 (revoke table) at block {block}");
                for r in revoked {
                    outln!("  Revoke FS block {r}");
                }
            }
            LogBlock::Commit { block, sequence } => {
                outln!("Found expected sequence {sequence}, type 2 (commit block) at block {block}");
            }
        }
    }
    match d.end {
        Some(LogEnd::NoMagic(b)) => outln!("No magic number at block {b}: end of journal."),
        Some(LogEnd::Sequence(b, found, want)) => {
            outln!("Found sequence {found} (not {want}) at block {b}: end of journal.")
        }
        Some(LogEnd::UnknownType(b, t)) => outln!("Unexpected block type {t} at block {b}."),
        Some(LogEnd::Wrapped(b)) => outln!("Back at block {b}: the whole log was read."),
        None => {}
    }
    for t in &d.fast_commits {
        fast_commit(t)?;
    }
    Ok(())
}

/// One fast-commit record as debugfs's `dump_fc_block` prints it.
fn fast_commit(t: &Tag) -> Result<()> {
    let dentry = |kind: &str, d: &Dentry| {
        format!(
            "tag {kind}, parent {}, ino {}, name \"{}\"",
            d.parent,
            d.ino,
            String::from_utf8_lossy(&d.name)
        )
    };
    match t {
        Tag::AddRange { ino, extent: e } => outln!(
            "tag ADD_RANGE, inode {ino}, lblk {}, pblk {}, len {}",
            e.logical,
            e.physical,
            e.len
        ),
        Tag::DelRange { ino, lblk, len } => outln!("tag DEL_RANGE, inode {ino}, lblk {lblk}, len {len}"),
        Tag::Create(d) => outln!("{}", dentry("CREAT_DENTRY", d)),
        Tag::Link(d) => outln!("{}", dentry("ADD_ENTRY", d)),
        Tag::Unlink(d) => outln!("{}", dentry("DEL_ENTRY", d)),
        Tag::Inode { ino, .. } => outln!("tag INODE, inode {ino}"),
        Tag::Pad => outln!("tag PAD"),
        Tag::Tail { tid, .. } => outln!("tag TAIL, tid {tid}"),
        Tag::Head { features, tid } => {
            outln!("\n*** Fast Commit Area ***");
            outln!("tag HEAD, features 0x{features:x}, tid {tid}");
        }
    }
    Ok(())
}
