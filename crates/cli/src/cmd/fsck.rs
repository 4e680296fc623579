//! `ext4kit fsck [-n] [-f] [-C fd] [--json] [-E journal_only] IMAGE`: checks
//! an image as `e2fsck -n` does, with e2fsck's exit codes. Check-only for
//! now: `-p` and `-y` are refused. All checking is `ext4kit-fsck`'s; this
//! file parses options, renders progress and the report.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use anyhow::Result;
use ext4kit_engine::device::FileDevice;
use ext4kit_fsck::{self as fsck, Fatal, Options, Progress, Report};
use serde_json::json;

/// Arguments of `fsck`.
#[derive(clap::Args)]
pub struct Args {
    /// The image file (or block device).
    pub image: PathBuf,
    /// Check only: open read-only, answer "no" to every question.
    #[arg(short = 'n')]
    pub no: bool,
    /// Preen (repair what is safe): not implemented yet.
    #[arg(short = 'p')]
    pub preen: bool,
    /// Repair everything: not implemented yet.
    #[arg(short = 'y')]
    pub yes: bool,
    /// Check even if the file system seems clean.
    #[arg(short = 'f')]
    pub force: bool,
    /// Progress: 0 draws a bar on stdout; N > 0 writes "pass done total
    /// device" lines to file descriptor N (as e2fsck -C).
    #[arg(short = 'C')]
    pub progress_fd: Option<u32>,
    /// Extended options, comma separated: journal_only.
    #[arg(short = 'E')]
    pub extended: Option<String>,
    /// Findings as JSON on stdout.
    #[arg(long)]
    pub json: bool,
}

const PASS_NAMES: [&str; 6] = [
    "Pass 0: Checking the superblock, group descriptors and journal",
    "Pass 1: Checking inodes, blocks, and sizes",
    "Pass 2: Checking directory structure",
    "Pass 3: Checking directory connectivity",
    "Pass 4: Checking reference counts",
    "Pass 5: Checking group summary information",
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

fn check(a: &Args) -> Result<i32> {
    if a.preen || a.yes {
        eprintln!("ext4kit fsck: repairs (-p, -y) are not implemented yet; use -n to check only");
        return Ok(fsck::EXIT_OPERATIONAL);
    }
    let mut journal_only = false;
    for opt in a.extended.iter().flat_map(|e| e.split(',')) {
        match opt {
            "journal_only" => journal_only = true,
            "" => {}
            other => {
                eprintln!("ext4kit fsck: unknown extended option: {other}");
                return Ok(fsck::EXIT_USAGE);
            }
        }
    }
    if !a.no {
        eprintln!("ext4kit fsck: only check-only runs (-n) are implemented; checking read-only");
    }
    let dev = match FileDevice::open(&a.image, false) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("ext4kit fsck: cannot open {}: {e}", a.image.display());
            return Ok(fsck::EXIT_OPERATIONAL);
        }
    };
    // As e2fsck's "is mounted" warning: a check-only run goes on, but
    // what a live writer has not written back reads as damage.
    if let Some(who) = dev.in_use() {
        eprintln!(
            "ext4kit fsck: warning: {} is {who}: checking what is on disk, which may be out of date (findings may be spurious)",
            a.image.display()
        );
    }
    let cancel = Arc::new(AtomicBool::new(false));
    let _sig = signal_hook::flag::register(signal_hook::consts::SIGINT, cancel.clone())?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let opts = Options {
        force: a.force,
        journal_only,
        cancel: Some(&cancel),
        now,
    };
    let mut bar = ProgressOut::new(a.progress_fd, &a.image);
    let result = fsck::check(&dev, &opts, &mut |p| bar.update(p));
    bar.finish();
    let code = fsck::exit_code(&result);
    let printed = if a.json {
        print_json(a, &result, code)
    } else {
        print_text(a, &result)
    };
    // A reader that stopped reading (`| head`) does not change the verdict.
    if let Err(e) = printed
        && !e.chain().any(|c| {
            c.downcast_ref::<std::io::Error>()
                .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
        })
    {
        return Err(e);
    }
    Ok(code)
}

fn print_json(a: &Args, r: &Result<Report, Fatal>, code: i32) -> Result<()> {
    let v = match r {
        Ok(rep) => json_report(a, rep, code, false),
        Err(Fatal::Cancelled(rep)) => json_report(a, rep, code, true),
        Err(e) => json!({
            "image": a.image.display().to_string(),
            "exit_code": code,
            "check_only": true,
            "error": e.to_string(),
        }),
    };
    outln!("{}", serde_json::to_string_pretty(&v)?);
    Ok(())
}

fn json_report(a: &Args, rep: &Report, code: i32, cancelled: bool) -> serde_json::Value {
    json!({
            "image": a.image.display().to_string(),
            "exit_code": code,
            "check_only": true,
        "cancelled": cancelled,
        "report": rep,
    })
}

fn print_text(a: &Args, r: &Result<Report, Fatal>) -> Result<()> {
    let name = a.image.display().to_string();
    let rep = match r {
        Ok(rep) => rep,
        Err(Fatal::Cancelled(rep)) => {
            print_findings(rep)?;
            outln!("{name}: check cancelled (nothing was changed)");
            return Ok(());
        }
        Err(e) => {
            eprintln!("ext4kit fsck: {name}: {e}");
            return Ok(());
        }
    };
    if rep.skipped_clean {
        outln!(
            "{name}: clean, {} inodes, {} blocks",
            rep.inodes_total,
            rep.blocks_total
        );
        return Ok(());
    }
    print_findings(rep)?;
    outln!(
        "{name}: {}/{} files, {}/{} blocks",
        rep.inodes_used,
        rep.inodes_total,
        rep.blocks_used,
        rep.blocks_total
    );
    if rep.errors() > 0 {
        outln!(
            "{name}: ********** WARNING: file system still has errors ({} found; check-only run, nothing changed) **********",
            rep.errors()
        );
    }
    Ok(())
}

fn print_findings(rep: &Report) -> Result<()> {
    for n in &rep.notes {
        outln!("Note: {n}");
    }
    let mut pass = u8::MAX;
    for f in &rep.findings {
        if f.pass != pass {
            pass = f.pass;
            outln!("{}", PASS_NAMES.get(usize::from(pass)).copied().unwrap_or("Pass ?"));
        }
        let mut at = String::new();
        if let Some(i) = f.inode {
            at.push_str(&format!(" inode {i}"));
        }
        if let Some(b) = f.block {
            at.push_str(&format!(" block {b}"));
        }
        if let Some(g) = f.group {
            at.push_str(&format!(" group {g}"));
        }
        let sev = if f.severity == fsck::Severity::Warning {
            "warning "
        } else {
            ""
        };
        outln!(
            "  {sev}[{:#08x} {}]{at}: {} (would {}; not done: -n)",
            f.code.number,
            f.code.name,
            f.message,
            f.would
        );
    }
    if rep.dropped > 0 {
        outln!("  … and {} more findings not listed", rep.dropped);
    }
    Ok(())
}

/// Progress output: a bar on stdout (`-C 0`) or e2fsck-style lines on a
/// file descriptor.
struct ProgressOut {
    fd: Option<u32>,
    out: Option<std::fs::File>,
    device: String,
    last: (u8, u64),
}

impl ProgressOut {
    fn new(fd: Option<u32>, image: &std::path::Path) -> Self {
        let out = fd.filter(|&f| f > 0).and_then(|f| {
            std::fs::OpenOptions::new()
                .write(true)
                .open(format!("/proc/self/fd/{f}"))
                .ok()
        });
        Self {
            fd,
            out,
            device: image.display().to_string(),
            last: (0, u64::MAX),
        }
    }

    fn update(&mut self, p: Progress) {
        let pct = (p.done * 100).checked_div(p.total).unwrap_or(100);
        if self.last == (p.pass, pct) {
            return;
        }
        self.last = (p.pass, pct);
        match (self.fd, &mut self.out) {
            (Some(0), _) => {
                let filled = (pct / 5) as usize;
                print!(
                    "\r{}: |{}{}| {pct:3}%",
                    self.device,
                    "=".repeat(filled),
                    " ".repeat(20 - filled.min(20))
                );
                std::io::stdout().flush().ok();
            }
            (Some(_), Some(f)) => {
                let _ = writeln!(f, "{} {} {} {}", p.pass, p.done, p.total, self.device);
            }
            _ => {}
        }
    }

    fn finish(&mut self) {
        if self.fd == Some(0) {
            println!();
        }
    }
}
