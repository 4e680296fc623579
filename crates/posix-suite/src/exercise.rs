//! The data-integrity exerciser: seeded random operations over a few files,
//! each checked against an in-memory [`Shadow`], and every file compared
//! in full at the end. A mismatch reports the seed, the op index and the
//! tail of the op log, which is enough to replay it.

use std::collections::VecDeque;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::fcntl::FallocateFlags as F;

use crate::shadow::Shadow;

/// What to run.
#[derive(Debug, Clone)]
pub struct ExerciseOptions {
    /// Directory to work in (a subdirectory is made and removed on success).
    pub dir: PathBuf,
    /// Number of operations.
    pub ops: u64,
    /// Seed of the operation sequence.
    pub seed: u64,
    /// Number of file names the operations use.
    pub files: usize,
    /// No write or allocation reaches past this size.
    pub max_size: u64,
    /// Flip one byte of a file behind the shadow's back just before the
    /// final comparison, which must then fail (proves the checker works).
    pub self_test_corrupt: bool,
    /// Keep the work directory even on success.
    pub keep: bool,
}

/// A successful run's figures.
#[derive(Debug, Clone)]
pub struct ExerciseReport {
    /// Operations done.
    pub ops: u64,
    /// Wall time.
    pub elapsed: Duration,
    /// Bytes written with pwrite.
    pub bytes_written: u64,
    /// Bytes read back and compared (including the final comparison).
    pub bytes_verified: u64,
    /// fallocate modes the file system refused with EOPNOTSUPP (skipped).
    pub unsupported: Vec<String>,
}

/// SplitMix64, so a seed means the same operations everywhere.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.next() % n }
    }
    fn fill(&mut self, buf: &mut [u8]) {
        for c in buf.chunks_mut(8) {
            let v = self.next().to_le_bytes();
            c.copy_from_slice(&v[..c.len()]);
        }
    }
}

struct Slot {
    path: PathBuf,
    /// `None` when the name does not exist.
    shadow: Option<Shadow>,
    fd: Option<File>,
}

struct Run<'a> {
    o: &'a ExerciseOptions,
    rng: Rng,
    slots: Vec<Slot>,
    log: VecDeque<String>,
    op: u64,
    buf: Vec<u8>,
    report: ExerciseReport,
}

const LOG_TAIL: usize = 40;
const MIB: u64 = 1 << 20;

/// Runs the exerciser; `Err` carries the full failure report.
pub fn exercise(o: &ExerciseOptions) -> Result<ExerciseReport, String> {
    let work = o
        .dir
        .join(format!("ext4kit-exercise.{}.{}", o.seed, std::process::id()));
    std::fs::create_dir(&work).map_err(|e| format!("mkdir {}: {e}", work.display()))?;
    let slots = (0..o.files.max(1))
        .map(|i| Slot {
            path: work.join(format!("f{i}")),
            shadow: None,
            fd: None,
        })
        .collect();
    let mut r = Run {
        o,
        rng: Rng(o.seed),
        slots,
        log: VecDeque::new(),
        op: 0,
        buf: vec![0; MIB as usize],
        report: ExerciseReport {
            ops: 0,
            elapsed: Duration::ZERO,
            bytes_written: 0,
            bytes_verified: 0,
            unsupported: Vec::new(),
        },
    };
    let start = Instant::now();
    let res = r.run_all();
    r.report.elapsed = start.elapsed();
    match res {
        Ok(()) => {
            r.slots.iter_mut().for_each(|s| s.fd = None);
            if !o.keep {
                std::fs::remove_dir_all(&work).map_err(|e| format!("cleanup: {e}"))?;
            }
            Ok(r.report)
        }
        Err(msg) => Err(r.failure(&msg, &work)),
    }
}

impl Run<'_> {
    fn failure(&self, msg: &str, work: &Path) -> String {
        let o = self.o;
        let mut s = format!(
            "MISMATCH seed={} op={} of {}: {msg}\nwork dir kept: {}\nreplay: ext4kit-posix exercise DIR --ops {} --seed {} --files {} --max-size {}{}\nlast {} ops:\n",
            o.seed,
            self.op,
            o.ops,
            work.display(),
            o.ops,
            o.seed,
            o.files,
            o.max_size,
            if o.self_test_corrupt {
                " --self-test-corrupt"
            } else {
                ""
            },
            self.log.len()
        );
        for l in &self.log {
            s.push_str("  ");
            s.push_str(l);
            s.push('\n');
        }
        s
    }

    fn note(&mut self, slot: usize, what: String) {
        if self.log.len() == LOG_TAIL {
            self.log.pop_front();
        }
        let line = format!("#{} f{slot}: {what}", self.op);
        if std::env::var_os("EXT4KIT_EXERCISE_TRACE").is_some() {
            eprintln!("{line}");
        }
        self.log.push_back(line);
    }

    fn run_all(&mut self) -> Result<(), String> {
        for i in 0..self.o.ops {
            self.op = i;
            self.one()?;
            self.report.ops += 1;
        }
        self.op = self.o.ops;
        if self.o.self_test_corrupt {
            self.corrupt()?;
        }
        for i in 0..self.slots.len() {
            self.compare_whole(i, true)?;
        }
        Ok(())
    }

    /// Opens (creating when the name does not exist) slot `i`'s file.
    fn open(&mut self, i: usize) -> Result<(), String> {
        if self.slots[i].fd.is_some() {
            return Ok(());
        }
        let create = self.slots[i].shadow.is_none();
        let path = self.slots[i].path.clone();
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(create)
            .open(&path)
            .map_err(|e| format!("open {} (create {create}): {e}", path.display()))?;
        if create {
            self.note(i, "create".into());
            self.slots[i].shadow = Some(Shadow::default());
        }
        self.slots[i].fd = Some(f);
        Ok(())
    }

    fn one(&mut self) -> Result<(), String> {
        let i = self.rng.below(self.slots.len() as u64) as usize;
        self.open(i)?;
        let roll = self.rng.below(1000);
        let small = 1 + self.rng.below(9000);
        let medium = 1 + self.rng.below(256 * 1024);
        match roll {
            0..300 => self.write(i, small, false),
            300..400 => self.write(i, medium, false),
            400..410 => self.write(i, MIB, false),
            410..430 => self.write(i, small * 8, true),
            430..680 => self.read_back(i),
            680..740 => self.truncate(i),
            740..780 => self.falloc(i, F::FALLOC_FL_PUNCH_HOLE | F::FALLOC_FL_KEEP_SIZE, "punch"),
            780..810 => self.falloc(i, F::FALLOC_FL_ZERO_RANGE, "zero_range"),
            810..825 => self.falloc(i, F::FALLOC_FL_ZERO_RANGE | F::FALLOC_FL_KEEP_SIZE, "zero_range|keep"),
            825..845 => self.falloc(i, F::empty(), "alloc"),
            845..860 => self.falloc(i, F::FALLOC_FL_KEEP_SIZE, "alloc|keep"),
            860..866 => self.sync(i),
            866..920 => self.reopen(i),
            920..960 => self.rename(i),
            960..978 => self.recreate(i),
            978..980 => self.compare_whole(i, false),
            _ => self.read_back(i),
        }?;
        self.check_size(i)
    }

    fn shadow(&mut self, i: usize) -> &mut Shadow {
        self.slots[i].shadow.get_or_insert_with(Shadow::default)
    }

    fn fd(&self, i: usize) -> Result<&File, String> {
        self.slots[i]
            .fd
            .as_ref()
            .ok_or_else(|| "internal: file not open".to_string())
    }

    /// An offset for `len` bytes: usually near the current end, sometimes
    /// anywhere, for `far` near `max_size` (leaving a large hole).
    fn offset(&mut self, i: usize, len: u64, far: bool) -> u64 {
        let max = self.o.max_size.saturating_sub(len);
        let size = self.shadow(i).len();
        let off = if far {
            max.saturating_sub(self.rng.below(2 * MIB))
        } else if self.rng.below(2) == 0 {
            self.rng.below(size + 8192)
        } else {
            self.rng.below(max + 1)
        };
        off.min(max)
    }

    fn write(&mut self, i: usize, len: u64, far: bool) -> Result<(), String> {
        let len = len.min(self.o.max_size);
        let off = self.offset(i, len, far);
        let mut data = std::mem::take(&mut self.buf);
        self.rng.fill(&mut data[..len as usize]);
        self.note(i, format!("pwrite off={off} len={len}"));
        let r = self.fd(i)?.write_all_at(&data[..len as usize], off);
        self.shadow(i).write(off, &data[..len as usize]);
        self.buf = data;
        self.report.bytes_written += len;
        r.map_err(|e| format!("pwrite f{i} off={off} len={len}: {e}"))
    }

    fn read_back(&mut self, i: usize) -> Result<(), String> {
        let size = self.shadow(i).len();
        let off = self.rng.below(size + 4096);
        let big = self.rng.below(10) == 0;
        let len = 1 + self.rng.below(if big { MIB } else { 16384 });
        self.note(i, format!("read off={off} len={len}"));
        self.verify(i, off, len)
    }

    /// Reads `[off, off+len)` and compares it with the shadow.
    fn verify(&mut self, i: usize, off: u64, len: u64) -> Result<(), String> {
        let want = self.shadow(i).read(off, len);
        let mut got = vec![0u8; len as usize];
        let mut n = 0;
        while n < got.len() {
            let k = self
                .fd(i)?
                .read_at(&mut got[n..], off + n as u64)
                .map_err(|e| format!("pread f{i}: {e}"))?;
            if k == 0 {
                break;
            }
            n += k;
        }
        got.truncate(n);
        self.report.bytes_verified += n as u64;
        if got.len() != want.len() {
            return Err(format!(
                "f{i}: read of {len} at {off} returned {} bytes, wanted {}",
                got.len(),
                want.len()
            ));
        }
        if let Some(p) = got.iter().zip(&want).position(|(a, b)| a != b) {
            return Err(format!(
                "f{i}: byte at offset {} is {:#04x}, wanted {:#04x} (read of {len} at {off})",
                off + p as u64,
                got[p],
                want[p]
            ));
        }
        Ok(())
    }

    fn truncate(&mut self, i: usize) -> Result<(), String> {
        let size = self.shadow(i).len();
        let to = match self.rng.below(4) {
            0 => 0,
            1 => self.rng.below(size + 1),
            2 => (size + self.rng.below(MIB)).min(self.o.max_size),
            _ => self.rng.below(self.o.max_size + 1),
        };
        self.note(i, format!("ftruncate {size} -> {to}"));
        self.fd(i)?
            .set_len(to)
            .map_err(|e| format!("ftruncate f{i} to {to}: {e}"))?;
        self.shadow(i).set_len(to);
        Ok(())
    }

    fn falloc(&mut self, i: usize, mode: F, name: &str) -> Result<(), String> {
        if self.report.unsupported.iter().any(|u| u == name) {
            return Ok(());
        }
        let big = self.rng.below(4) == 0;
        let len = 1 + self.rng.below(if big { 4 * MIB } else { 65536 });
        let len = len.min(self.o.max_size);
        let off = self.offset(i, len, false);
        self.note(i, format!("fallocate {name} off={off} len={len}"));
        match nix::fcntl::fallocate(self.fd(i)?, mode, off as i64, len as i64) {
            Ok(()) => {}
            Err(Errno::EOPNOTSUPP) => {
                eprintln!("note: fallocate {name} is not supported here (EOPNOTSUPP); not exercised");
                self.report.unsupported.push(name.to_string());
                return Ok(());
            }
            Err(e) => return Err(format!("fallocate {name} f{i} off={off} len={len}: {e}")),
        }
        let keep = mode.contains(F::FALLOC_FL_KEEP_SIZE);
        let s = self.shadow(i);
        if mode.intersects(F::FALLOC_FL_PUNCH_HOLE | F::FALLOC_FL_ZERO_RANGE) {
            s.zero(off, len);
        }
        if !keep && off + len > s.len() {
            s.set_len(off + len);
        }
        Ok(())
    }

    fn sync(&mut self, i: usize) -> Result<(), String> {
        let data_only = self.rng.below(2) == 0;
        self.note(i, if data_only { "fdatasync" } else { "fsync" }.into());
        let f = self.fd(i)?;
        if data_only { f.sync_data() } else { f.sync_all() }.map_err(|e| format!("fsync f{i}: {e}"))
    }

    fn reopen(&mut self, i: usize) -> Result<(), String> {
        self.note(i, "close+reopen".into());
        self.slots[i].fd = None;
        self.open(i)
    }

    /// rename(2) onto another of the names (replacing it if it exists).
    fn rename(&mut self, i: usize) -> Result<(), String> {
        let j = self.rng.below(self.slots.len() as u64) as usize;
        if j == i {
            return Ok(());
        }
        self.note(i, format!("rename f{i} -> f{j}"));
        let (from, to) = (self.slots[i].path.clone(), self.slots[j].path.clone());
        std::fs::rename(&from, &to).map_err(|e| format!("rename f{i} -> f{j}: {e}"))?;
        self.slots[j].shadow = self.slots[i].shadow.take();
        self.slots[j].fd = self.slots[i].fd.take();
        // Whatever was open as f{j} is now an unlinked inode: forget it.
        match std::fs::symlink_metadata(&from) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            r => Err(format!("f{i} still exists after renaming it away: {r:?}")),
        }
    }

    fn recreate(&mut self, i: usize) -> Result<(), String> {
        self.note(i, "unlink".into());
        let path = self.slots[i].path.clone();
        std::fs::remove_file(&path).map_err(|e| format!("unlink f{i}: {e}"))?;
        self.slots[i].shadow = None;
        self.slots[i].fd = None;
        self.open(i)
    }

    fn check_size(&mut self, i: usize) -> Result<(), String> {
        let Some(f) = self.slots[i].fd.as_ref() else {
            return Ok(());
        };
        let got = f.metadata().map_err(|e| format!("fstat f{i}: {e}"))?.len();
        let want = self.shadow(i).len();
        if got != want {
            return Err(format!("f{i}: st_size {got}, wanted {want}"));
        }
        Ok(())
    }

    /// Reads slot `i`'s file through a fresh descriptor and compares it:
    /// all of it when `full` (the final check), otherwise every MiB that
    /// holds data plus the last and one random MiB, so that mid-run checks
    /// of 1 GiB sparse files stay cheap.
    fn compare_whole(&mut self, i: usize, full: bool) -> Result<(), String> {
        self.note(i, "compare whole file".into());
        let path = self.slots[i].path.clone();
        let Some(want_len) = self.slots[i].shadow.as_ref().map(Shadow::len) else {
            return match std::fs::symlink_metadata(&path) {
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
                r => Err(format!("f{i} should not exist: {r:?}")),
            };
        };
        let f = File::open(&path).map_err(|e| format!("open f{i} for comparison: {e}"))?;
        let saved = self.slots[i].fd.replace(f);
        let windows: Vec<u64> = if full {
            (0..=want_len / MIB).collect()
        } else {
            let s = self.slots[i]
                .shadow
                .as_ref()
                .map(|s| s.chunk_offsets().map(|o| o / MIB).collect::<Vec<_>>());
            let mut w = s.unwrap_or_default();
            w.push(want_len / MIB);
            w.push(self.rng.below(want_len / MIB + 1));
            w.sort_unstable();
            w.dedup();
            w
        };
        let mut res = Ok(());
        for wdw in windows {
            res = self.verify(i, wdw * MIB, MIB);
            if res.is_err() {
                break;
            }
        }
        self.slots[i].fd = saved;
        res
    }

    /// The self-test: flips one byte of a non-empty file through its own
    /// descriptor, without telling the shadow.
    fn corrupt(&mut self) -> Result<(), String> {
        let Some(i) = (0..self.slots.len()).find(|&i| self.slots[i].shadow.as_ref().is_some_and(|s| !s.is_empty()))
        else {
            return Err("self-test: every file is empty, nothing to corrupt".into());
        };
        let len = self.shadow(i).len();
        let at = self.rng.below(len);
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&self.slots[i].path)
            .map_err(|e| e.to_string())?;
        let mut b = [0u8];
        f.read_exact_at(&mut b, at).map_err(|e| e.to_string())?;
        f.write_all_at(&[b[0] ^ 0x5a], at).map_err(|e| e.to_string())?;
        self.note(i, format!("SELF-TEST: flipped byte at {at} behind the shadow's back"));
        Ok(())
    }
}
