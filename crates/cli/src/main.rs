//! `ext4kit`: inspect, read and export ext2/ext3/ext4 images without kernel
//! privileges. Subcommands only: every file-system operation is a call into
//! `ext4kit-engine`; this crate parses arguments, formats output and talks to
//! the host file system (for `export`).

/// `println!` that reports a closed stdout as an error instead of panicking.
macro_rules! outln {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        writeln!(std::io::stdout(), $($t)*)?
    }};
}

mod cmd;
mod open;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "ext4kit", version, about = "ext2/ext3/ext4 in user space")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// Options shared by every command that opens an image.
#[derive(clap::Args, Clone, Debug)]
pub struct ImageArgs {
    /// The image file (or block device).
    pub image: PathBuf,
    /// Read even when metadata checksums do not match.
    #[arg(long)]
    pub ignore_checksums: bool,
    /// Open even when the journal needs recovery, reading the on-disk state as is.
    #[arg(long)]
    pub ignore_journal: bool,
}

#[derive(Subcommand)]
enum Command {
    /// Superblock and per-group summary, like dumpe2fs.
    Info(cmd::info::Args),
    /// List a directory.
    Ls(cmd::ls::Args),
    /// Write a file's contents to standard output.
    Cat(cmd::cat::Args),
    /// Show an inode: fields, flags, extent tree or block map, xattrs.
    Stat(cmd::stat::Args),
    /// Copy a tree out of the image, preserving metadata.
    Export(cmd::export::Args),
    /// Create a new, empty file system (like mke2fs).
    Mkfs(cmd::mkfs::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let r = match cli.command {
        Command::Info(a) => cmd::info::run(a),
        Command::Ls(a) => cmd::ls::run(a),
        Command::Cat(a) => cmd::cat::run(a),
        Command::Stat(a) => cmd::stat::run(a),
        Command::Export(a) => cmd::export::run(a),
        Command::Mkfs(a) => cmd::mkfs::run(a),
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ext4kit: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// A reader that stopped reading (`| head`) is not a failure.
fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}
