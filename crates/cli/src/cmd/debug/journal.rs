//! logdump: the journal superblock, then each block of each transaction
//! as debugfs `logdump -a` lists them (without the data hex dumps).

use anyhow::Result;
use ext4kit_engine::Filesystem;
use ext4kit_engine::inspect::{LogBlock, LogEnd};

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
    Ok(())
}
