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
mod keys;
mod logger;
mod open;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};

/// `--version`: the crate version and the source revision that `build.rs`
/// recorded (`0.1.0 (2d398c0, 2026-11-27)`).
const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), " (", env!("EXT4KIT_REVISION"), ")");

#[derive(Parser)]
#[command(name = "ext4kit", version = VERSION, about = "ext2/ext3/ext4 in user space")]
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
    /// Do not replay a dirty journal: read the on-disk state as is (possibly stale).
    #[arg(long)]
    pub ignore_journal: bool,
    /// Read the superblock and group descriptors from the backup at this
    /// block, as e2fsck -b (the image is then read-only).
    #[arg(short = 'b', value_name = "BLOCK")]
    pub superblock: Option<u64>,
    /// The block size -b counts in, as e2fsck -B (1024 to 65536); without
    /// it each size is tried.
    #[arg(short = 'B', value_name = "SIZE", requires = "superblock", value_parser = open::parse_block_size)]
    pub block_size: Option<u32>,
    /// The external journal device of an image whose journal lives on
    /// another device (made with mkfs -J device=), as e2fsck -j.
    #[arg(long, value_name = "PATH")]
    pub journal: Option<PathBuf>,
    /// `-z FILE`, `--undo-sync`: the undo file of a command that writes.
    #[command(flatten)]
    pub undo: open::UndoArgs,
    /// An fscrypt master key file for encrypted directories (repeatable):
    /// FILE for v2 policies, DESCRIPTOR=FILE (16 hex digits) for v1.
    #[arg(long = "key", value_name = "[DESCRIPTOR=]FILE")]
    pub keys: Vec<String>,
}

#[derive(Subcommand)]
enum Command {
    /// Superblock and per-group summary, like dumpe2fs.
    Info(cmd::info::Args),
    /// List a directory.
    Ls(cmd::ls::Args),
    /// Write a file's contents to standard output.
    Cat(cmd::cat::Args),
    /// fs-verity: enable it on a file, or print a verity file's digest.
    Verity(cmd::verity::Args),
    /// Show an inode: fields, flags, extent tree or block map, xattrs.
    Stat(cmd::stat::Args),
    /// How fragmented files and free space are (e4defrag -c, e2freefrag).
    Frag(cmd::frag::Args),
    /// Rewrite fragmented files into fewer extents (e4defrag): offline on an
    /// image, or through an ext4kit mount.
    Defrag(cmd::defrag::Args),
    /// Where a file's blocks lie: its extents, and a plot of logical
    /// against physical block.
    Layout(cmd::layout::Args),
    /// Copy a tree out of the image, preserving metadata.
    Export(cmd::export::Args),
    /// Copy a host tree into the image, preserving metadata.
    Import(cmd::import::Args),
    /// Create directories.
    Mkdir(cmd::edit::MkdirArgs),
    /// Rename or move a file or directory.
    Mv(cmd::edit::MvArgs),
    /// Remove files or directories.
    Rm(cmd::edit::RmArgs),
    /// Make hard or symbolic links.
    Ln(cmd::edit::LnArgs),
    /// Create empty files or update their times.
    Touch(cmd::edit::TouchArgs),
    /// Write standard input into a file.
    Write(cmd::edit::WriteArgs),
    /// Change permission bits.
    Chmod(cmd::edit::ChmodArgs),
    /// Change owner and group.
    Chown(cmd::edit::ChownArgs),
    /// Preallocate, punch, zero, collapse or insert a range of a file
    /// (fallocate(1)'s options).
    Fallocate(cmd::fallocate::Args),
    /// Create a new, empty file system (like mke2fs).
    Mkfs(cmd::mkfs::Args),
    /// Check (-n) or repair (-p, -y) an image as e2fsck does.
    Fsck(cmd::fsck::Args),
    /// Serve the image through FUSE at a mount point.
    Mount(cmd::mount::Args),
    /// Unmount, waiting until the server has finished writing the image.
    Umount(cmd::mount::UmountArgs),
    /// Make everything written to an ext4kit mount durable now.
    Sync(cmd::sync::Args),
    /// fscrypt keys for a running mount: `key add MOUNTPOINT [DESCRIPTOR=]FILE`.
    Key(cmd::key::Args),
    /// Change tunable parameters of an unmounted image (like tune2fs):
    /// features, label, UUID, error behaviour, check intervals.
    Tune(cmd::tune::Args),
    /// Quota usage and limits per user, group and project (like
    /// repquota); `--set TYPE ID` changes one id's limits.
    Quota(cmd::quota::Args),
    /// Show or set a file's project id (`--inherit`: PROJINHERIT).
    Project(cmd::quota::ProjectArgs),
    /// Grow or shrink an unmounted image (like resize2fs); -P prints the
    /// minimum size.
    Resize(cmd::resize::Args),
    /// Put back what an undo file saved (`-z` of mkfs, tune, resize,
    /// fsck; e2fsprogs' too), like e2undo.
    Undo(cmd::undo::Args),
    /// Benchmarks: `bench mount` compares kernel ext4, fuse2fs and ext4kit.
    Bench(cmd::bench::Args),
    /// A metadata-only image for bug reports (like e2image -r/-Q, -s, -a);
    /// -r on a QCOW2 image turns it back into raw.
    Image(cmd::image::Args),
    /// debugfs's inspection commands (icheck, ncheck, htree, logdump…);
    /// without a command, an interactive prompt.
    Debug(cmd::debug::Args),
    /// Print a shell completion script (bash, zsh, fish, elvish,
    /// powershell).
    Completions(cmd::completions::Args),
    /// Write a man page for every command into a directory.
    Man(cmd::man::Args),
}

fn main() -> ExitCode {
    logger::init();
    let argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let as_helper = argv
        .first()
        .and_then(|a| std::path::Path::new(a).file_name())
        .is_some_and(|n| n == "mount.fuse.ext4kit" || n == "mount.ext4kit");
    let cli = if as_helper {
        Cli::parse_from(cmd::mount::helper_args(&argv))
    } else if argv.get(1).is_some_and(|a| a == "fsck") {
        // e2fsck's usage error is exit 16, not clap's 2.
        Cli::try_parse().unwrap_or_else(|e| {
            let _ = e.print();
            std::process::exit(if e.use_stderr() { 16 } else { 0 })
        })
    } else {
        Cli::parse()
    };
    let r = match cli.command {
        Command::Info(a) => cmd::info::run(a),
        Command::Ls(a) => cmd::ls::run(a),
        Command::Cat(a) => cmd::cat::run(a),
        Command::Verity(a) => cmd::verity::run(a),
        Command::Stat(a) => cmd::stat::run(a),
        Command::Frag(a) => cmd::frag::run(a),
        Command::Defrag(a) => cmd::defrag::run(a),
        Command::Layout(a) => cmd::layout::run(a),
        Command::Export(a) => cmd::export::run(a),
        Command::Import(a) => cmd::import::run(a),
        Command::Mkdir(a) => cmd::edit::mkdir(a),
        Command::Mv(a) => cmd::edit::mv(a),
        Command::Rm(a) => cmd::edit::rm(a),
        Command::Ln(a) => cmd::edit::ln(a),
        Command::Touch(a) => cmd::edit::touch(a),
        Command::Write(a) => cmd::edit::write(a),
        Command::Chmod(a) => cmd::edit::chmod(a),
        Command::Chown(a) => cmd::edit::chown(a),
        Command::Fallocate(a) => cmd::fallocate::run(a),
        Command::Mkfs(a) => cmd::mkfs::run(a),
        Command::Fsck(a) => cmd::fsck::run(a),
        Command::Mount(a) => cmd::mount::run(a),
        Command::Umount(a) => cmd::mount::umount(a),
        Command::Sync(a) => cmd::sync::run(a),
        Command::Key(a) => cmd::key::run(a),
        Command::Tune(a) => cmd::tune::run(a),
        Command::Quota(a) => cmd::quota::run(a),
        Command::Project(a) => cmd::quota::project(a),
        Command::Resize(a) => cmd::resize::run(a),
        Command::Undo(a) => cmd::undo::run(a),
        Command::Bench(a) => cmd::bench::run(a),
        Command::Image(a) => cmd::image::run(a),
        Command::Debug(a) => cmd::debug::run(a),
        Command::Completions(a) => cmd::completions::run(a, Cli::command()),
        Command::Man(a) => cmd::man::run(a, Cli::command()),
    };
    let r = open::end_undo(r);
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
