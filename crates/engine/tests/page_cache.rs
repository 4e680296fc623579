//! `PageCache`, the engine-side page cache of issue 14: exact hit, miss
//! and inner-request accounting on hand-made sequences (a logging inner
//! device), LRU eviction order, coalescing of missing runs and of dirty
//! runs, write-back order and the flush barrier, partial and unaligned
//! requests against a byte model, cold vs warm, concurrent readers and
//! writers, and the engine on top: thousands of creates and writes through
//! a small cache leave an e2fsck-clean image, and a power loss below the
//! cache at any write recovers clean with every synced batch kept.

#[path = "common/crash_cases.rs"]
mod crash_cases;
#[path = "common/mem_image.rs"]
mod mem_image;

use std::sync::Arc;

use ext4kit_engine::device::{
    BlockDevice, CrashDevice, DiskModel, DiskProfile, FaultDevice, MemDevice, PageCache, Survivors,
};
use ext4kit_engine::{Attr, Filesystem, NodeKind, OpenOptions, ROOT_INO};
use ext4kit_testkit::rng::Rng;
use ext4kit_testkit::tools::{require_tool, skip_unless};
use mem_image::{assert_clean, fresh_image};
use parking_lot::Mutex;

const PAGE: u64 = 4096;

/// A request the inner device saw: (offset, length) of a read or write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Read(u64, usize),
    Write(u64, usize),
    Flush,
}

/// A memory device that logs every request it serves.
#[derive(Debug)]
struct Logged {
    mem: MemDevice,
    log: Mutex<Vec<Op>>,
}

impl Logged {
    fn new(bytes: Vec<u8>) -> Arc<Self> {
        Arc::new(Self {
            mem: MemDevice::new(bytes),
            log: Mutex::new(Vec::new()),
        })
    }

    /// The requests since the last call.
    fn take(&self) -> Vec<Op> {
        std::mem::take(&mut *self.log.lock())
    }
}

impl BlockDevice for Logged {
    fn len(&self) -> u64 {
        self.mem.len()
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> std::io::Result<()> {
        self.log.lock().push(Op::Read(offset, buf.len()));
        self.mem.read_at(offset, buf)
    }
    fn write_at(&self, offset: u64, buf: &[u8]) -> std::io::Result<()> {
        self.log.lock().push(Op::Write(offset, buf.len()));
        self.mem.write_at(offset, buf)
    }
    fn flush(&self) -> std::io::Result<()> {
        self.log.lock().push(Op::Flush);
        Ok(())
    }
    fn read_only(&self) -> bool {
        false
    }
}

/// A logged device of `pages` pages, byte `i` holding `i % 251`, under a
/// cache of `cached` pages.
fn setup(pages: u64, cached: u64) -> (Arc<Logged>, PageCache<Arc<Logged>>) {
    let bytes = (0..pages * PAGE).map(|i| (i % 251) as u8).collect();
    let inner = Logged::new(bytes);
    let cache = PageCache::new(inner.clone(), cached * PAGE);
    (inner, cache)
}

fn read(c: &PageCache<Arc<Logged>>, offset: u64, len: usize) -> Vec<u8> {
    let mut buf = vec![0; len];
    c.read_at(offset, &mut buf).unwrap();
    buf
}

fn read_page(c: &PageCache<Arc<Logged>>, p: u64) {
    let got = read(c, p * PAGE, PAGE as usize);
    assert!(
        got.iter()
            .enumerate()
            .all(|(i, &b)| b == ((p * PAGE + i as u64) % 251) as u8)
    );
}

fn page_read(p: u64, n: u64) -> Op {
    Op::Read(p * PAGE, (n * PAGE) as usize)
}

fn page_write(p: u64, n: u64) -> Op {
    Op::Write(p * PAGE, (n * PAGE) as usize)
}

#[test]
fn hits_and_misses_of_a_hand_made_sequence() {
    let (inner, c) = setup(16, 4);
    read_page(&c, 0);
    assert_eq!(inner.take(), [page_read(0, 1)]);
    read_page(&c, 0);
    assert_eq!(inner.take(), [], "a hit reaches nothing");
    // 100 bytes across pages 0 and 1: one hit, one whole-page miss.
    let got = read(&c, 4000, 100);
    assert_eq!(got, (4000..4100).map(|i| (i % 251) as u8).collect::<Vec<_>>());
    assert_eq!(inner.take(), [page_read(1, 1)]);
    let s = c.stats();
    assert_eq!((s.reads, s.read_bytes), (3, 2 * PAGE + 100));
    assert_eq!((s.hits, s.misses), (2, 2));
    assert_eq!((s.inner_reads, s.inner_read_bytes), (2, 2 * PAGE));
    assert_eq!((s.inner_writes, s.evictions, s.cached_pages), (0, 0, 2));
}

#[test]
fn eviction_takes_the_least_recently_used_page() {
    let (inner, c) = setup(16, 3);
    for p in [0, 1, 2, 0, 3] {
        read_page(&c, p);
    }
    // Page 1 was least recently used when 3 came in.
    assert_eq!(
        inner.take(),
        [page_read(0, 1), page_read(1, 1), page_read(2, 1), page_read(3, 1)]
    );
    assert_eq!(c.stats().evictions, 1);
    for p in [0, 2, 3] {
        read_page(&c, p);
    }
    assert_eq!(inner.take(), []);
    read_page(&c, 1);
    assert_eq!(inner.take(), [page_read(1, 1)], "page 1 had gone");
    // 1 took the place of 0, the oldest: now 1, 3, 2 from newest to
    // oldest, and 4 takes 2's place.
    read_page(&c, 4);
    for p in [3, 1, 4] {
        read_page(&c, p);
    }
    assert_eq!(inner.take(), [page_read(4, 1)]);
    read_page(&c, 2);
    assert_eq!(inner.take(), [page_read(2, 1)]);
    assert_eq!(c.stats().evictions, 4);
}

#[test]
fn a_run_of_missing_pages_is_one_inner_read() {
    let (inner, c) = setup(256, 128);
    read(&c, 0, 64 * PAGE as usize);
    assert_eq!(inner.take(), [page_read(0, 64)]);
    // Held pages split a read into runs of the rest.
    read(&c, 100 * PAGE, 2 * PAGE as usize);
    inner.take();
    read(&c, 90 * PAGE + 10, 20 * PAGE as usize);
    assert_eq!(inner.take(), [page_read(90, 10), page_read(102, 9)]);
    let s = c.stats();
    assert_eq!((s.hits, s.misses), (2, 64 + 2 + 19));
    // A cold read larger than the cache is still one request; the cache
    // keeps its last pages.
    let (inner, c) = setup(256, 8);
    read(&c, 0, 64 * PAGE as usize);
    assert_eq!(inner.take(), [page_read(0, 64)]);
    read(&c, 56 * PAGE, 8 * PAGE as usize);
    assert_eq!(inner.take(), []);
    assert_eq!(c.stats().cached_pages, 8);
}

#[test]
fn write_back_goes_out_ascending_and_joined_then_flushes() {
    let (inner, c) = setup(64, 64);
    for p in [9, 3, 4, 5, 20, 8, 4] {
        c.write_at(p * PAGE, &[p as u8; PAGE as usize]).unwrap();
    }
    assert_eq!(inner.take(), [], "whole-page writes are held, with no reads");
    c.flush().unwrap();
    assert_eq!(
        inner.take(),
        [page_write(3, 3), page_write(8, 2), page_write(20, 1), Op::Flush]
    );
    assert_eq!(inner.mem.snapshot()[9 * PAGE as usize], 9);
    // Nothing is dirty any more: a second flush writes nothing.
    c.flush().unwrap();
    assert_eq!(inner.take(), [Op::Flush]);
    let s = c.stats();
    assert_eq!(
        (s.writes, s.inner_writes, s.inner_write_bytes, s.flushes),
        (7, 3, 6 * PAGE, 2)
    );
}

#[test]
fn evicting_a_dirty_page_writes_back_its_dirty_neighbours_as_one_run() {
    let (inner, c) = setup(64, 4);
    for p in [1, 2, 3] {
        c.write_at(p * PAGE, &[7; PAGE as usize]).unwrap();
    }
    read_page(&c, 10);
    assert_eq!(inner.take(), [page_read(10, 1)]);
    // Page 1 is the oldest: once 11 is read (without the lock), 1 leaves
    // with 2 and 3 written back beside it; 2 and 3 stay, clean.
    read_page(&c, 11);
    assert_eq!(inner.take(), [page_read(11, 1), page_write(1, 3)]);
    let s = c.stats();
    assert_eq!((s.evictions, s.dirty_evictions, s.cached_pages), (1, 1, 4));
    c.flush().unwrap();
    assert_eq!(inner.take(), [Op::Flush]);
}

#[test]
fn partial_writes_read_the_page_first() {
    let (inner, c) = setup(8, 8);
    let mut model = inner.mem.snapshot();
    // 10 bytes across pages 0 and 1, neither held: both are read whole.
    c.write_at(4090, &[0xAA; 10]).unwrap();
    model[4090..4100].fill(0xAA);
    assert_eq!(inner.take(), [page_read(0, 1), page_read(1, 1)]);
    // A held page is changed in place.
    c.write_at(4095, &[0xBB; 3]).unwrap();
    model[4095..4098].fill(0xBB);
    assert_eq!(inner.take(), []);
    assert_eq!(read(&c, 4080, 40), model[4080..4120]);
    c.flush().unwrap();
    assert_eq!(inner.take(), [page_write(0, 2), Op::Flush]);
    assert_eq!(inner.mem.snapshot(), model);
    assert_eq!(c.stats().fills, 2);
}

/// Random reads, writes, flushes and drops of any size and alignment on a
/// device whose size is not a multiple of the page, against a byte model.
#[test]
fn unaligned_requests_match_a_byte_model() {
    for (cached, seed) in [(0, 1), (1, 2), (5, 3), (64, 4)] {
        let size = 40_000usize;
        let inner = Arc::new(MemDevice::new(vec![0; size]));
        let c = PageCache::new(inner.clone(), cached * PAGE);
        let mut model = vec![0u8; size];
        let mut rng = Rng::new(seed);
        for step in 0..3_000 {
            let len = match rng.below(4) {
                0 => rng.below(16) as usize,
                1 => rng.below(2 * PAGE) as usize,
                _ => rng.below(5 * PAGE) as usize,
            }
            .min(size);
            let offset = rng.below((size - len) as u64 + 1) as usize;
            match rng.below(10) {
                0..=3 => {
                    let mut buf = vec![0; len];
                    c.read_at(offset as u64, &mut buf).unwrap();
                    assert!(
                        buf == model[offset..offset + len],
                        "cache {cached}, step {step}: read {len} at {offset}"
                    );
                }
                4..=7 => {
                    let bytes = rng.bytes(len);
                    c.write_at(offset as u64, &bytes).unwrap();
                    model[offset..offset + len].copy_from_slice(&bytes);
                }
                8 => c.flush().unwrap(),
                _ => c.drop_clean(),
            }
        }
        c.flush().unwrap();
        assert!(
            inner.snapshot() == model,
            "cache of {cached} pages: inner differs after flush"
        );
        assert!(c.stats().cached_pages <= cached);
    }
}

#[test]
fn past_the_end_and_read_only_are_refused() {
    let (_, c) = setup(4, 4);
    let mut buf = [0; 2];
    let e = c.read_at(4 * PAGE - 1, &mut buf).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::UnexpectedEof);
    assert!(e.to_string().contains("past the end"), "{e}");
    assert!(c.write_at(u64::MAX, &[1]).is_err());
    assert!(c.read_at(4 * PAGE, &mut []).is_ok());
    assert!(c.read_at(4 * PAGE + 1, &mut []).is_err());

    let ro = PageCache::new(MemDevice::read_only(vec![5; 8192]), 1 << 20);
    assert!(ro.read_only());
    let e = ro.write_at(0, &[1; 10]).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EROFS));
    let mut got = [0; 10];
    ro.read_at(0, &mut got).unwrap();
    assert_eq!(got, [5; 10]);
    assert_eq!(ro.stats().writes, 0);
}

#[test]
fn dropping_makes_the_next_read_cold() {
    let (inner, c) = setup(32, 32);
    read(&c, 0, 10 * PAGE as usize);
    read(&c, 0, 10 * PAGE as usize);
    assert_eq!(inner.take(), [page_read(0, 10)]);
    let warm = c.stats();
    assert_eq!((warm.hits, warm.misses), (10, 10));
    c.drop_clean();
    read(&c, 0, 10 * PAGE as usize);
    assert_eq!(inner.take(), [page_read(0, 10)]);
    assert_eq!(c.stats().since(&warm).misses, 10);
    // drop_clean keeps a dirty page (it is the only copy) ...
    c.write_at(3 * PAGE, &[9; PAGE as usize]).unwrap();
    c.drop_clean();
    assert_eq!(read(&c, 3 * PAGE, 1), [9]);
    assert_eq!(inner.take(), []);
    assert_eq!(inner.mem.snapshot()[3 * PAGE as usize], (3 * PAGE % 251) as u8);
    // ... drop_all writes it back, flushes, and forgets everything.
    c.drop_all().unwrap();
    assert_eq!(inner.take(), [page_write(3, 1), Op::Flush]);
    assert_eq!(c.stats().cached_pages, 0);
    assert_eq!(read(&c, 3 * PAGE, 1), [9]);
    assert_eq!(inner.take(), [page_read(3, 1)]);
}

#[test]
fn no_size_passes_requests_through_as_they_came() {
    let (inner, c) = setup(4, 0);
    read(&c, 10, 20);
    c.write_at(5000, &[1; 3]).unwrap();
    c.flush().unwrap();
    assert_eq!(inner.take(), [Op::Read(10, 20), Op::Write(5000, 3), Op::Flush]);
    let s = c.stats();
    assert_eq!((s.hits, s.misses, s.cached_pages), (0, 1, 0));
}

/// A failing inner device: a flush whose write-back fails reports it and
/// keeps the unwritten pages dirty for the next flush; a failed write-back while evicting for a read leaves the
/// read correct and the page dirty, and for a write fails the write; a
/// failed miss read fails the read and keeps nothing.
#[test]
fn failed_inner_requests_lose_no_write() {
    let (fault, ctl) = FaultDevice::new(MemDevice::new(vec![0; 16 * PAGE as usize]));
    let c = PageCache::new(fault, 2 * PAGE);
    let mem = |c: &PageCache<FaultDevice<MemDevice>>, p: u64| c.inner().inner().snapshot()[(p * PAGE) as usize];
    c.write_at(0, &[1; PAGE as usize]).unwrap();
    c.write_at(5 * PAGE, &[5; PAGE as usize]).unwrap();
    ctl.fail_one_write(1);
    let e = c.flush().unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EIO));
    assert_eq!(
        (mem(&c, 0), mem(&c, 5)),
        (1, 0),
        "the first run went out, the second failed"
    );
    // The runs went out as one batch (`write_many`): a batch that failed
    // in part is counted as not written, and all of it stays dirty.
    assert_eq!(c.stats().inner_writes, 0);
    c.flush().unwrap();
    assert_eq!(
        mem(&c, 5),
        5,
        "the failed page was kept dirty and written by the next flush"
    );
    assert_eq!(c.stats().inner_writes, 2);

    // Page 0 dirty, page 5 clean: a read of page 9 evicts 0 (the oldest).
    c.read_at(5 * PAGE, &mut [0; 1]).unwrap();
    c.write_at(0, &[2; 100]).unwrap();
    c.read_at(5 * PAGE, &mut [0; 1]).unwrap();
    ctl.fail_writes_from(0);
    let mut buf = vec![9; PAGE as usize];
    c.read_at(9 * PAGE, &mut buf).unwrap();
    assert_eq!(buf, vec![0; PAGE as usize], "the read itself succeeded");
    assert!(
        c.write_at(11 * PAGE, &[3; PAGE as usize]).is_err(),
        "no room without a write-back"
    );
    ctl.clear();
    let mut got = [0; 1];
    c.read_at(0, &mut got).unwrap();
    assert_eq!(got, [2], "page 0 is still held");
    c.flush().unwrap();
    assert_eq!(mem(&c, 0), 2);

    c.drop_all().unwrap();
    ctl.fail_one_read(0);
    assert!(c.read_at(3 * PAGE, &mut buf).is_err());
    assert_eq!(c.stats().cached_pages, 0);
    c.read_at(3 * PAGE, &mut buf).unwrap();
}

/// A flush returns only once every write completed before it is in the
/// inner device and the inner device has flushed after it.
#[test]
fn flush_is_a_barrier_for_every_thread() {
    let (inner, c) = setup(512, 32);
    let c = Arc::new(c);
    std::thread::scope(|s| {
        for t in 0..4u64 {
            let (c, inner) = (c.clone(), inner.clone());
            s.spawn(move || {
                let mut rng = Rng::new(t);
                for round in 0..50u8 {
                    let pages: Vec<u64> = (0..8).map(|_| t * 128 + rng.below(128)).collect();
                    for &p in &pages {
                        c.write_at(p * PAGE + 7, &[round, t as u8]).unwrap();
                    }
                    c.flush().unwrap();
                    let log = inner.log.lock().clone();
                    let last_flush = log.iter().rposition(|o| *o == Op::Flush).unwrap();
                    let snap = inner.mem.snapshot();
                    for &p in &pages {
                        let at = (p * PAGE + 7) as usize;
                        assert_eq!(
                            &snap[at..at + 2],
                            &[round, t as u8],
                            "thread {t} round {round} page {p}"
                        );
                        let last_write = log
                            .iter()
                            .rposition(|o| matches!(*o, Op::Write(o, n) if o <= p * PAGE && p * PAGE < o + n as u64));
                        assert!(last_write.is_some_and(|w| w < last_flush), "page {p} not flushed");
                    }
                }
            });
        }
    });
}

/// Writers own disjoint regions and read back what they wrote while a
/// reader sweeps everything (inserting pages after unlocked reads) and a
/// flusher writes back: no stale page may ever be kept.
#[test]
fn concurrent_readers_never_keep_stale_pages() {
    let pages = 64u64;
    let inner = Arc::new(MemDevice::new(vec![0; (pages * PAGE) as usize]));
    let c = Arc::new(PageCache::new(inner.clone(), 12 * PAGE));
    let done = std::sync::atomic::AtomicBool::new(false);
    let models: Vec<Vec<u8>> = std::thread::scope(|s| {
        let sweeper = s.spawn(|| {
            let mut buf = vec![0; (3 * PAGE) as usize];
            let mut rng = Rng::new(99);
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                let p = rng.below(pages - 2);
                c.read_at(p * PAGE, &mut buf).unwrap();
                if rng.below(50) == 0 {
                    c.flush().unwrap();
                }
            }
        });
        let writers: Vec<_> = (0..2u64)
            .map(|t| {
                let c = c.clone();
                s.spawn(move || {
                    let base = t * pages / 2 * PAGE;
                    let span = (pages / 2 * PAGE) as usize;
                    let mut model = vec![0u8; span];
                    let mut rng = Rng::new(t + 7);
                    for step in 0..20_000 {
                        let len = 1 + rng.below(2 * PAGE) as usize;
                        let off = rng.below((span - len) as u64) as usize;
                        let bytes = rng.bytes(len);
                        c.write_at(base + off as u64, &bytes).unwrap();
                        model[off..off + len].copy_from_slice(&bytes);
                        let len = 1 + rng.below(3 * PAGE) as usize;
                        let off = rng.below((span - len) as u64) as usize;
                        let mut got = vec![0; len];
                        c.read_at(base + off as u64, &mut got).unwrap();
                        if got != model[off..off + len] {
                            let bad: Vec<usize> = (0..len).filter(|&i| got[i] != model[off + i]).collect();
                            let first = base + (off + bad[0]) as u64;
                            let last = base + (off + bad[bad.len() - 1]) as u64;
                            panic!("writer {t} step {step}: stale read of {len} at {}: {} bytes differ, {first}..={last} (pages {}..={})", base + off as u64, bad.len(), first / PAGE, last / PAGE);
                        }
                    }
                    model
                })
            })
            .collect();
        // Stop the sweeper before a writer's failure is raised.
        let models: Vec<_> = writers.into_iter().map(|w| w.join()).collect();
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        sweeper.join().unwrap();
        models.into_iter().map(|m| m.expect("a writer failed")).collect()
    });
    c.flush().unwrap();
    assert!(inner.snapshot() == models.concat());
}

const DIR: Attr = Attr {
    perm: 0o755,
    uid: 0,
    gid: 0,
};
const FILE: Attr = Attr {
    perm: 0o644,
    uid: 0,
    gid: 0,
};

/// File `i`'s contents: a few hundred bytes to a few blocks.
fn contents(i: usize) -> Vec<u8> {
    format!("file {i} ").repeat(1 + i % 700).into_bytes()
}

/// Creates files `from..to` in directory `d{batch}` in one batch.
fn create_batch(fs: &Filesystem, batch: usize, from: usize, to: usize) {
    let mut b = fs.batch().unwrap();
    let d = b
        .create(ROOT_INO, format!("d{batch}").as_bytes(), NodeKind::Directory, DIR)
        .unwrap()
        .ino;
    for i in from..to {
        let f = b
            .create(d, format!("f{i:05}").as_bytes(), NodeKind::Regular, FILE)
            .unwrap();
        b.write(f.ino, 0, &contents(i)).unwrap();
    }
    b.finish().unwrap();
}

fn check_batch(fs: &Filesystem, batch: usize, from: usize, to: usize) {
    for i in from..to {
        let ino = fs.resolve(format!("/d{batch}/f{i:05}").as_bytes()).unwrap();
        assert_eq!(fs.read_all(&ino, 1 << 20).unwrap(), contents(i), "file {i}");
    }
}

#[test]
fn the_engine_through_a_small_page_cache_leaves_a_clean_image() {
    if skip_unless(require_tool("e2fsck")).is_none() {
        return;
    }
    // 4 KiB pages over the 1 KiB blocks mkfs picks for 64 MiB (most
    // writes fill part of a page first), and one page per block; the same
    // run again gives the same counts.
    let runs: Vec<_> = [4096, 1024, 4096].into_iter().map(run_through_a_small_cache).collect();
    assert_eq!(runs[0], runs[2], "the same run twice");
}

/// Runs the workload through a 512 KiB cache of `page`-byte pages and
/// checks the image; returns the cache's counts.
fn run_through_a_small_cache(page: usize) -> ext4kit_engine::device::PageCacheStats {
    let mem = Arc::new(MemDevice::new(fresh_image(64 << 20)));
    let cache = Arc::new(PageCache::with_page_size(mem.clone(), 512 << 10, page));
    let fs = Filesystem::open(Box::new(cache.clone()), OpenOptions::default()).unwrap();
    assert_eq!(fs.block_size(), 1024);
    for batch in 0..6 {
        create_batch(&fs, batch, batch * 500, (batch + 1) * 500);
        if batch % 2 == 1 {
            fs.sync().unwrap();
        }
    }
    for batch in 0..6 {
        check_batch(&fs, batch, batch * 500, (batch + 1) * 500);
    }
    fs.unmount().unwrap();
    let s = cache.stats();
    assert!(s.hits > 0 && s.dirty_evictions > 0 && s.evictions > 0, "{page}: {s:?}");
    assert!(
        s.inner_writes < s.writes,
        "{page}: write-back joins and absorbs writes: {s:?}"
    );
    assert_eq!(s.fills > 0, page > 1024, "{page}: {s:?}");
    assert_clean(&mem.snapshot(), &format!("{page}-byte pages, after unmount"));
    // The device alone holds the whole file system.
    let fs = Filesystem::open(Box::new(mem.clone()), OpenOptions::default()).unwrap();
    for batch in 0..6 {
        check_batch(&fs, batch, batch * 500, (batch + 1) * 500);
    }
    fs.unmount().unwrap();
    s
}

#[test]
fn a_crash_below_the_cache_recovers_clean_with_every_synced_batch() {
    if skip_unless(require_tool("e2fsck")).is_none() {
        return;
    }
    let crash = Arc::new(CrashDevice::with_atomic_unit(fresh_image(16 << 20), 4096));
    let cache = PageCache::new(crash.clone(), 256 << 10);
    let fs = Filesystem::open(Box::new(cache), OpenOptions::default()).unwrap();
    let start = crash.writes();
    // (writes logged when batch i's sync returned, i, its file range)
    let mut synced = Vec::new();
    for batch in 0..8 {
        let range = (batch * 150, (batch + 1) * 150);
        create_batch(&fs, batch, range.0, range.1);
        fs.sync().unwrap();
        synced.push((crash.writes(), batch, range));
    }
    fs.unmount().unwrap();
    let writes = crash.writes();
    let mut points: Vec<(usize, Survivors)> = crash
        .flush_points()
        .into_iter()
        .filter(|&p| p >= start)
        .step_by(3)
        .map(|p| (p, Survivors::None))
        .collect();
    // Just after each sync returned, with nothing unflushed surviving.
    points.extend(synced.iter().map(|&(at, _, _)| (at, Survivors::None)));
    points.extend(crash_cases::random_points(&crash, start, 30, &mut Rng::new(0x9a9e)));
    for (point, s) in points {
        let mem = Arc::new(MemDevice::new(crash.crash_image(point, s)));
        let fs = Filesystem::open(Box::new(mem.clone()), OpenOptions::default()).unwrap();
        // A batch whose sync returned before the crash is there whole.
        for &(at, batch, (from, to)) in &synced {
            if at <= point {
                check_batch(&fs, batch, from, to);
            }
        }
        fs.unmount().unwrap();
        assert_clean(&mem.snapshot(), &format!("crash at write {point} of {writes} ({s:?})"));
    }
}

/// Over the disk model, the cache's size decides what a re-read costs: a
/// warm re-read of a file reaches the disk not at all; after `drop_all`
/// (and the drive's own cache dropped) it costs what the first cold read
/// did, request for request; with no cache every re-read goes to the disk.
#[test]
fn over_the_disk_model_cold_and_warm_are_chosen() {
    let profile: DiskProfile = "hp-sas-10k".parse().unwrap();
    let mut per_size = Vec::new();
    for size in [8u64 << 20, 0] {
        let disk = Arc::new(DiskModel::new(MemDevice::new(fresh_image(32 << 20)), &profile).unwrap());
        let cache = Arc::new(PageCache::new(disk.clone(), size));
        let fs = Filesystem::open(Box::new(cache.clone()), OpenOptions::default()).unwrap();
        let ino = fs.create(ROOT_INO, b"big", NodeKind::Regular, FILE).unwrap().ino;
        fs.write(ino, 0, &vec![0x5a; 2 << 20]).unwrap();
        fs.sync().unwrap();
        let inode = fs.inode(ino).unwrap();
        let mut reads = Vec::new();
        for round in 0..3 {
            if round != 1 {
                cache.drop_all().unwrap();
                disk.drop_cache();
            }
            let (before, t0) = (disk.stats(), disk.now_ns());
            assert_eq!(fs.read_all(&inode, 4 << 20).unwrap().len(), 2 << 20);
            let after = disk.stats();
            reads.push((after.reads - before.reads, disk.now_ns() - t0));
        }
        fs.unmount().unwrap();
        per_size.push(reads);
    }
    let (cached, uncached) = (&per_size[0], &per_size[1]);
    let cold = cached[0];
    assert!(
        cold.0 > 0 && cold.1 > 1_000_000,
        "a cold 2 MiB read takes disk time: {cached:?}"
    );
    assert_eq!(cached[1], (0, 0), "a warm re-read never reaches the disk");
    assert_eq!(cached[2].0, cold.0, "cold again after drop_all: {cached:?}");
    assert!(cached[2].1 > 1_000_000, "{cached:?}");
    assert!(
        uncached[1].0 > 0 && uncached[1].1 > 0,
        "with no cache a re-read goes to the disk: {uncached:?}"
    );
}
