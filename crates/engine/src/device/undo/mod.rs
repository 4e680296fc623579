//! Undo files (`-z FILE`, as mke2fs, tune2fs, e2fsck and resize2fs take
//! it): [`UndoDevice`] wraps the image and, before the first write to any
//! undo block, appends that block's old contents to an e2fsprogs undo file
//! (format: `ext4kit_format::undo`); [`replay`] puts them back, as
//! `e2undo` does.
//!
//! Ordering: e2fsprogs' undo I/O manager writes the old bytes and the
//! updated key block before passing the write on, but syncs the undo file
//! only when it sets it up and at close, so a crash can leave image blocks
//! on disk whose old contents are not. Here every write that saves new
//! blocks first syncs the undo file (data, key block, header), then reaches
//! the image: whatever the image holds after a crash, the undo file holds
//! the old contents of it. Writes to blocks already saved pass straight on.
//! [`UndoSync::AtClose`] chooses e2fsprogs' ordering instead, for speed:
//! the undo file is synced only when it is finished or dropped.
//! The header says "finished" ([`E2UNDO_STATE_FINISHED`]) only after
//! [`UndoDevice::finish`], once the command completed; an interrupted
//! file replays with a warning (and the superblock copy it holds may be
//! older than the image's, so the replay then needs forcing, as e2undo).

pub mod replay;

use std::collections::HashSet;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Mutex;

use ext4kit_format::undo::{
    E2UNDO_FEATURE_COMPAT_FS_OFFSET, E2UNDO_MAX_BLOCK_SIZE, E2UNDO_MAX_EXTENT_BLOCKS, E2UNDO_MIN_BLOCK_SIZE,
    E2UNDO_STATE_FINISHED, SUPERBLOCK_SIZE, UndoHeader, UndoKey, data_crc, encode_key_block, extend_crc,
    keys_per_block, superblock_copy,
};

use super::{BlockDevice, Passthrough};

/// Undo block of the header.
const HEADER_BLOCK: u64 = 0;
/// Undo block of the superblock copy.
const SUPER_BLOCK: u64 = 1;
/// Undo block of the first key block; data follows from block 3.
const FIRST_KEY_BLOCK: u64 = 2;

/// A device that saves old contents to an undo file before overwriting them.
pub struct UndoDevice {
    inner: Box<dyn BlockDevice>,
    log: Mutex<UndoLog>,
    sync: UndoSync,
}

/// When the undo file is made durable.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum UndoSync {
    /// Before every image write that saved new blocks: after a crash the
    /// undo file covers whatever reached the image.
    #[default]
    EveryWrite,
    /// Only at [`UndoDevice::finish`] and drop, as e2fsprogs' undo I/O
    /// manager: one sync instead of one per write, but a crash can leave
    /// image blocks whose old contents the undo file lacks.
    AtClose,
}

/// What has been saved, and where the undo file goes on.
struct UndoLog {
    file: File,
    block_size: u32,
    /// Undo blocks of the image already saved.
    saved: HashSet<u64>,
    /// Keys of the key block being filled.
    keys: Vec<UndoKey>,
    /// Undo block of the key block being filled.
    key_block: u64,
    /// Next free undo block.
    next: u64,
    num_keys: u64,
    finished: bool,
    /// Byte offset of the file system on its device, recorded in the
    /// header (`inner` is already seen from there on).
    fs_offset: u64,
}

impl UndoDevice {
    /// Wraps `inner`, creating the undo file at `path` with undo blocks of
    /// `block_size` bytes (the file system's block size: keys count in it).
    /// An undo file already there for this image, as the last command left
    /// it (its superblock copy equal to the image's), is continued in its
    /// own block size, as e2fsprogs does, so one file undoes a series of
    /// commands; any other non-empty file is refused, never overwritten.
    ///
    /// # Errors
    /// A block size out of range, a file that is not this image's undo
    /// file, the OS error.
    pub fn create(inner: Box<dyn BlockDevice>, path: &Path, block_size: u32) -> io::Result<Self> {
        Self::create_at(inner, path, block_size, 0)
    }

    /// [`UndoDevice::create`] for a file system `fs_offset` bytes into its
    /// device (`-o`): `inner` is seen from the file system's start (an
    /// [`OffsetDevice`](super::OffsetDevice)), keys count from there, and
    /// the header records the offset (`E2UNDO_FEATURE_COMPAT_FS_OFFSET`),
    /// as e2fsprogs' undo I/O manager with `offset=` does.
    ///
    /// # Errors
    /// As [`UndoDevice::create`]; an existing file for another offset.
    pub fn create_at(inner: Box<dyn BlockDevice>, path: &Path, block_size: u32, fs_offset: u64) -> io::Result<Self> {
        if !(E2UNDO_MIN_BLOCK_SIZE..=E2UNDO_MAX_BLOCK_SIZE).contains(&block_size) || !block_size.is_power_of_two() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("undo block size {block_size} is not a power of two from 1 KiB to 1 MiB"),
            ));
        }
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)?;
        let log = if file.metadata()?.len() > 0 {
            // Left as it is until something new is saved: a command that
            // then writes nothing leaves it as finished as it was.
            UndoLog::reopen(file, inner.as_ref(), path, fs_offset)?
        } else {
            let log = UndoLog {
                file,
                block_size,
                saved: HashSet::new(),
                keys: Vec::new(),
                key_block: FIRST_KEY_BLOCK,
                next: FIRST_KEY_BLOCK + 1,
                num_keys: 0,
                finished: false,
                fs_offset,
            };
            log.write_indexes(inner.as_ref())?;
            log.file.sync_all()?;
            log
        };
        Ok(Self {
            inner,
            log: Mutex::new(log),
            sync: UndoSync::default(),
        })
    }

    /// Chooses when the undo file is synced (default [`UndoSync::EveryWrite`]).
    #[must_use]
    pub fn with_sync(mut self, sync: UndoSync) -> Self {
        self.sync = sync;
        self
    }

    /// Marks the undo file complete, with the image's superblock as it is
    /// now (what a replay checks the image against), and syncs it.
    ///
    /// # Errors
    /// The OS error.
    pub fn finish(&self) -> io::Result<()> {
        let mut log = self.lock();
        log.finished = true;
        log.write_indexes(self.inner.as_ref())?;
        log.file.sync_all()
    }

    /// True while the undo file holds no saved block (not even from an
    /// earlier command).
    pub fn holds_nothing(&self) -> bool {
        self.lock().num_keys == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, UndoLog> {
        self.log.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Saves whatever of `[offset, offset + len)` is not saved yet; returns
    /// once the undo file holds it durably.
    fn save(&self, offset: u64, len: u64) -> io::Result<()> {
        if len == 0 {
            return Ok(());
        }
        let mut log = self.lock();
        let bs = u64::from(log.block_size);
        let end = offset
            .checked_add(len - 1)
            .ok_or_else(|| io::Error::from_raw_os_error(libc::EFBIG))?;
        let (first, last) = (offset / bs, end / bs);
        let mut grew = false;
        let mut blk = first;
        while blk <= last {
            if log.saved.contains(&blk) {
                blk += 1;
                continue;
            }
            let mut run = 1;
            while blk + run <= last && run < u64::from(E2UNDO_MAX_EXTENT_BLOCKS) && !log.saved.contains(&(blk + run)) {
                run += 1;
            }
            log.save_run(self.inner.as_ref(), blk, run)?;
            grew = true;
            blk += run;
        }
        if grew && self.sync == UndoSync::EveryWrite {
            log.write_indexes(self.inner.as_ref())?;
            log.file.sync_data()?;
        }
        Ok(())
    }
}

impl UndoLog {
    /// Continues the undo file in `file` (`try_reopen_undo_file`): every
    /// key read and checked, the blocks they cover counted as saved, new
    /// keys going on in the last key block if it has room.
    fn reopen(file: File, dev: &dyn BlockDevice, path: &Path, fs_offset: u64) -> io::Result<Self> {
        let refuse = |why: String| {
            io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!(
                    "{} exists and {why}: remove it or name another undo file",
                    path.display()
                ),
            )
        };
        let u = replay::UndoFile::read(&file, false).map_err(|e| refuse(format!("is unusable ({e})")))?;
        let mut now = [0u8; SUPERBLOCK_SIZE];
        dev.read_at(1024, &mut now)?;
        u.check_superblock(&now)
            .map_err(|e| refuse(format!("is not this image's undo file ({e})")))?;
        let h = u.header;
        if h.fs_block_size != h.block_size || u.fs_offset() != fs_offset {
            return Err(refuse("mixes block sizes or has an offset".into()));
        }
        let bs = u64::from(h.block_size);
        let mut saved = HashSet::new();
        let mut next = h.key_offset + 1;
        for r in &u.runs {
            let n = u64::from(r.key.size).div_ceil(bs);
            saved.extend(r.key.fs_block..r.key.fs_block + n);
            next = next.max(r.undo_block + n);
        }
        let in_last = (h.num_keys % keys_per_block(h.block_size).max(1) as u64) as usize;
        let (key_block, keys) = match u.key_blocks.last() {
            None => (h.key_offset, Vec::new()),
            Some(&kb) if in_last > 0 => (kb, u.runs[u.runs.len() - in_last..].iter().map(|r| r.key).collect()),
            Some(_) => {
                next += 1;
                (next - 1, Vec::new())
            }
        };
        Ok(Self {
            file,
            block_size: h.block_size,
            saved,
            keys,
            key_block,
            next,
            num_keys: h.num_keys,
            finished: h.finished(),
            fs_offset,
        })
    }

    /// Reads undo blocks `blk..blk + run` of the image (what lies past
    /// its end is not saved: there is nothing to put back) and appends
    /// them, extending the last key when the run continues it.
    fn save_run(&mut self, dev: &dyn BlockDevice, blk: u64, run: u64) -> io::Result<()> {
        self.finished = false;
        let bs = u64::from(self.block_size);
        for b in blk..blk + run {
            self.saved.insert(b);
        }
        let start = blk * bs;
        let avail = dev.len().saturating_sub(start).min(run * bs);
        if avail == 0 {
            return Ok(());
        }
        let mut old = vec![0u8; avail as usize];
        dev.read_at(start, &mut old)?;
        self.file.write_all_at(&old, self.next * bs)?;
        self.next += avail.div_ceil(bs);
        let limit = u64::from(E2UNDO_MAX_EXTENT_BLOCKS) * bs;
        match self.keys.last_mut() {
            Some(k)
                if u64::from(k.size) % bs == 0
                    && k.fs_block + u64::from(k.size) / bs == blk
                    && u64::from(k.size) + avail < limit =>
            {
                k.crc = extend_crc(k.crc, &old);
                k.size += avail as u32;
            }
            _ => self.add_key(UndoKey {
                fs_block: blk,
                crc: data_crc(&old),
                size: avail as u32,
            })?,
        }
        Ok(())
    }

    /// Adds a key; a full key block is written out and the next one takes
    /// the next free undo block.
    fn add_key(&mut self, key: UndoKey) -> io::Result<()> {
        self.keys.push(key);
        self.num_keys += 1;
        if self.keys.len() == keys_per_block(self.block_size) {
            self.write_key_block()?;
            self.keys.clear();
            self.key_block = self.next;
            self.next += 1;
        }
        Ok(())
    }

    fn write_key_block(&self) -> io::Result<()> {
        let b = encode_key_block(&self.keys, self.block_size);
        self.file.write_all_at(&b, self.key_block * u64::from(self.block_size))
    }

    /// Writes the key block being filled, the superblock copy and the
    /// header (`write_undo_indexes`).
    fn write_indexes(&self, dev: &dyn BlockDevice) -> io::Result<()> {
        if !self.keys.is_empty() {
            self.write_key_block()?;
        }
        let mut sb = [0u8; SUPERBLOCK_SIZE];
        if dev.len() >= 2048 {
            dev.read_at(1024, &mut sb)?;
        }
        let (copy, sb_crc) = superblock_copy(&sb);
        let bs = u64::from(self.block_size);
        self.file.write_all_at(&copy, SUPER_BLOCK * bs)?;
        let header = UndoHeader {
            num_keys: self.num_keys,
            super_offset: SUPER_BLOCK,
            key_offset: FIRST_KEY_BLOCK,
            block_size: self.block_size,
            fs_block_size: self.block_size,
            sb_crc,
            state: if self.finished { E2UNDO_STATE_FINISHED } else { 0 },
            f_compat: if self.fs_offset != 0 {
                E2UNDO_FEATURE_COMPAT_FS_OFFSET
            } else {
                0
            },
            fs_offset: self.fs_offset,
            ..UndoHeader::default()
        };
        self.file.write_all_at(&header.encode(), HEADER_BLOCK * bs)?;
        // The file spans whole blocks even before the first key block fills.
        let min_len = self.next * bs;
        if self.file.metadata()?.len() < min_len {
            self.file.set_len(min_len)?;
        }
        Ok(())
    }
}

impl Drop for UndoDevice {
    /// An unfinished command still leaves a usable (unfinished) undo file.
    fn drop(&mut self) {
        let log = self.lock();
        if !log.finished {
            let _ = log.write_indexes(self.inner.as_ref());
            let _ = log.file.sync_all();
        }
    }
}

/// Every write first saves what it overwrites.
impl Passthrough for UndoDevice {
    fn inner(&self) -> &dyn BlockDevice {
        &*self.inner
    }
    fn before_write(&self, offset: u64, len: u64) -> io::Result<()> {
        self.save(offset, len)
    }
}

#[cfg(test)]
mod tests {
    use super::replay::{ReplayOptions, UndoFile, replay};
    use super::*;
    use crate::device::MemDevice;
    use std::sync::Arc;

    fn xorshift(x: &mut u64) -> u64 {
        *x ^= *x << 13;
        *x ^= *x >> 7;
        *x ^= *x << 17;
        *x
    }

    /// Replays the undo file as it is now onto a copy of `now`.
    fn replayed(path: &Path, now: Vec<u8>) -> Vec<u8> {
        let file = File::open(path).unwrap();
        let undo = UndoFile::read(&file, false).unwrap();
        let dev = MemDevice::new(now);
        replay(&undo, &file, &dev, ReplayOptions::default(), &mut |_| {}).unwrap();
        dev.snapshot()
    }

    /// After every write (a crash could come next), the undo file as it
    /// stands takes the image back to where it started; at the end it is
    /// finished and still does.
    #[test]
    fn every_prefix_of_a_run_of_writes_is_undoable() {
        let mut seed = 0x9E37_79B9_7F4A_7C15u64;
        let len = 1 << 20;
        let original: Vec<u8> = (0..len).map(|_| xorshift(&mut seed) as u8).collect();
        let mem = Arc::new(MemDevice::new(original.clone()));
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("u.undo");
        let undo = UndoDevice::create(Box::new(mem.clone()), &path, 1024).unwrap();
        for i in 0..200u64 {
            let at = xorshift(&mut seed) % (len as u64 - 70_000);
            let n = (xorshift(&mut seed) % if i % 10 == 0 { 70_000 } else { 3000 }) as usize + 1;
            let data = vec![i as u8; n];
            if i % 3 == 0 {
                let (a, b) = data.split_at(n / 2);
                undo.write_gather(at, &[a, b]).unwrap();
            } else {
                undo.write_at(at, &data).unwrap();
            }
            assert!(replayed(&path, mem.snapshot()) == original, "after write {i}");
        }
        undo.finish().unwrap();
        let file = File::open(&path).unwrap();
        let u = UndoFile::read(&file, false).unwrap();
        assert!(u.header.finished());
        assert!(
            u.runs.len() > keys_per_block(1024),
            "keys spill over one key block: {}",
            u.runs.len()
        );
        u.check_image(mem.as_ref()).unwrap();
        assert!(replayed(&path, mem.snapshot()) == original);
        // A second run continues the file: it still takes the image back
        // to the very start, past both runs.
        drop(undo);
        let again = UndoDevice::create(Box::new(mem.clone()), &path, 4096).unwrap();
        for i in 0..50u64 {
            let at = xorshift(&mut seed) % (len as u64 - 5000);
            again.write_at(at, &vec![0xA0 | i as u8; 4999]).unwrap();
        }
        again.finish().unwrap();
        assert!(replayed(&path, mem.snapshot()) == original);
    }

    /// Synced only at close, the finished file still takes the image back,
    /// and continuing it does too.
    #[test]
    fn an_undo_file_synced_at_close_replays_the_same() {
        let mut seed = 0x5151_2727_0303_9999u64;
        let original: Vec<u8> = (0..(512 << 10)).map(|_| xorshift(&mut seed) as u8).collect();
        let mem = Arc::new(MemDevice::new(original.clone()));
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("u.undo");
        for round in 0..2u8 {
            let undo = UndoDevice::create(Box::new(mem.clone()), &path, 2048)
                .unwrap()
                .with_sync(UndoSync::AtClose);
            for i in 0..300u64 {
                let at = xorshift(&mut seed) % (500 << 10);
                undo.write_at(at, &[round ^ i as u8; 7000][..(i % 7000 + 1) as usize])
                    .unwrap();
            }
            undo.finish().unwrap();
        }
        assert!(replayed(&path, mem.snapshot()) == original);
    }

    /// Damaged undo files (random bytes and lengths, huge sizes and
    /// counts in the header and keys) are read, forced or not, without a
    /// panic or an allocation the file's size does not bound.
    #[test]
    fn damaged_undo_files_never_panic() {
        use ext4kit_format::undo::UndoHeader;
        let mut seed = 0x1234_5678_9ABC_DEF1u64;
        let mem = Arc::new(MemDevice::new(vec![7u8; 256 << 10]));
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("u.undo");
        let undo = UndoDevice::create(Box::new(mem.clone()), &path, 1024).unwrap();
        for i in 0..20u64 {
            undo.write_at(i * 9000, &[1u8; 3000]).unwrap();
        }
        undo.finish().unwrap();
        let good = std::fs::read(&path).unwrap();
        let bad = dir.path().join("bad.undo");
        for round in 0..300 {
            let mut b = good.clone();
            for _ in 0..1 + round % 5 {
                let at = (xorshift(&mut seed) % b.len() as u64) as usize;
                b[at] = xorshift(&mut seed) as u8;
            }
            if round % 3 == 0 {
                let (mut h, _) = UndoHeader::decode(&b).unwrap();
                match round % 4 {
                    0 => h.num_keys = xorshift(&mut seed),
                    1 => h.block_size = xorshift(&mut seed) as u32,
                    2 => h.key_offset = xorshift(&mut seed),
                    _ => h.super_offset = xorshift(&mut seed) >> (round % 64),
                }
                b[..512].copy_from_slice(&h.encode());
            }
            b.truncate(
                (xorshift(&mut seed) % (b.len() as u64 + 1)).max(if round % 2 == 0 { b.len() as u64 } else { 0 })
                    as usize,
            );
            std::fs::write(&bad, &b).unwrap();
            let file = File::open(&bad).unwrap();
            for force in [false, true] {
                if let Ok(u) = UndoFile::read(&file, force) {
                    let copy = MemDevice::new(mem.snapshot());
                    let opts = ReplayOptions { force, dry_run: false };
                    let _ = replay(&u, &file, &copy, opts, &mut |_| {});
                }
            }
        }
    }
}
