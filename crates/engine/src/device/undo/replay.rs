//! Replaying an undo file onto the image it was written for, with
//! e2undo's checks (`misc/e2undo.c`): the header's magic, checksum, block
//! sizes and feature flags; the image's superblock equal to the copy the
//! undo file recorded when it was last updated (so files are applied to
//! the right image, newest first); every key block's magic and checksum,
//! and every saved run's checksum, all before the first byte of the image
//! is written. Forcing skips what can be skipped (a bad checksum, a
//! mismatched superblock, a key block that cannot be read ends the keys);
//! a key longer than 512 undo blocks is refused even then. After replaying
//! an interrupted or damaged file the image's superblock is marked not
//! clean (and, for damage, in error), so that it gets checked.

use std::fmt;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

use ext4kit_format::FormatError;
use ext4kit_format::superblock::{RawSuperblock, STATE_ERROR, STATE_VALID};
use ext4kit_format::undo::{
    E2UNDO_FEATURE_COMPAT_FS_OFFSET, E2UNDO_MAX_BLOCK_SIZE, E2UNDO_MAX_EXTENT_BLOCKS, HEADER_SIZE, SUPERBLOCK_SIZE,
    UndoHeader, UndoKey, data_crc, decode_key_block, superblock_from_copy,
};

use crate::device::BlockDevice;

/// What may be overridden, and whether to write at all.
#[derive(Debug, Clone, Copy, Default)]
pub struct ReplayOptions {
    /// e2undo's `-f`: go on past checksum errors and a superblock mismatch.
    pub force: bool,
    /// e2undo's `-n`: check and list, write nothing.
    pub dry_run: bool,
}

/// Why an undo file is not replayed.
#[derive(Debug)]
pub enum UndoError {
    /// Not an undo file at all (too short, wrong magic).
    NotUndo(FormatError),
    /// A header field or checksum is wrong.
    Header(FormatError),
    /// A key block (at this undo block) is damaged or missing.
    KeyBlock(u64, String),
    /// The saved bytes of a run do not match their key's checksum.
    Data {
        /// File-system block the run starts at.
        fs_block: u64,
        /// Undo block holding it.
        undo_block: u64,
    },
    /// A key longer than e2undo allows.
    TooLong(u64),
    /// The image's superblock is not the one the undo file was made
    /// against; the list says which identifying fields differ.
    Mismatch(Vec<&'static str>),
    /// Reading or writing failed.
    Io(io::Error),
}

impl fmt::Display for UndoError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotUndo(e) => write!(f, "not an undo file ({e})"),
            Self::Header(e) => write!(f, "corrupt undo file header: {e}"),
            Self::KeyBlock(b, why) => write!(f, "corrupt undo file: key block at undo block {b}: {why}"),
            Self::Data { fs_block, undo_block } => write!(
                f,
                "corrupt undo file: checksum error in the saved file-system block {fs_block} (undo block {undo_block})"
            ),
            Self::TooLong(b) => write!(f, "corrupt undo file: the run saved for block {b} is too long"),
            Self::Mismatch(what) => {
                write!(f, "the file system superblock doesn't match the undo file")?;
                if !what.is_empty() {
                    write!(f, " ({})", what.join(", "))?;
                }
                write!(f, "; -f replays anyway")
            }
            Self::Io(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for UndoError {}

impl From<io::Error> for UndoError {
    fn from(e: io::Error) -> Self {
        Self::Io(e)
    }
}

/// One saved run, located in the undo file.
#[derive(Debug, Clone, Copy)]
pub struct SavedRun {
    /// The key.
    pub key: UndoKey,
    /// Undo block its bytes start at.
    pub undo_block: u64,
}

/// An undo file, read and checked.
#[derive(Debug)]
pub struct UndoFile {
    /// The header.
    pub header: UndoHeader,
    /// The runs, in the order the file holds them.
    pub runs: Vec<SavedRun>,
    /// Undo blocks of the key blocks, in order.
    pub key_blocks: Vec<u64>,
    /// Problems a forced read went past (header or run checksums, a key
    /// block that ends the keys early).
    pub damage: Vec<String>,
    sb_copy: [u8; SUPERBLOCK_SIZE],
}

/// `len` bytes at `at`; what lies past the end of the file is refused
/// before anything is allocated (the lengths come from the file itself).
fn read_exact(file: &File, at: u64, len: usize) -> io::Result<Vec<u8>> {
    let size = file.metadata()?.len();
    if at.checked_add(len as u64).is_none_or(|end| end > size) {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            format!("{len} bytes at byte {at} are past the end of the undo file"),
        ));
    }
    let mut buf = vec![0u8; len];
    file.read_exact_at(&mut buf, at)?;
    Ok(buf)
}

impl UndoFile {
    /// Reads the header, the superblock copy and every key, checking each
    /// saved run's checksum.
    ///
    /// # Errors
    /// What e2undo refuses (with `force`, only what it refuses even then).
    pub fn read(file: &File, force: bool) -> Result<Self, UndoError> {
        let head = read_exact(file, 0, HEADER_SIZE)
            .map_err(|_| UndoError::NotUndo(FormatError::truncated("undo_header", HEADER_SIZE, file_len(file))))?;
        let (header, crc) = UndoHeader::decode(&head).map_err(UndoError::NotUndo)?;
        let mut damage = Vec::new();
        note(crc, force, &mut damage).map_err(UndoError::Header)?;
        // Zero, or past e2undo's limit, even forcing cannot read by.
        if header.block_size == 0 || header.fs_block_size == 0 || header.block_size > E2UNDO_MAX_BLOCK_SIZE {
            return Err(UndoError::Header(FormatError::invalid(
                "undo_header",
                "block_size",
                32,
                0,
            )));
        }
        note(header.validate(), force, &mut damage).map_err(UndoError::Header)?;
        let bs = u64::from(header.block_size);
        let sb_at = header
            .super_offset
            .checked_mul(bs)
            .ok_or_else(|| too_far("super_offset"))?;
        let sb = read_exact(file, sb_at, SUPERBLOCK_SIZE)?;
        let mut sb_copy = [0u8; SUPERBLOCK_SIZE];
        sb_copy.copy_from_slice(&sb);
        let (runs, key_blocks) = read_keys(file, &header, force, &mut damage)?;
        Ok(Self {
            header,
            runs,
            key_blocks,
            damage,
            sb_copy,
        })
    }

    /// The superblock the undo file was last updated against.
    pub fn superblock(&self) -> [u8; SUPERBLOCK_SIZE] {
        superblock_from_copy(&self.sb_copy)
    }

    /// Replays at byte `offset` of the device whatever the header says
    /// (e2undo's `-o`).
    pub fn set_fs_offset(&mut self, offset: u64) {
        self.header.fs_offset = offset;
        self.header.f_compat |= E2UNDO_FEATURE_COMPAT_FS_OFFSET;
    }

    /// Byte offset of the file system on the device.
    pub fn fs_offset(&self) -> u64 {
        if self.header.f_compat & E2UNDO_FEATURE_COMPAT_FS_OFFSET != 0 {
            self.header.fs_offset
        } else {
            0
        }
    }

    /// e2undo's `check_filesystem`: the image's superblock must equal the
    /// recorded copy, which must match its checksum.
    ///
    /// # Errors
    /// [`UndoError::Mismatch`] naming the differing fields; the I/O error.
    pub fn check_image(&self, dev: &dyn BlockDevice) -> Result<(), UndoError> {
        let mut now = [0u8; SUPERBLOCK_SIZE];
        dev.read_at(self.fs_offset() + 1024, &mut now)?;
        self.check_superblock(&now)
    }

    /// [`UndoFile::check_image`] given the image's superblock `now`.
    ///
    /// # Errors
    /// [`UndoError::Mismatch`] naming the differing fields.
    pub fn check_superblock(&self, now: &[u8; SUPERBLOCK_SIZE]) -> Result<(), UndoError> {
        let now = *now;
        let recorded = self.superblock();
        if now != recorded {
            return Err(UndoError::Mismatch(differences(&now, &recorded)));
        }
        if data_crc(&recorded) != self.header.sb_crc {
            return Err(UndoError::Mismatch(vec!["undo file superblock checksum"]));
        }
        Ok(())
    }
}

fn file_len(file: &File) -> usize {
    file.metadata().map_or(0, |m| m.len() as usize)
}

fn too_far(field: &'static str) -> UndoError {
    UndoError::Header(FormatError::invalid("undo_header", field, 0, u64::MAX))
}

/// Passes `r`, or under `force` records its error and passes anyway.
fn note(r: Result<(), FormatError>, force: bool, damage: &mut Vec<String>) -> Result<(), FormatError> {
    match r {
        Err(e) if force => {
            damage.push(e.to_string());
            Ok(())
        }
        r => r,
    }
}

/// Which of the fields e2undo names differ (`print_undo_mismatch`).
fn differences(now: &[u8; SUPERBLOCK_SIZE], recorded: &[u8; SUPERBLOCK_SIZE]) -> Vec<&'static str> {
    let (Ok(a), Ok(b)) = (RawSuperblock::parse(now), RawSuperblock::parse(recorded)) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    if a.s_uuid != b.s_uuid {
        out.push("UUID does not match");
    }
    if a.s_mtime.get() != b.s_mtime.get() || a.s_mtime_hi != b.s_mtime_hi {
        out.push("last mount time does not match");
    }
    if a.s_wtime.get() != b.s_wtime.get() || a.s_wtime_hi != b.s_wtime_hi {
        out.push("last write time does not match");
    }
    if a.s_kbytes_written.get() != b.s_kbytes_written.get() {
        out.push("lifetime write counter does not match");
    }
    out
}

/// Every key, from the key blocks that start at `key_offset` and follow
/// their runs' data, each run's checksum checked.
fn read_keys(
    file: &File,
    h: &UndoHeader,
    force: bool,
    damage: &mut Vec<String>,
) -> Result<(Vec<SavedRun>, Vec<u64>), UndoError> {
    let bs = u64::from(h.block_size);
    let per_block = h.keys_per_block().max(1) as u64;
    let mut runs = Vec::new();
    let mut key_blocks = Vec::new();
    let mut blk = h.key_offset;
    let mut done = 0u64;
    while done < h.num_keys {
        let count = (h.num_keys - done).min(per_block) as usize;
        let kb = blk
            .checked_mul(bs)
            .ok_or_else(|| too_far("key_offset"))
            .and_then(|at| read_exact(file, at, bs as usize).map_err(UndoError::Io))
            .and_then(|b| decode_key_block(&b, count).map_err(|e| UndoError::KeyBlock(blk, e.to_string())));
        let keys = match kb {
            Ok(k) => k,
            Err(e) if force => {
                damage.push(format!("{e}: the keys stop there"));
                break;
            }
            Err(UndoError::Io(e)) => return Err(UndoError::KeyBlock(blk, format!("cannot be read ({e})"))),
            Err(e) => return Err(e),
        };
        key_blocks.push(blk);
        blk += 1;
        for key in keys {
            if u64::from(key.size) > u64::from(E2UNDO_MAX_EXTENT_BLOCKS) * bs {
                return Err(UndoError::TooLong(key.fs_block));
            }
            let run = SavedRun { key, undo_block: blk };
            blk += u64::from(key.size).div_ceil(bs);
            check_run(file, h, &run, force, damage)?;
            runs.push(run);
        }
        done += count as u64;
    }
    Ok((runs, key_blocks))
}

fn check_run(
    file: &File,
    h: &UndoHeader,
    run: &SavedRun,
    force: bool,
    damage: &mut Vec<String>,
) -> Result<(), UndoError> {
    let bad = UndoError::Data {
        fs_block: run.key.fs_block,
        undo_block: run.undo_block,
    };
    let ok = run_bytes(file, h, run).is_ok_and(|d| data_crc(&d) == run.key.crc);
    if ok {
        return Ok(());
    }
    if force {
        damage.push(bad.to_string());
        return Ok(());
    }
    Err(bad)
}

fn run_bytes(file: &File, h: &UndoHeader, run: &SavedRun) -> io::Result<Vec<u8>> {
    let at = run
        .undo_block
        .checked_mul(u64::from(h.block_size))
        .ok_or_else(|| io::Error::from_raw_os_error(libc::EFBIG))?;
    read_exact(file, at, run.key.size as usize)
}

/// What a replay did.
#[derive(Debug, Default)]
pub struct ReplayReport {
    /// Runs written back (or, on a dry run, that would be).
    pub runs: usize,
    /// Bytes written back.
    pub bytes: u64,
    /// The undo file was not finished: the command it recorded was
    /// interrupted.
    pub incomplete: bool,
    /// The superblock was marked for a check afterwards.
    pub marked_for_check: bool,
}

/// Writes every saved run back onto `dev` (`fs_block * fs_block_size`
/// bytes past the file system's offset); `each` sees every run first (for
/// `-v`). Call [`UndoFile::check_image`] before, unless forced.
///
/// # Errors
/// The I/O error.
pub fn replay(
    undo: &UndoFile,
    file: &File,
    dev: &dyn BlockDevice,
    opts: ReplayOptions,
    each: &mut dyn FnMut(&SavedRun),
) -> Result<ReplayReport, UndoError> {
    let h = &undo.header;
    let mut report = ReplayReport {
        incomplete: !h.finished(),
        ..ReplayReport::default()
    };
    let mut order: Vec<&SavedRun> = undo.runs.iter().collect();
    order.sort_by_key(|r| r.key.fs_block);
    for run in order {
        each(run);
        report.runs += 1;
        report.bytes += u64::from(run.key.size);
        if opts.dry_run {
            continue;
        }
        let data = run_bytes(file, h, run)?;
        let at = run
            .key
            .fs_block
            .checked_mul(u64::from(h.fs_block_size))
            .and_then(|b| b.checked_add(undo.fs_offset()))
            .ok_or_else(|| io::Error::from_raw_os_error(libc::EFBIG))?;
        dev.write_at(at, &data)?;
    }
    if !opts.dry_run && (opts.force || report.incomplete || !undo.damage.is_empty()) {
        mark_for_check(dev, undo.fs_offset(), !undo.damage.is_empty())?;
        report.marked_for_check = true;
    }
    if !opts.dry_run {
        dev.flush()?;
    }
    Ok(report)
}

/// Clears the clean flag (and sets the error flag for a damaged undo
/// file) in the primary superblock, as e2undo does after a forced or
/// incomplete replay, so that the next check is a full one.
fn mark_for_check(dev: &dyn BlockDevice, fs_offset: u64, errors: bool) -> io::Result<()> {
    let at = fs_offset + 1024;
    let mut buf = [0u8; SUPERBLOCK_SIZE];
    dev.read_at(at, &mut buf)?;
    let Ok(mut sb) = RawSuperblock::parse(&buf) else {
        return Ok(());
    };
    if sb.s_magic.get() != ext4kit_format::superblock::EXT4_SUPER_MAGIC {
        return Ok(());
    }
    let mut state = sb.s_state.get() & !STATE_VALID;
    if errors {
        state |= STATE_ERROR;
    }
    sb.s_state.set(state);
    if sb.features().metadata_csum() {
        sb.set_checksum();
    }
    dev.write_at(at, &sb.encode())
}
