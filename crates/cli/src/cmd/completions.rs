//! `ext4kit completions SHELL`: a completion script for the shell, made at
//! run time from the same clap definition that parses the arguments, so
//! it always matches the installed binary.

use anyhow::Result;
use clap_complete::Shell;

/// Arguments of `completions`.
#[derive(clap::Args)]
pub struct Args {
    /// bash, zsh, fish, elvish or powershell.
    shell: Shell,
}

/// Writes the script for `a.shell` to standard output. It is made in
/// memory first: clap_complete panics on a failed write, and a reader that
/// stops early (`| head`) is no failure.
pub fn run(a: Args, mut cli: clap::Command) -> Result<()> {
    use std::io::Write as _;
    let name = cli.get_name().to_string();
    let mut script = Vec::new();
    clap_complete::generate(a.shell, &mut cli, name, &mut script);
    let mut out = std::io::stdout().lock();
    out.write_all(&script)?;
    out.flush()?;
    Ok(())
}
