//! `ext4kit debug IMAGE [CMD [ARGS]…]`: the debugfs commands an ext4
//! engineer reaches for, with debugfs's output so the answers read (and
//! parse) the same; with `-w`, also its raw writing commands. Without
//! CMD, a prompt reads commands from stdin (on a terminal with line
//! editing, history and Tab completion of commands and image paths);
//! `-f FILE` runs a command file as debugfs -f. The image is read as is,
//! a dirty journal not replayed (as debugfs), unless `--replay` or `-w`.

mod blocks;
mod dir;
mod journal;
mod shell;
mod write;

use std::io::BufRead;
use std::path::PathBuf;

use anyhow::{Result, bail};
use ext4kit_engine::{Filesystem, Inode};

use crate::ImageArgs;
use crate::open::{open_ro, open_rw_uncounted};

/// Arguments of `debug`.
#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    image: ImageArgs,
    /// Replay a dirty journal in memory first (debugfs reads the image as is).
    #[arg(long)]
    replay: bool,
    /// Open for writing (debugfs -w): the journal is replayed first, and
    /// set_super_value, set_inode_field, set_bg, freeb/setb, freei/seti,
    /// link and unlink are allowed, each one journaled transaction.
    #[arg(short = 'w', long = "writable")]
    write: bool,
    /// Run the commands of this file, one a line (debugfs -f); `-` is stdin.
    #[arg(short = 'f', value_name = "FILE", conflicts_with = "cmd")]
    file: Option<PathBuf>,
    /// The command and its arguments; none starts the interactive prompt.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    cmd: Vec<String>,
}

/// Opens the image and runs one command, a command file, or the prompt.
pub fn run(mut a: Args) -> Result<()> {
    a.image.ignore_journal = !a.replay && !a.write;
    let fs = if a.write {
        open_rw_uncounted(&a.image)?
    } else {
        open_ro(&a.image)?
    };
    if !a.cmd.is_empty() {
        return exec(&fs, &a.cmd);
    }
    match &a.file {
        Some(p) if p.as_os_str() != "-" => lines(&fs, std::io::BufReader::new(std::fs::File::open(p)?), true),
        Some(_) => lines(&fs, std::io::stdin().lock(), true),
        None if std::io::IsTerminal::is_terminal(&std::io::stdin()) => {
            shell::prompt(&fs, |line| one_line(&fs, line, false))
        }
        None => lines(&fs, std::io::stdin().lock(), false),
    }
}

/// Runs each line; a failing command is reported and the next one read.
/// `echo` prints each command first, as debugfs -f does.
fn lines(fs: &Filesystem, input: impl BufRead, echo: bool) -> Result<()> {
    for line in input.lines() {
        if !one_line(fs, &line?, echo)? {
            break;
        }
    }
    Ok(())
}

/// Runs the command on `line`; false when it asks to leave.
fn one_line(fs: &Filesystem, line: &str, echo: bool) -> Result<bool> {
    let words: Vec<String> = line.split_whitespace().map(str::to_string).collect();
    match words.first().map(String::as_str) {
        None => return Ok(true),
        Some(w) if w.starts_with('#') => return Ok(true),
        Some("q" | "quit" | "exit") => return Ok(false),
        _ => {}
    }
    if echo {
        outln!("debugfs: {line}");
    }
    if let Err(e) = exec(fs, &words) {
        if crate::is_broken_pipe(&e) {
            return Err(e);
        }
        eprintln!("{}: {e:#}", words[0]);
    }
    Ok(true)
}

/// Runs one command.
fn exec(fs: &Filesystem, words: &[String]) -> Result<()> {
    let (cmd, args) = words.split_first().map(|(c, a)| (c.as_str(), a)).unwrap_or(("", &[]));
    match cmd {
        "icheck" => blocks::icheck(fs, args),
        "ncheck" => blocks::ncheck(fs, args),
        "blocks" => blocks::blocks(fs, args),
        "bmap" => blocks::bmap(fs, args),
        "ex" | "dump_extents" | "extents" => blocks::extents(fs, args),
        "imap" => blocks::imap(fs, args),
        "ffb" | "find_free_block" => blocks::ffb(fs, args),
        "ffi" | "find_free_inode" => blocks::ffi(fs, args),
        "htree" | "htree_dump" => dir::htree(fs, args),
        "dx_hash" | "hash" => dir::dx_hash(fs, args),
        "logdump" => journal::logdump(fs, args),
        "ssv" | "set_super_value" | "sif" | "set_inode_field" | "set_bg" | "set_block_group" => {
            writable(fs)?;
            write::set_field(fs, cmd, args)
        }
        "freeb" | "setb" => writable(fs).and_then(|()| write::mark_blocks(fs, cmd, args)),
        "freei" | "seti" => writable(fs).and_then(|()| write::mark_inodes(fs, cmd, args)),
        "link" | "ln" => writable(fs).and_then(|()| write::link(fs, args)),
        "unlink" => writable(fs).and_then(|()| write::unlink(fs, args)),
        "help" | "?" | "lr" | "list_requests" => help(),
        _ => bail!("unknown command (try help)"),
    }
}

/// Writing commands need `-w`, as debugfs's need `debugfs -w`.
fn writable(fs: &Filesystem) -> Result<()> {
    if fs.read_only_reason().is_some() {
        bail!("the image is open read-only (use debug -w)");
    }
    Ok(())
}

fn help() -> Result<()> {
    for (c, what) in [
        ("icheck BLOCK…", "the inode owning each block"),
        ("ncheck INODE…", "the paths of each inode"),
        ("blocks FILE", "the blocks of a file"),
        ("bmap FILE LBLK", "the physical block of a logical block"),
        ("ex, dump_extents FILE", "the extent tree"),
        ("imap FILE", "where the inode record lies"),
        ("ffb [COUNT [GOAL]]", "first free blocks"),
        ("ffi [DIR [MODE]]", "first free inode"),
        ("htree DIR", "a hashed directory's index and leaves"),
        ("dx_hash [-h HASH] [-s SEED] NAME", "a name's directory hash"),
        ("logdump", "the journal's transactions"),
        ("ssv FIELD VALUE | -l", "set a superblock field (-w)"),
        ("sif FILE FIELD VALUE | -l", "set an inode field (-w)"),
        ("set_bg GROUP FIELD VALUE | -l", "set a group descriptor field (-w)"),
        (
            "setb/freeb BLOCK [COUNT]",
            "mark blocks in use / free, counts untouched (-w)",
        ),
        (
            "seti/freei FILE [COUNT]",
            "mark inodes in use / free, counts untouched (-w)",
        ),
        ("link FILE DEST", "add a name, link count untouched (-w)"),
        ("unlink PATH", "remove a name, inode untouched (-w)"),
        ("quit", "leave the prompt"),
    ] {
        outln!("{c:<34} {what}");
    }
    outln!("FILE is a path or <INODE>.");
    Ok(())
}

/// A path, or `<INO>` as debugfs names inodes.
fn inode_of(fs: &Filesystem, spec: Option<&String>) -> Result<Inode> {
    let Some(spec) = spec else {
        bail!("missing file (a path or <INODE>)")
    };
    if let Some(n) = spec.strip_prefix('<').and_then(|s| s.strip_suffix('>')) {
        return Ok(fs.inode(n.parse()?)?);
    }
    let path = if spec.starts_with('/') {
        spec.clone()
    } else {
        format!("/{spec}")
    };
    Ok(fs.resolve(path.as_bytes())?)
}

/// A number as strtol(…, 0) reads it: decimal, 0x hex or 0 octal.
fn number(s: &str) -> Result<u64> {
    ext4kit_format::fields::number(s).map_err(anyhow::Error::msg)
}
