//! Raw images as `e2image -r` writes them, to every destination it takes:
//! a new file (blocks that read as zeros left as holes), an existing file
//! or device written in place (blocks outside the set left as they are,
//! and with `-c` set blocks already holding the right bytes not written,
//! so that re-copying a file system onto an old copy writes only what
//! changed), a byte offset into the destination (`-O`), a pipe (`-`:
//! every block in order, gaps as zeros), the same file as the source (a
//! file system moved within it: copied from the far end when it moves
//! towards the end, as memmove), or nowhere (`-n`: what would be written
//! is only reported).

use std::fs::File;
use std::io::Write;
use std::os::unix::fs::FileExt;

use super::MetadataBlocks;
use crate::error::{Error, Result};
use crate::fs::Filesystem;

/// Where a raw image goes.
pub enum RawSink<'a> {
    /// A file or device, written in place from `RawOptions::dest_offset`.
    File(&'a File),
    /// A pipe or terminal: the whole image, in order.
    Stream(&'a mut dyn Write),
}

/// How a raw image is written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RawOptions {
    /// Byte offset of the image in a [`RawSink::File`] (`e2image -O`).
    pub dest_offset: u64,
    /// The destination held data before: blocks of the set that read as
    /// zeros are written too, not left as holes (e2image checks for zero
    /// blocks only in a file it created).
    pub existing: bool,
    /// Read each block at its destination first and write only those
    /// that differ (`e2image -c`).
    pub skip_same: bool,
    /// Write nothing; report what would be written (`e2image -n`).
    pub dry_run: bool,
    /// Copy the highest blocks first: the destination is the source file
    /// and the file system moves towards its end.
    pub descending: bool,
}

/// What writing a raw image did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RawStats {
    /// Blocks in the set.
    pub blocks: u64,
    /// Blocks written (or, on a dry run, that would be).
    pub written: u64,
    /// Blocks left out because they read as zeros.
    pub zeros: u64,
    /// Blocks left out because the destination already held them (`-c`).
    pub same: u64,
    /// Names replaced and kept by `-s`.
    pub names_scrambled: u64,
    /// Names `-s` kept.
    pub names_kept: u64,
}

/// One block of the set, as handled: `written` says whether it was (or
/// would be) written.
#[derive(Debug, Clone, Copy)]
pub struct RawBlock {
    /// File-system block.
    pub block: u64,
    /// Written, rather than left out.
    pub written: bool,
}

fn io_err(offset: u64) -> impl FnOnce(std::io::Error) -> Error {
    move |source| Error::Io { offset, source }
}

impl Filesystem {
    /// Writes `set` as a raw image into `sink`; `each` sees every block of
    /// the set as it is handled (for progress, and `-n`'s listing).
    ///
    /// # Errors
    /// I/O errors reading the image or writing the sink.
    pub fn write_raw_image_to(
        &self,
        set: &MetadataBlocks,
        sink: RawSink<'_>,
        opts: RawOptions,
        each: &mut dyn FnMut(RawBlock),
    ) -> Result<RawStats> {
        let (bs, log) = (self.block_size() as u64, self.geo.block_size_log2);
        let end = self.geo.blocks_count << log;
        let mut stats = RawStats {
            blocks: set.count(),
            ..RawStats::default()
        };
        let mut check = vec![0u8; bs as usize];
        let last = self.geo.blocks_count.saturating_sub(1);
        let names = match sink {
            RawSink::File(file) => {
                let mut tail_written = false;
                let names = self.each_set_block(set, opts.descending, |block, data| {
                    let at = (block << log) + opts.dest_offset;
                    let same_before = stats.same;
                    let write = if !opts.existing && is_zero(data) {
                        stats.zeros += 1;
                        false
                    } else if opts.skip_same && same_at(file, at, data, &mut check) {
                        stats.same += 1;
                        false
                    } else {
                        true
                    };
                    tail_written |= block == last && (write || stats.same > same_before);
                    if write {
                        stats.written += 1;
                        if !opts.dry_run {
                            file.write_all_at(data, at).map_err(io_err(at))?;
                        }
                    }
                    each(RawBlock { block, written: write });
                    Ok(())
                })?;
                // As e2image: a file whose last blocks were not written ends
                // where the image does.
                let meta = file.metadata().map_err(io_err(0))?;
                let want = end + opts.dest_offset;
                if !opts.dry_run && meta.is_file() && (meta.len() < want || !tail_written) {
                    file.set_len(want).map_err(io_err(want))?;
                }
                names
            }
            RawSink::Stream(out) => {
                let mut next = 0u64;
                let zeros = vec![0u8; bs as usize];
                let gap = |out: &mut dyn Write, to: u64, next: &mut u64| -> Result<()> {
                    while *next < to {
                        if !opts.dry_run {
                            out.write_all(&zeros).map_err(io_err(*next << log))?;
                        }
                        *next += 1;
                    }
                    Ok(())
                };
                let names = self.each_set_block(set, false, |block, data| {
                    gap(out, block, &mut next)?;
                    stats.written += 1;
                    if opts.dry_run {
                        // e2image -n lists no block it would send as zeros.
                        if is_zero(data) {
                            stats.written -= 1;
                            stats.zeros += 1;
                        }
                    } else {
                        out.write_all(data).map_err(io_err(block << log))?;
                    }
                    each(RawBlock {
                        block,
                        written: !(opts.dry_run && is_zero(data)),
                    });
                    next = block + 1;
                    Ok(())
                })?;
                gap(out, self.geo.blocks_count, &mut next)?;
                out.flush().map_err(io_err(end))?;
                names
            }
        };
        (stats.names_scrambled, stats.names_kept) = names;
        Ok(stats)
    }
}

fn is_zero(data: &[u8]) -> bool {
    data.iter().all(|&b| b == 0)
}

/// True when `file` already holds `data` at `at` (what lies past its end
/// does not).
fn same_at(file: &File, at: u64, data: &[u8], buf: &mut [u8]) -> bool {
    file.read_exact_at(buf, at).is_ok() && buf == data
}
