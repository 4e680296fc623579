//! `untar`: a source-like tarball ([`crate::tarball`]: nested directories
//! of 1–40 KiB text files) extracted through the file system as an
//! unpacker does — mkdir for each directory member, create + write in
//! record-sized calls + close for each file — then a sync; the time is
//! what a user waits for. The `bench mount` workload of the same name,
//! the small-file write load of issue 22's `tar` extraction; compilebench's
//! "initial create" (seed 001 table 1) is the same load with other sizes.
//!
//! Unlike GNU tar this sets no owner, mode or times after each member
//! (there is no such call in [`BenchFs`]): on FUSE those are SETATTR round
//! trips GNU tar makes and this does not.
//!
//! The tarball is made before the timed phase in an unnamed temporary
//! file and read back through a minimal POSIX ustar reader (512-byte
//! headers, octal fields, the `prefix` field, data padded to 512 bytes);
//! directories and regular files only. Every file's size is checked with
//! stat afterwards, untimed.
//!
//! Last, the tree is removed as `rm -rf` does: each directory listed,
//! its files unlinked, its subdirectories removed the same way, then
//! itself (the phase `rm -rf`, whose operations are the files and
//! directories removed).
//!
//! `-n` files (default 20,000, scaled), `--seed` the tree, `--io-size`
//! bytes per write call (default 10,240: GNU tar's record, the most one
//! of its writes carries).

use std::collections::HashSet;
use std::io::{BufReader, BufWriter, Read, Seek, Write};

use anyhow::{Context, Result, bail, ensure};

use super::fs::{BenchFs, timed};
use super::{Outcome, Params, Phase, Progress, Workload};
use crate::tarball::{self, TreeStats};

/// The workload's entry in the suite.
pub const WORKLOAD: Workload = Workload {
    name: "untar",
    about: "a source-like tarball extracted through the file system (mkdir, create+write+close), then sync",
    image_size,
    run,
    inspect: None,
};

const DEFAULT_FILES: u64 = 20_000;
const DEFAULT_IO: u64 = 10_240;
const BLOCK: usize = 512;

fn image_size(p: &Params) -> (u64, u64) {
    let n = p.n_or(DEFAULT_FILES);
    // Files average 20.5 KiB; 28 KiB each covers their last blocks.
    ((64 << 20) + n * (28 << 10), n + n / 16 + 1024)
}

/// A member of the archive, as its header describes it.
#[derive(Debug, PartialEq, Eq)]
enum Member {
    Dir(String),
    File(String, u64),
}

/// The number in an octal field (digits up to a NUL or space).
fn octal(field: &[u8]) -> Result<u64> {
    let digits: Vec<u8> = field
        .iter()
        .copied()
        .skip_while(|&b| b == b' ')
        .take_while(|&b| b != 0 && b != b' ')
        .collect();
    if digits.is_empty() {
        return Ok(0);
    }
    let text = std::str::from_utf8(&digits).context("a numeric header field is not text")?;
    u64::from_str_radix(text, 8).with_context(|| format!("header field {text:?} is not octal"))
}

fn text(field: &[u8]) -> Result<&str> {
    let end = field.iter().position(|&b| b == 0).unwrap_or(field.len());
    std::str::from_utf8(&field[..end]).context("a member name is not UTF-8")
}

/// A member's path as [`BenchFs`] takes it: relative, no `.` or `..`.
fn clean_path(prefix: &str, name: &str) -> Result<String> {
    let full = if prefix.is_empty() {
        name.to_string()
    } else {
        format!("{prefix}/{name}")
    };
    let path = full.trim_end_matches('/');
    let bad = path.is_empty() || path.split('/').any(|c| c.is_empty() || c == "." || c == "..");
    ensure!(!bad, "member path {full:?} is not a plain relative path");
    Ok(path.to_string())
}

/// Parses one header block; `None` for the zero block that ends the archive.
fn parse_header(h: &[u8; BLOCK]) -> Result<Option<Member>> {
    if h.iter().all(|&b| b == 0) {
        return Ok(None);
    }
    // The checksum counts its own eight bytes as spaces.
    let sum: u64 = h
        .iter()
        .enumerate()
        .map(|(i, &b)| if (148..156).contains(&i) { 32 } else { u64::from(b) })
        .sum();
    let recorded = octal(&h[148..156])?;
    ensure!(
        sum == recorded,
        "header checksum {recorded} but the block sums to {sum}"
    );
    let ustar = &h[257..262] == b"ustar";
    let prefix = if ustar { text(&h[345..500])? } else { "" };
    let path = clean_path(prefix, text(&h[..100])?)?;
    let size = octal(&h[124..136])?;
    match h[156] {
        b'5' => Ok(Some(Member::Dir(path))),
        b'0' | 0 => Ok(Some(Member::File(path, size))),
        kind => bail!(
            "{path}: member type {:?} is not supported (directories and files only)",
            kind as char
        ),
    }
}

/// Reads the next header from `r`; `None` at the end of the archive.
fn next_member(r: &mut impl Read) -> Result<Option<Member>> {
    let mut h = [0u8; BLOCK];
    r.read_exact(&mut h).context("the archive ends inside a header")?;
    parse_header(&h)
}

/// Makes the tarball in an unnamed temporary file and rewinds it.
fn make_tarball(files: u64, seed: u64) -> Result<(std::fs::File, TreeStats)> {
    let file = tempfile::tempfile().context("a temporary file for the tarball")?;
    let mut w = BufWriter::with_capacity(1 << 20, file);
    let stats = tarball::source_tree(&mut w, files as usize, seed)?;
    w.flush()?;
    let mut file = w.into_inner().map_err(|e| e.into_error())?;
    file.rewind()?;
    Ok((file, stats))
}

/// What an extraction made.
#[derive(Default)]
struct Extracted {
    dirs: Vec<String>,
    files: Vec<(String, u64)>,
    bytes: u64,
}

/// Extracts every member of `r` through `fs`, writing in `io`-byte calls.
fn extract(fs: &dyn BenchFs, r: &mut impl Read, io: usize, progress: &mut Progress) -> Result<Extracted> {
    let mut done = Extracted::default();
    let mut buf = vec![0u8; io];
    while let Some(m) = next_member(r)? {
        match m {
            Member::Dir(path) => {
                fs.mkdir(&path)?;
                done.dirs.push(path);
            }
            Member::File(path, size) => {
                let f = fs.create(&path)?;
                let mut at = 0;
                while at < size {
                    let len = (size - at).min(io as u64) as usize;
                    r.read_exact(&mut buf[..len])
                        .with_context(|| format!("{path}: the archive ends inside its data"))?;
                    fs.write_at(&f, at, &buf[..len])?;
                    at += len as u64;
                }
                fs.close(f)?;
                let pad = (BLOCK - size as usize % BLOCK) % BLOCK;
                r.read_exact(&mut [0u8; BLOCK][..pad])?;
                done.bytes += size;
                done.files.push((path, size));
            }
        }
        progress.step(1)?;
    }
    Ok(done)
}

fn run(fs: &mut dyn BenchFs, p: &Params, progress: &mut Progress) -> Result<Outcome> {
    let n = p.n_or(DEFAULT_FILES);
    let io = p.io_size.unwrap_or(DEFAULT_IO).clamp(1, 64 << 20);
    let mut out = Outcome::default();
    out.params.insert("files".into(), n.into());
    out.params.insert("io_size".into(), io.into());
    out.params.insert("seed".into(), p.seed.into());
    let (file, stats) = make_tarball(n, p.seed)?;
    progress.set_total((stats.files + stats.dirs) as u64);
    let mut r = BufReader::with_capacity(1 << 20, file);
    let fs: &dyn BenchFs = fs;
    let (got, s) = timed(fs, || extract(fs, &mut r, io as usize, progress))?;
    out.phases
        .push(Phase::new("extract", got.files.len() as u64, got.bytes, s));
    let ((), s) = timed(fs, || fs.sync())?;
    out.phases.push(Phase::new("sync", 1, 0, s));

    let want = (stats.files as u64, stats.dirs as u64, stats.bytes);
    let seen = (got.files.len() as u64, got.dirs.len() as u64, got.bytes);
    ensure!(
        seen == want,
        "extracted (files, dirs, bytes) {seen:?}, the tarball has {want:?}"
    );
    for (path, size) in &got.files {
        let st = fs.stat(path)?;
        ensure!(
            st.size == *size,
            "{path}: {} bytes after extraction, {size} in the tarball",
            st.size
        );
    }
    out.values.insert("directories".into(), got.dirs.len().into());
    out.values.insert("bytes".into(), got.bytes.into());

    let dirs: HashSet<&str> = got.dirs.iter().map(String::as_str).collect();
    let (removed, s) = timed(fs, || remove_children(fs, "", &dirs))?;
    let made = got.files.len() + got.dirs.len();
    ensure!(
        removed == made as u64,
        "rm -rf removed {removed} entries, extraction made {made}"
    );
    ensure!(fs.read_dir("")?.is_empty(), "entries are left after rm -rf");
    out.phases.push(Phase::new("rm -rf", removed, 0, s));
    Ok(out)
}

/// Removes everything under `dir` as `rm -rf` does, telling directories
/// from files by what the extraction made (as `rm` does by `d_type`);
/// gives the entries removed.
fn remove_children(fs: &dyn BenchFs, dir: &str, dirs: &HashSet<&str>) -> Result<u64> {
    let mut removed = 0;
    for e in fs.read_dir(dir)? {
        let path = if dir.is_empty() {
            e.name
        } else {
            format!("{dir}/{}", e.name)
        };
        if dirs.contains(path.as_str()) {
            removed += remove_children(fs, &path, dirs)?;
            fs.rmdir(&path)?;
        } else {
            fs.unlink(&path)?;
        }
        removed += 1;
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reader gives back exactly what the generator wrote, and a
    /// damaged header is refused rather than misread.
    #[test]
    fn the_reader_lists_the_generated_tree_and_refuses_a_bad_checksum() {
        let mut tar = Vec::new();
        let stats = tarball::source_tree(&mut tar, 30, 9).unwrap();
        let mut r = &tar[..];
        let (mut dirs, mut files, mut bytes) = (0, 0, 0u64);
        while let Some(m) = next_member(&mut r).unwrap() {
            match m {
                Member::Dir(p) => {
                    assert!(p.starts_with("tree") && !p.ends_with('/'), "{p}");
                    dirs += 1;
                }
                Member::File(_, size) => {
                    files += 1;
                    bytes += size;
                    let padded = size.div_ceil(BLOCK as u64) * BLOCK as u64;
                    r = &r[padded as usize..];
                }
            }
        }
        assert_eq!((files, dirs, bytes), (stats.files, stats.dirs, stats.bytes));
        let mut h: [u8; BLOCK] = tar[..BLOCK].try_into().unwrap();
        h[0] ^= 1;
        assert!(parse_header(&h).unwrap_err().to_string().contains("checksum"));
        assert!(clean_path("", "a/../b").is_err());
        assert_eq!(clean_path("pre", "x/").unwrap(), "pre/x");
    }
}
