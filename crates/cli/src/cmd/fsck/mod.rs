//! `ext4kit fsck [-n|-p|-y] [-f] [-D] [-b block [-B size]] [-j journal] [-z undo] [-C fd] [--json] [-E journal_only,check_encoding] IMAGE`:
//! checks an image as `e2fsck -n` does, or repairs it as `e2fsck -p` and
//! `e2fsck -y` do, with e2fsck's exit codes. All checking and repairing is
//! `ext4kit-fsck`'s; this module parses options ([`mod@self`]), renders
//! progress ([`progress`]) and the report ([`print`]).

mod print;
mod progress;

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use anyhow::Result;
use ext4kit_engine::BlockDevice;
use ext4kit_fsck::{self as fsck, Mode, Options};

use progress::ProgressOut;

/// Arguments of `fsck`.
#[derive(clap::Args)]
pub struct Args {
    /// The image file (or block device).
    pub image: PathBuf,
    /// Check only: open read-only, answer "no" to every question.
    #[arg(short = 'n')]
    pub no: bool,
    /// Preen: repair what is safe without asking; stop repairing (exit 4)
    /// at anything else.
    #[arg(short = 'p', short_alias = 'a')]
    pub preen: bool,
    /// Repair everything.
    #[arg(short = 'y')]
    pub yes: bool,
    /// Check even if the file system seems clean.
    #[arg(short = 'f')]
    pub force: bool,
    /// Rebuild every directory (e2fsck -D): index those with dir_index and
    /// more than a block of names, pack the others tight. Needs -p or -y.
    #[arg(short = 'D')]
    pub rebuild_dirs: bool,
    /// Progress: 0 draws a bar on stdout; N > 0 writes "pass done total
    /// device" lines to file descriptor N (as e2fsck -C).
    #[arg(short = 'C')]
    pub progress_fd: Option<u32>,
    /// Extended options, comma separated: journal_only, check_encoding
    /// (names of casefolded directories checked as UTF-8 and folded even
    /// without strict mode, as e2fsck -E check_encoding).
    #[arg(short = 'E')]
    pub extended: Option<String>,
    /// Save what a repair overwrites in FILE first (a new file, or this
    /// image's undo file from the commands before, continued), which
    /// `ext4kit undo FILE IMAGE` or e2fsprogs' `e2undo` replays.
    #[arg(short = 'z', value_name = "FILE")]
    pub undo: Option<PathBuf>,
    /// When the undo file is synced.
    #[arg(long, value_enum, default_value_t, requires = "undo")]
    pub undo_sync: crate::open::UndoSyncArg,
    /// Findings as JSON on stdout.
    #[arg(long)]
    pub json: bool,
    /// Threads reading and checksumming inode tables in pass 1 of a
    /// check (-n); 0 (the default) uses every core, 1 the serial scan.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub threads: usize,
    /// Check from the backup superblock at this block, as e2fsck -b; a
    /// repair rewrites the primary superblock and descriptors from it.
    #[arg(short = 'b', value_name = "BLOCK")]
    pub superblock: Option<u64>,
    /// The block size -b counts in, as e2fsck -B (1024 to 65536); without
    /// it each size is tried.
    #[arg(short = 'B', value_name = "SIZE")]
    pub block_size: Option<String>,
    /// The external journal device of an image whose journal lives on
    /// another device, as e2fsck -j: checked, and replayed by -p/-y.
    #[arg(short = 'j', value_name = "PATH")]
    pub journal: Option<PathBuf>,
}

const PASS_NAMES: [&str; 7] = [
    "Pass 0: Checking the superblock, group descriptors and journal",
    "Pass 1: Checking inodes, blocks, and sizes",
    "Pass 2: Checking directory structure",
    "Pass 3: Checking directory connectivity",
    "Pass 4: Checking reference counts",
    "Pass 5: Checking group summary information",
    "After pass 5: quota usage and final updates",
];

/// Runs the command; exits the process with e2fsck's status.
pub fn run(a: Args) -> Result<()> {
    let code = match check(&a) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("ext4kit fsck: {e:#}");
            fsck::EXIT_OPERATIONAL
        }
    };
    std::io::stdout().flush().ok();
    std::process::exit(code)
}

fn mode(a: &Args) -> Option<Mode> {
    match (a.no, a.preen, a.yes) {
        (_, false, false) => Some(Mode::Check),
        (false, true, false) => Some(Mode::Preen),
        (false, false, true) => Some(Mode::Yes),
        _ => None,
    }
}

/// `-b BLOCK [-B SIZE]`, checked as the other commands check them; their
/// misuse is a usage error (exit 16), as e2fsck's.
fn backup_at(a: &Args) -> std::result::Result<Option<(u64, Option<u32>)>, String> {
    let size = a.block_size.as_deref().map(crate::open::parse_block_size).transpose()?;
    match (a.superblock, size) {
        (None, Some(_)) => Err("-B SIZE needs -b BLOCK (the backup superblock to read)".into()),
        (None, None) => Ok(None),
        (Some(0), _) => Err("-b 0 is the primary superblock, not a backup: leave -b out".into()),
        (Some(b), s) => Ok(Some((b, s))),
    }
}

fn check(a: &Args) -> Result<i32> {
    let Some(mode) = mode(a) else {
        eprintln!("ext4kit fsck: only one of -n, -p and -y may be given");
        return Ok(fsck::EXIT_USAGE);
    };
    let (mut journal_only, mut check_encoding) = (false, false);
    for opt in a.extended.iter().flat_map(|e| e.split(',')) {
        match opt {
            "journal_only" => journal_only = true,
            "check_encoding" => check_encoding = true,
            "" => {}
            other => {
                eprintln!("ext4kit fsck: unknown extended option: {other}");
                return Ok(fsck::EXIT_USAGE);
            }
        }
    }
    if mode == Mode::Check && a.rebuild_dirs {
        eprintln!("ext4kit fsck: -D rebuilds directories: it needs -p or -y (as e2fsck, not with -n)");
        return Ok(fsck::EXIT_USAGE);
    }
    if mode == Mode::Check && a.undo.is_some() {
        eprintln!("ext4kit fsck: -z saves what a repair overwrites: it needs -p or -y");
        return Ok(fsck::EXIT_USAGE);
    }
    let superblock = match backup_at(a) {
        Ok(at) => at,
        Err(why) => {
            eprintln!("ext4kit fsck: {why}");
            return Ok(fsck::EXIT_USAGE);
        }
    };
    if mode == Mode::Check && !a.no {
        eprintln!("ext4kit fsck: no -p or -y: checking only (questions are not asked interactively)");
    }
    let Some(dev) = open(a, mode) else {
        return Ok(fsck::EXIT_OPERATIONAL);
    };
    let journal = match crate::open::external_journal(&a.image, a.journal.as_deref(), mode != Mode::Check) {
        Ok(j) => j,
        Err(e) => {
            eprintln!("ext4kit fsck: {e:#}");
            return Ok(fsck::EXIT_OPERATIONAL);
        }
    };
    let cancel = Arc::new(AtomicBool::new(false));
    let _sig = signal_hook::flag::register(signal_hook::consts::SIGINT, cancel.clone())?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let opts = Options {
        force: a.force,
        journal_only,
        check_encoding,
        cancel: Some(&cancel),
        now,
        mode,
        // Saved by the device wrapper below, which continues a file.
        undo: None,
        rehash_all: a.rebuild_dirs,
        threads: a.threads,
        superblock,
        journal,
    };
    let mut bar = ProgressOut::new(a.progress_fd, &a.image);
    if mode == Mode::Check {
        let result = fsck::check(dev.as_ref(), &opts, &mut |p| bar.update(p));
        bar.finish();
        let code = fsck::exit_code(&result);
        return print::check_result(a, &result, code).map(|()| code);
    }
    let bs = crate::open::fs_block_size(dev.as_ref());
    let sync = a.undo_sync.into();
    let repair = |d: Box<dyn BlockDevice>| fsck::repair::repair(&Arc::from(d), &opts, &mut |p| bar.update(p));
    let mut result = match crate::open::with_undo_judged(
        Box::new(dev),
        a.undo.as_deref(),
        sync,
        &a.image,
        bs,
        repair,
        Result::is_ok,
    ) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("ext4kit fsck: {e:#}");
            return Ok(fsck::EXIT_OPERATIONAL);
        }
    };
    bar.finish();
    if let (Ok(o), Some(z)) = (&mut result, &a.undo) {
        o.undo = undo_saved(z);
    }
    let code = match &result {
        Ok(o) => o.exit_code(),
        Err(fsck::Fatal::Cancelled(_)) => fsck::EXIT_CANCELLED,
        Err(_) => fsck::EXIT_OPERATIONAL,
    };
    print::repair_result(a, &result, code).map(|()| code)
}

/// What the undo file at `path` holds, for the report.
fn undo_saved(path: &std::path::Path) -> Option<fsck::repair::undo::Saved> {
    let file = std::fs::File::open(path).ok()?;
    let u = ext4kit_engine::device::undo::replay::UndoFile::read(&file, false).ok()?;
    let bs = u64::from(u.header.block_size);
    Some(fsck::repair::undo::Saved {
        blocks: u.runs.iter().map(|r| u64::from(r.key.size).div_ceil(bs)).sum(),
        keys: u.header.num_keys,
    })
}

/// The image: read-only for a check, which warns when the image is in use
/// (as e2fsck's "is mounted" warning: what a live writer has not written
/// back reads as damage); writable for a repair, which refuses an image in
/// use, as e2fsck refuses to repair a mounted file system.
fn open(a: &Args, mode: Mode) -> Option<Arc<dyn BlockDevice>> {
    let access = if mode == Mode::Check {
        crate::open::Access::Read
    } else {
        crate::open::Access::Write
    };
    let (dev, who) = match crate::open::open_device(&a.image, access) {
        Ok(d) => d,
        Err(e) if mode != Mode::Check => {
            eprintln!(
                "ext4kit fsck: cannot open {} for repair: {e}\n(unmount it, or stop the program writing to it, first; -n checks without writing)",
                a.image.display()
            );
            return None;
        }
        Err(e) => {
            eprintln!("ext4kit fsck: cannot open {}: {e}", a.image.display());
            return None;
        }
    };
    if let Some(who) = who {
        eprintln!(
            "ext4kit fsck: warning: {} is {who}: checking what is on disk, which may be out of date (findings may be spurious)",
            a.image.display()
        );
    }
    Some(Arc::from(dev))
}
