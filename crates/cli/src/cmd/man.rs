//! `ext4kit man [DIR]`: one man page per command (`ext4kit.1`,
//! `ext4kit-fsck.1`, `ext4kit-bench-mount.1` …), made at run time from the
//! clap definition that parses the arguments, so the pages describe the
//! installed binary.

use std::path::PathBuf;

use anyhow::{Context, Result};

/// Arguments of `man`.
#[derive(clap::Args)]
pub struct Args {
    /// Where the pages go (created if missing), e.g.
    /// /usr/local/share/man/man1.
    #[arg(default_value = ".")]
    dir: PathBuf,
}

/// Writes the pages of `cli` and of every visible subcommand into `a.dir`.
pub fn run(a: Args, cli: clap::Command) -> Result<()> {
    std::fs::create_dir_all(&a.dir).with_context(|| format!("cannot create {}", a.dir.display()))?;
    clap_mangen::generate_to(cli, &a.dir).with_context(|| format!("cannot write man pages to {}", a.dir.display()))?;
    Ok(())
}
