//! Pass 0, journal (`journal.rst`): find the journal inode's superblock,
//! check it, and say whether the journal needs recovery. A check-only run
//! never replays: like `e2fsck -n`, it says recovery is skipped and checks
//! the file system as found.

use ext4kit_engine::journal::JournalDevice;
use ext4kit_format::features::{CompatFeatures, IncompatFeatures};
use ext4kit_format::inode::mode;
use ext4kit_format::journal::superblock::RawJournalSuperblock;
use zerocopy::FromBytes;

use crate::pass1::decode;
use crate::problem::{self as p, Finding};
use crate::state::Ctx;
use crate::walk::{Event, Walker};

/// jbd2 incompat features this code knows (revoke, 64bit, async commit,
/// checksum v2 and v3, fast commit).
const JBD2_KNOWN_INCOMPAT: u32 = 0x1 | 0x2 | 0x4 | 0x8 | 0x10 | 0x20;

/// The fewest blocks a journal may have (`JBD2_MIN_JOURNAL_BLOCKS`).
const JBD2_MIN_JOURNAL_BLOCKS: u64 = 1024;

/// Bytes of a version-1 journal superblock (header through `s_start`);
/// the rest of the block is version 2's.
const V1_SB_SIZE: usize = 0x24;

/// Checks the journal (on `external`, the journal device given with `-j`,
/// when the file system's is there), then the orphan list ([`crate::orphans`]).
pub fn check(ctx: &mut Ctx, external: Option<&JournalDevice>) {
    journal(ctx, external);
    crate::orphans::check(ctx);
}

fn journal(ctx: &mut Ctx, external: Option<&JournalDevice>) {
    let f = ctx.fs.geo.features;
    let recover = f.incompat.contains(IncompatFeatures::RECOVER);
    if !f.compat.contains(CompatFeatures::HAS_JOURNAL) {
        let msg = "needs_recovery is set but there is no journal";
        if recover && ctx.fix(Finding::new(p::P0_JOURNAL_RECOVER_SET, msg, "clear needs_recovery")) {
            clear_recover(ctx);
        }
        return;
    }
    let jino = ctx.fs.sb.s_journal_inum.get();
    if jino == 0 {
        external_journal(ctx, external, recover);
        return;
    }
    let Some((jsb, jblk)) = journal_superblock(ctx, jino) else {
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
        let msg = "needs_recovery is clear but the journal has data";
        if ctx.fix(Finding::new(p::P0_JOURNAL_RECOVERY_CLEAR, msg, "clear the journal")) {
            reset_start(ctx, jsb, jblk);
        }
    }
    if recover && ctx.repairing() {
        // A repair run replays first (`repair::replay_journal`); a journal
        // still marked for recovery is one the replay could not use. Its
        // transactions must not be replayed later over the repaired file
        // system, so it is emptied, as e2fsck does when recovery fails.
        let msg = "the journal needs recovery but could not be replayed";
        if ctx.fix(Finding::new(p::P0_JOURNAL_RESET_JOURNAL, msg, "empty the journal")) {
            reset_start(ctx, jsb, jblk);
            clear_recover(ctx);
        }
        return;
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

/// An external journal (`s_journal_inum` 0): the device given must be
/// this file system's (`s_journal_uuid`, the block size, `s_users`), as
/// e2fsck checks it. A repair replayed it first (`repair::replay_journal`).
fn external_journal(ctx: &mut Ctx, dev: Option<&JournalDevice>, recover: bool) {
    let uuid = ext4kit_engine::journal::external::uuid(&ctx.fs.sb.s_journal_uuid);
    let Some(dev) = dev else {
        ctx.report.note(format!(
            "the journal is on an external device (UUID {uuid}), not given: not checked (give it with -j PATH)"
        ));
        if recover {
            ctx.report
                .note("the journal needs recovery: skipping journal recovery; checking the file system as found");
        }
        return;
    };
    let j = match ext4kit_engine::journal::external::inspect(dev, &ctx.fs.sb) {
        Ok(j) => j,
        Err(e) => {
            let msg = format!("external journal {uuid}: {e}");
            ctx.add(Finding::new(p::P0_JOURNAL_BAD_SUPER, msg, "abort"));
            return;
        }
    };
    if recover && ctx.repairing() {
        let msg = "the external journal needs recovery but could not be replayed";
        ctx.add(Finding::new(p::P0_JOURNAL_RESET_JOURNAL, msg, "replay it"));
    } else if recover {
        ctx.report.note("the journal needs recovery: skipping journal recovery because this is a read-only check; checking the file system as found");
    } else if j.start != 0 {
        ctx.report
            .note("needs_recovery is clear but the external journal has data: the kernel will skip it");
    }
    let state = if j.start == 0 {
        "empty"
    } else {
        "has transactions to replay"
    };
    ctx.report.note(format!(
        "journal: external device {uuid}, {} blocks, sequence {}, {state}",
        j.max_len, j.sequence
    ));
}

/// Reads the journal superblock through the journal inode's block 0, and
/// with its block number. An unusable journal inode is cleared, a corrupt
/// journal superblock reset, as e2fsck does.
fn journal_superblock(ctx: &mut Ctx, jino: u32) -> Option<(RawJournalSuperblock, u64)> {
    let Ok(rec) = ctx.fs.inode_record(jino) else {
        bad_inode(ctx, jino, format!("journal inode {jino} cannot be read"));
        return None;
    };
    let raw = decode(&rec);
    if raw.i_mode.get() & mode::S_IFMT != mode::S_IFREG || raw.links() == 0 {
        bad_inode(ctx, jino, "journal inode is not in use or not a regular file".into());
        return None;
    }
    let mut first = None;
    // Blocks mapped from 0 without a hole: e2fsck stops reading the
    // journal's map at the first hole.
    let mut next = Some(0u64);
    let mut visit = |e: Event| {
        if let Event::Data { lblk, pblk, len, .. } = e {
            if lblk == 0 {
                first = Some(pblk);
            }
            next = next.and_then(|n| (lblk == n).then_some(n + u64::from(len)));
        }
    };
    let extents = raw.has_flag(ext4kit_format::inode::flags::EXTENTS);
    let mut w = Walker::new(&ctx.fs, jino, &raw, &mut visit);
    w.walk(&raw, extents);
    let broken = !w.problems.is_empty();
    drop(w);
    if broken {
        bad_inode(ctx, jino, "the journal inode's block map is invalid".into());
        return None;
    }
    let bs = u64::from(ctx.fs.geo.block_size);
    if raw.size() / bs < JBD2_MIN_JOURNAL_BLOCKS || next.unwrap_or(0).saturating_mul(bs) < raw.size() {
        bad_inode(ctx, jino, "the journal inode is too small or has holes".into());
        return None;
    }
    let Some(blk) = first else {
        bad_inode(ctx, jino, "journal inode has no block 0".into());
        return None;
    };
    let buf = match ctx.fs.read_block(blk) {
        Ok(b) => b,
        Err(e) => {
            bad_inode(ctx, jino, format!("cannot read the journal superblock: {e}"));
            return None;
        }
    };
    let maxlen = (raw.size() / ctx.fs.geo.block_size as u64) as u32;
    match RawJournalSuperblock::parse(&buf) {
        Ok(j) if j.verify_checksum().is_err() => {
            let msg = "journal superblock checksum does not match";
            if ctx.fix(Finding::new(p::P0_JOURNAL_BAD_SUPER, msg, "reset the journal").blk(blk)) {
                return reset_super(ctx, blk, maxlen).map(|j| (j, blk));
            }
            Some((j, blk))
        }
        Ok(j) => Some((v1_fields(ctx, j, blk), blk)),
        Err(e) if e.field == "h_blocktype" => {
            let msg = format!("journal superblock is corrupt: {e}");
            ctx.add(Finding::new(p::P0_JOURNAL_UNSUPP_SUPER, msg, "abort").blk(blk));
            None
        }
        Err(e) => {
            let msg = format!("journal superblock is corrupt: {e}");
            if ctx.fix(Finding::new(p::P0_JOURNAL_BAD_SUPER, msg, "reset the journal").blk(blk)) {
                return reset_super(ctx, blk, maxlen).map(|j| (j, blk));
            }
            None
        }
    }
}

/// The journal inode cannot hold a journal: e2fsck deletes the journal —
/// has_journal, needs_recovery, `s_journal_inum` and the inode backup in
/// `s_jnl_blocks` are cleared in every superblock copy, and the inode is
/// zeroed, so pass 1 claims none of its blocks (pass 5 frees them).
fn bad_inode(ctx: &mut Ctx, jino: u32, why: String) {
    if !ctx.fix(Finding::new(p::P0_JOURNAL_BAD_INODE, why, "clear the journal").ino(jino)) {
        return;
    }
    let sb = &mut ctx.fs.sb;
    sb.s_feature_compat
        .set(sb.s_feature_compat.get() & !CompatFeatures::HAS_JOURNAL.0);
    sb.s_journal_inum.set(0);
    for w in &mut sb.s_jnl_blocks {
        w.set(0);
    }
    sb.s_jnl_backup_type = 0;
    clear_recover(ctx);
    ctx.fs.dirty_backups = true;
    if jino < ctx.fs.geo.first_ino || jino == 8 {
        let mut rec = vec![0u8; usize::from(ctx.fs.geo.inode_size)];
        if let Err(e) = ctx.fs.write_inode_record(jino, &mut rec) {
            ctx.not_fixed(format!("cannot clear inode {jino}: {e}"));
        }
    }
    ctx.report.note("the journal has been deleted");
}

/// Clears needs_recovery (the superblock then says the file system needs
/// a full check, which this run is).
fn clear_recover(ctx: &mut Ctx) {
    let sb = &mut ctx.fs.sb;
    sb.s_feature_incompat
        .set(sb.s_feature_incompat.get() & !IncompatFeatures::RECOVER.0);
    ctx.fs.geo.features = ctx.fs.sb.features();
    ctx.fs.dirty_sb = true;
}

/// Marks the journal empty (`s_start` 0): what it holds is never replayed.
fn reset_start(ctx: &mut Ctx, mut jsb: RawJournalSuperblock, blk: u64) {
    jsb.s_start.set(0);
    // jbd2 checksum v2 or v3: the superblock carries a checksum.
    if jsb.incompat() & (0x8 | 0x10) != 0 {
        jsb.set_checksum();
    }
    if let Err(e) = write_jsb(ctx, &jsb, blk) {
        ctx.not_fixed(e);
    }
}

/// Writes a new, empty version-2 journal superblock over a corrupt one
/// (e2fsck's `e2fsck_journal_reset_super`): no features, the journal's
/// length from the inode's size, and a sequence number nothing in the old
/// log can continue.
fn reset_super(ctx: &mut Ctx, blk: u64, maxlen: u32) -> Option<RawJournalSuperblock> {
    let mut buf = vec![0u8; ctx.fs.bs()];
    let mut jsb = RawJournalSuperblock::read_from_prefix(&buf).ok()?.0;
    jsb.s_header.h_magic.set(ext4kit_format::journal::JBD2_MAGIC);
    jsb.s_header.h_blocktype.set(4);
    jsb.s_blocksize.set(ctx.fs.geo.block_size);
    jsb.s_maxlen.set(maxlen);
    jsb.s_first.set(1);
    let u = ext4kit_engine::tune::time_uuid();
    let seq = u
        .chunks(4)
        .fold(0u32, |a, c| a ^ u32::from_le_bytes([c[0], c[1], c[2], c[3]]));
    jsb.s_sequence.set(seq);
    buf[..1024].copy_from_slice(&jsb.encode());
    if let Err(e) = ctx.fs.write_block(blk, &buf) {
        ctx.not_fixed(format!("writing the journal superblock: {e}"));
        return None;
    }
    if ctx.fs.geo.features.incompat.contains(IncompatFeatures::RECOVER) {
        clear_recover(ctx);
    }
    Some(jsb)
}

fn write_jsb(ctx: &Ctx, jsb: &RawJournalSuperblock, blk: u64) -> Result<(), String> {
    let mut buf = ctx.fs.read_block(blk).map_err(|e| e.to_string())?;
    buf[..1024].copy_from_slice(&jsb.encode());
    ctx.fs
        .write_block(blk, &buf)
        .map_err(|e| format!("writing the journal superblock: {e}"))
}

/// A version-1 journal superblock with version-2 fields set (features or
/// users), or a version-2 one claiming several users of an internal
/// journal: e2fsck clears everything past the version-1 fields
/// (`PR_0_CLEAR_V2_JOURNAL`), which a kernel would otherwise read.
fn v1_fields(ctx: &mut Ctx, jsb: RawJournalSuperblock, blk: u64) -> RawJournalSuperblock {
    let v2_set = jsb.s_feature_compat.get() != 0
        || jsb.s_feature_incompat.get() != 0
        || jsb.s_feature_ro_compat.get() != 0
        || jsb.s_nr_users.get() != 0;
    let bad = if jsb.is_v2() {
        jsb.s_nr_users.get() > 1 && ctx.fs.sb.s_journal_uuid == [0; 16]
    } else {
        v2_set
    };
    let msg = "invalid version-2 journal superblock fields";
    if !bad || !ctx.fix(Finding::new(p::P0_CLEAR_V2_JOURNAL, msg, "clear them").blk(blk)) {
        return jsb;
    }
    let Ok(mut buf) = ctx.fs.read_block(blk) else {
        ctx.not_fixed("the journal superblock could not be read");
        return jsb;
    };
    buf[V1_SB_SIZE..].fill(0);
    if let Err(e) = ctx.fs.write_block(blk, &buf) {
        ctx.not_fixed(e);
        return jsb;
    }
    RawJournalSuperblock::parse(&buf).unwrap_or(jsb)
}
