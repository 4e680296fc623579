//! A deterministic source-like tarball for the `untar` workload: nested
//! directories of 1–40 KiB text files, written in the POSIX ustar format
//! (512-byte headers, data padded to 512 bytes, two zero blocks at the
//! end), so that every target extracts exactly the same bytes.

use std::io::{self, BufWriter, Write};
use std::path::Path;

use crate::rng::Rng;

const BLOCK: usize = 512;
/// Files per directory, on average (a source tree's typical fan-out).
const FILES_PER_DIR: usize = 25;
/// Deepest directory level below the top.
const MAX_DEPTH: usize = 5;
const WORDS: &[&str] = &[
    "fn", "let", "mut", "struct", "impl", "return", "if", "else", "match", "self", "pub", "use", "for", "in", "while",
    "buffer", "inode", "block", "extent", "offset", "length", "error", "result", "count", "index", "{", "}", "(", ")",
    ";", "=", "+", "->", "&", "0", "1", "4096", "//", "*", "u64", "u32", "usize",
];

/// What [`write_source_tree`] wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TreeStats {
    /// Regular files.
    pub files: usize,
    /// Directories, the top one included.
    pub dirs: usize,
    /// Bytes of file data.
    pub bytes: u64,
}

/// Writes a tarball of `files` text files (1–40 KiB each) spread over
/// nested directories under `tree/`, the same for the same `seed`.
pub fn write_source_tree(path: &Path, files: usize, seed: u64) -> io::Result<TreeStats> {
    let mut out = BufWriter::with_capacity(1 << 20, std::fs::File::create(path)?);
    let stats = source_tree(&mut out, files, seed)?;
    out.into_inner().map_err(|e| e.into_error())?.sync_all()?;
    Ok(stats)
}

/// The tarball of [`write_source_tree`], written to `out`.
pub fn source_tree(out: &mut impl Write, files: usize, seed: u64) -> io::Result<TreeStats> {
    let mut rng = Rng::new(seed);
    let corpus = text_corpus(&mut rng);
    let dirs = directory_tree(&mut rng, files.div_ceil(FILES_PER_DIR).max(1));
    for d in &dirs {
        header(out, &format!("{d}/"), 0, b'5', 0o755)?;
    }
    let mut bytes = 0u64;
    for i in 0..files {
        let dir = &dirs[rng.below(dirs.len())];
        let ext = [".c", ".h", ".rs", ".txt", ".md"][rng.below(5)];
        let size = rng.range(1024, 40 * 1024);
        let start = rng.below(corpus.len() - size);
        header(out, &format!("{dir}/f{i:05}{ext}"), size as u64, b'0', 0o644)?;
        out.write_all(&corpus[start..start + size])?;
        pad(out, size)?;
        bytes += size as u64;
    }
    out.write_all(&[0; 2 * BLOCK])?;
    Ok(TreeStats {
        files,
        dirs: dirs.len(),
        bytes,
    })
}

/// `n` directory paths, each a child of an earlier one, at most
/// [`MAX_DEPTH`] levels below `tree`.
fn directory_tree(rng: &mut Rng, n: usize) -> Vec<String> {
    let mut dirs = vec![("tree".to_string(), 0usize)];
    while dirs.len() < n {
        let (parent, depth) = dirs[rng.below(dirs.len())].clone();
        if depth < MAX_DEPTH {
            let name = format!("{parent}/d{:04}", dirs.len());
            dirs.push((name, depth + 1));
        }
    }
    dirs.into_iter().map(|(p, _)| p).collect()
}

/// 128 KiB of code-like lines that files are cut from.
fn text_corpus(rng: &mut Rng) -> Vec<u8> {
    let mut t = Vec::with_capacity(130 * 1024);
    while t.len() < 128 * 1024 {
        let indent = 4 * rng.below(4);
        t.extend(std::iter::repeat_n(b' ', indent));
        for w in 0..rng.range(2, 12) {
            if w > 0 {
                t.push(b' ');
            }
            t.extend_from_slice(WORDS[rng.below(WORDS.len())].as_bytes());
        }
        t.push(b'\n');
    }
    t
}

/// One ustar header block: name (≤ 100 bytes here), mode, ids, size,
/// mtime, checksum, type flag, magic "ustar\0" version "00".
fn header(out: &mut impl Write, name: &str, size: u64, kind: u8, mode: u32) -> io::Result<()> {
    let mut h = [0u8; BLOCK];
    if name.len() > 100 {
        return Err(io::Error::other(format!("tar name too long: {name}")));
    }
    h[..name.len()].copy_from_slice(name.as_bytes());
    octal(&mut h[100..108], u64::from(mode));
    octal(&mut h[108..116], 0);
    octal(&mut h[116..124], 0);
    octal(&mut h[124..136], size);
    octal(&mut h[136..148], 1_700_000_000);
    h[156] = kind;
    h[257..263].copy_from_slice(b"ustar\0");
    h[263..265].copy_from_slice(b"00");
    h[265..269].copy_from_slice(b"root");
    h[297..301].copy_from_slice(b"root");
    // The checksum is computed with its own field read as eight spaces.
    h[148..156].fill(b' ');
    let sum: u64 = h.iter().map(|&b| u64::from(b)).sum();
    octal(&mut h[148..155], sum);
    out.write_all(&h)
}

/// Zero-padded octal digits filling `field` but its last byte (NUL).
/// (Our sizes, ≤ 40 KiB, and checksums always fit.)
fn octal(field: &mut [u8], v: u64) {
    let width = field.len() - 1;
    let digits = format!("{v:0width$o}");
    debug_assert!(digits.len() == width, "{v} does not fit {width} octal digits");
    field[..width].copy_from_slice(&digits.as_bytes()[digits.len() - width..]);
    field[width] = 0;
}

fn pad(out: &mut impl Write, size: usize) -> io::Result<()> {
    let rem = size % BLOCK;
    if rem != 0 {
        out.write_all(&[0; BLOCK][..BLOCK - rem])?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// GNU tar lists exactly the files and directories written, with the
    /// right sizes (the format is what tar reads, not just what we think).
    #[test]
    fn tar_lists_the_generated_tree() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.tar");
        let stats = write_source_tree(&path, 300, 1).unwrap();
        let again = write_source_tree(&dir.path().join("u.tar"), 300, 1).unwrap();
        assert_eq!(stats, again);
        assert_eq!(
            std::fs::read(&path).unwrap(),
            std::fs::read(dir.path().join("u.tar")).unwrap()
        );
        let Ok(out) = std::process::Command::new("tar").arg("-tvf").arg(&path).output() else {
            ext4kit_testkit::skipped!("no tar");
            return;
        };
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let list = String::from_utf8(out.stdout).unwrap();
        let files: Vec<&str> = list.lines().filter(|l| l.starts_with('-')).collect();
        assert_eq!(files.len(), stats.files);
        assert_eq!(list.lines().filter(|l| l.starts_with('d')).count(), stats.dirs);
        let bytes: u64 = files
            .iter()
            .map(|l| l.split_whitespace().nth(2).unwrap().parse::<u64>().unwrap())
            .sum();
        assert_eq!(bytes, stats.bytes);
    }
}
