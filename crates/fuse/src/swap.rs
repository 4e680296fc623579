//! The engine [`Filesystem`] a mount serves, which a grow of the mounted
//! image replaces (see [`crate::resize_request`]).
//!
//! An open `Filesystem` keeps its geometry and group table for life, so
//! growing the image means closing it and opening the grown image. Every
//! request, the flusher's commits and the buddy warmer hold the *gate*
//! shared while they use the file system; a grow holds it exclusively:
//! it waits for the requests in flight, new ones wait for it, and in
//! between it detaches the file system (written back, committed, clean,
//! files still open kept open), grows the image file offline and opens it
//! again with the open counts carried over. Handles, write-back state and
//! the kernel's caches name inodes and offsets, which a grow does not
//! change (a grow past the reserved GDT blocks moves data blocks and
//! tables, whose places only the engine knows and the new open reads
//! anew), so they stay valid across the swap.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use ext4kit_engine::resize::{OpenCounts, ResizeReport, grow_detached};
use ext4kit_engine::{Error, Filesystem};
use parking_lot::{Condvar, Mutex, RwLock, RwLockReadGuard};

/// Opens the served image again after a grow, with the options of the
/// mount and the given files already open
/// ([`ext4kit_engine::OpenOptions::keep_open`]).
pub type Reopen = Box<dyn Fn(OpenCounts) -> std::io::Result<Filesystem> + Send + Sync>;

/// The image file and how to open it again, when the mount can grow.
pub(crate) struct Source {
    pub(crate) image: PathBuf,
    pub(crate) reopen: Reopen,
}

/// The served file system and the gate around its swaps.
pub(crate) struct Served {
    /// `None` only while a grow holds the gate exclusively.
    fs: RwLock<Option<Arc<Filesystem>>>,
    gate: RwLock<()>,
    /// Set while a grow waits for or holds the gate: long background work
    /// ends early so that the grow does not wait for it.
    swapping: AtomicBool,
    /// Counts the swaps (the buddy warmer starts over after one).
    generation: AtomicU64,
    /// Wakes background threads waiting for a swap (or told to stop).
    woken: (Mutex<()>, Condvar),
    source: Option<Source>,
}

impl Served {
    pub(crate) fn new(fs: Filesystem, source: Option<Source>) -> Self {
        Self {
            fs: RwLock::new(Some(Arc::new(fs))),
            gate: RwLock::new(()),
            swapping: AtomicBool::new(false),
            generation: AtomicU64::new(0),
            woken: Default::default(),
            source,
        }
    }

    /// The file system now served. Called with the gate held shared (or
    /// outside any grow: before and after the session).
    pub(crate) fn get(&self) -> Arc<Filesystem> {
        self.fs
            .read()
            .clone()
            .expect("the file system is swapped only while the gate is held exclusively")
    }

    /// Holds off grows while the guard lives.
    pub(crate) fn enter(&self) -> RwLockReadGuard<'_, ()> {
        self.gate.read()
    }

    /// True while a grow waits for the gate or holds it.
    pub(crate) fn swapping(&self) -> bool {
        self.swapping.load(Ordering::Acquire)
    }

    pub(crate) fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Waits until a swap after generation `seen`, or until `stopped`
    /// (whose setter calls [`Served::wake`]).
    pub(crate) fn wait_for_swap(&self, seen: u64, stopped: &dyn Fn() -> bool) {
        let mut g = self.woken.0.lock();
        while self.generation() == seen && !stopped() {
            self.woken.1.wait(&mut g);
        }
    }

    /// Wakes [`Served::wait_for_swap`] to look again.
    pub(crate) fn wake(&self) {
        let _g = self.woken.0.lock();
        self.woken.1.notify_all();
    }

    /// The file system, once nothing else holds it (at the end of the
    /// session).
    pub(crate) fn into_inner(self) -> Option<Filesystem> {
        self.fs.into_inner().and_then(|fs| Arc::try_unwrap(fs).ok())
    }

    /// Grows the served image to `blocks` blocks (as planned by
    /// [`Filesystem::plan_online_grow`]) with every request held off;
    /// returns the report and how long requests were held.
    ///
    /// # Errors
    /// This mount cannot reopen its image; the file system could not be
    /// detached (it is served on, unchanged); what the grow reports (the
    /// image, old or grown, is served again).
    pub(crate) fn grow(&self, blocks: u64) -> Result<(ResizeReport, Duration), Error> {
        let Some(source) = &self.source else {
            return Err(Error::Unsupported(
                "this mount serves no image file it can open again: it cannot grow while mounted".into(),
            ));
        };
        self.swapping.store(true, Ordering::Release);
        let gate = self.gate.write();
        let held = Instant::now();
        let r = self.swap_grown(source, blocks);
        self.generation.fetch_add(1, Ordering::AcqRel);
        self.swapping.store(false, Ordering::Release);
        drop(gate);
        self.wake();
        r.map(|report| (report, held.elapsed()))
    }

    /// The work of [`Served::grow`], under the exclusive gate.
    fn swap_grown(&self, source: &Source, blocks: u64) -> Result<ResizeReport, Error> {
        let mut slot = self.fs.write();
        let Some(fs) = slot.take() else {
            return Err(Error::InvalidArgument("no file system is served".into()));
        };
        let fs = match Arc::try_unwrap(fs) {
            Ok(fs) => fs,
            Err(fs) => {
                *slot = Some(fs);
                return Err(Error::InvalidArgument("the file system is busy".into()));
            }
        };
        let t = Instant::now();
        let kept = match fs.detach() {
            Ok(kept) => kept,
            Err(e) => {
                *slot = Some(Arc::new(fs));
                return Err(e);
            }
        };
        let keys = fs.keys();
        // Releases the image, which the grow claims for itself.
        drop(fs);
        let detached = t.elapsed();
        let grown = grow_detached(&source.image, blocks, &kept);
        let done = t.elapsed();
        if let Err(e) = &grown {
            log::error!("ext4kit: growing {} while mounted: {e}", source.image.display());
        }
        let fs = reopen(source, kept);
        fs.add_keys(keys);
        *slot = Some(Arc::new(fs));
        log::info!(
            "ext4kit: grow while mounted: detached in {} ms, grown in {} ms, opened again in {} ms",
            detached.as_millis(),
            (done - detached).as_millis(),
            (t.elapsed() - done).as_millis()
        );
        grown
    }
}

/// Opens the image again. The image lock is let go between the detach,
/// the grow and this open, so another ext4kit process may hold the image
/// for a moment: the open is tried for up to [`REOPEN_TRIES`] tenths of
/// a second. The mount cannot go on without it, so a failure ends the
/// server, leaving the image clean on disk.
fn reopen(source: &Source, kept: OpenCounts) -> Filesystem {
    let mut last = None;
    for _ in 0..REOPEN_TRIES {
        match (source.reopen)(kept.clone()) {
            Ok(fs) => return fs,
            Err(e) => {
                if last.is_none() {
                    log::error!(
                        "ext4kit: opening {} again after a grow: {e}; trying again",
                        source.image.display()
                    );
                }
                last = Some(e);
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    log::error!(
        "ext4kit: opening {} again after a grow: {}; the mount cannot go on",
        source.image.display(),
        last.map_or_else(String::new, |e| e.to_string())
    );
    std::process::exit(1);
}

/// How many times [`reopen`] tries.
const REOPEN_TRIES: u32 = 100;
