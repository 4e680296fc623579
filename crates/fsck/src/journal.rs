//! Pass 0, journal (`journal.rst`): find the journal inode's superblock,
//! check it, and say whether the journal needs recovery. A check-only run
//! never replays: like `e2fsck -n`, it says recovery is skipped and checks
//! the file system as found.

use ext4kit_format::features::{CompatFeatures, IncompatFeatures};
use ext4kit_format::inode::mode;
use ext4kit_format::journal::superblock::RawJournalSuperblock;

use crate::pass1::decode;
use crate::problem::{self as p, Finding};
use crate::state::Ctx;
use crate::walk::{Event, Walker};

/// jbd2 incompat features this code knows (revoke, 64bit, async commit,
/// checksum v2 and v3, fast commit).
const JBD2_KNOWN_INCOMPAT: u32 = 0x1 | 0x2 | 0x4 | 0x8 | 0x10 | 0x20;

/// Checks the journal, then the orphan list ([`crate::orphans`]).
pub fn check(ctx: &mut Ctx) {
    journal(ctx);
    crate::orphans::check(ctx);
}

fn journal(ctx: &mut Ctx) {
    let f = ctx.fs.geo.features;
    let recover = f.incompat.contains(IncompatFeatures::RECOVER);
    if !f.compat.contains(CompatFeatures::HAS_JOURNAL) {
        if recover {
            ctx.add(Finding::new(
                p::P0_JOURNAL_RECOVER_SET,
                "needs_recovery is set but there is no journal",
                "clear needs_recovery",
            ));
        }
        return;
    }
    let jino = ctx.fs.sb.s_journal_inum.get();
    if jino == 0 {
        ctx.report.note("external journal: not checked");
        return;
    }
    let Some(jsb) = journal_superblock(ctx, jino) else {
        return;
    };
    let incompat = jsb.s_feature_incompat.get();
    if jsb.is_v2() && incompat & !JBD2_KNOWN_INCOMPAT != 0 {
        ctx.add(Finding::new(
            p::P0_JOURNAL_UNSUPP_INCOMPAT,
            format!(
                "journal has unsupported features {:#x}",
                incompat & !JBD2_KNOWN_INCOMPAT
            ),
            "abort",
        ));
    }
    let start = jsb.s_start.get();
    if start != 0 && !recover {
        ctx.add(Finding::new(
            p::P0_JOURNAL_RECOVERY_CLEAR,
            "needs_recovery is clear but the journal has data",
            "clear the journal",
        ));
    }
    if recover {
        ctx.report.note("the journal needs recovery: skipping journal recovery because this is a read-only check; checking the file system as found");
    }
    ctx.report.note(format!(
        "journal: inode {jino}, {} blocks, sequence {}, {}",
        jsb.s_maxlen.get(),
        jsb.s_sequence.get(),
        if start == 0 {
            "empty"
        } else {
            "has transactions to replay"
        }
    ));
}

/// Reads the journal superblock through the journal inode's block 0.
fn journal_superblock(ctx: &mut Ctx, jino: u32) -> Option<RawJournalSuperblock> {
    let bad =
        |ctx: &mut Ctx, why: String| ctx.add(Finding::new(p::P0_JOURNAL_BAD_INODE, why, "clear the journal").ino(jino));
    let Ok(rec) = ctx.fs.inode_record(jino) else {
        bad(ctx, format!("journal inode {jino} cannot be read"));
        return None;
    };
    let raw = decode(&rec);
    if raw.i_mode.get() & mode::S_IFMT != mode::S_IFREG || raw.links() == 0 {
        bad(ctx, "journal inode is not in use or not a regular file".into());
        return None;
    }
    let mut first = None;
    let mut visit = |e: Event| {
        if let Event::Data { lblk: 0, pblk, .. } = e {
            first = Some(pblk);
        }
    };
    let extents = raw.has_flag(ext4kit_format::inode::flags::EXTENTS);
    let mut w = Walker::new(&ctx.fs, jino, &raw, &mut visit);
    w.walk(&raw, extents);
    let broken = !w.problems.is_empty();
    drop(w);
    if broken {
        bad(ctx, "the journal inode's block map is invalid".into());
        return None;
    }
    let Some(blk) = first else {
        bad(ctx, "journal inode has no block 0".into());
        return None;
    };
    let buf = match ctx.fs.read_block(blk) {
        Ok(b) => b,
        Err(e) => {
            bad(ctx, format!("cannot read the journal superblock: {e}"));
            return None;
        }
    };
    match RawJournalSuperblock::parse(&buf) {
        Ok(j) if j.verify_checksum().is_err() => {
            let f = Finding::new(
                p::P0_JOURNAL_BAD_SUPER,
                "journal superblock checksum does not match",
                "clear the journal",
            );
            ctx.add(f.blk(blk));
            Some(j)
        }
        Ok(j) => Some(j),
        Err(e) => {
            let code = if e.field == "h_blocktype" {
                p::P0_JOURNAL_UNSUPP_SUPER
            } else {
                p::P0_JOURNAL_BAD_SUPER
            };
            ctx.add(Finding::new(code, format!("journal superblock is corrupt: {e}"), "clear the journal").blk(blk));
            None
        }
    }
}
