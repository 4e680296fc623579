//! An image served over the network block device protocol (qemu-nbd,
//! nbdkit, Ceph's NBD gateway…), opened without a kernel nbd device or
//! root: `nbd://host[:port]/export` or `nbd+unix:///export?socket=PATH`.
//!
//! [`NbdDevice`] splits each access into requests of at most
//! [`NbdOptions::request_bytes`] and sends them all before waiting, so a
//! large read or write keeps up to [`NbdOptions::max_in_flight`] requests
//! on the wire; replies come back in any order ([`client`]).
//!
//! The guarantees a journal needs, over a link that can break:
//! - A write returns only once the server acknowledged it, so a
//!   [`BlockDevice::flush`] sent after it covers it: a flush is never
//!   reordered with the writes it covers.
//! - When the connection dies, requests in flight fail with EIO. Reads
//!   reconnect and retry. Writes do not: if a write was in flight, or an
//!   acknowledged write was not yet covered by a flush, the server may
//!   have lost it, so every later write and flush fails with EIO too (the
//!   engine then stops writing; what was flushed stays on the export).
//!
//! An export has no `flock` to take: two hosts opening one image are kept
//! apart by multi-mount protection (the `mmp` feature), as for a shared
//! disk. `nbds://` speaks TLS ([`tls`]); a server answering
//! `NBD_REP_ERR_TLS_REQD` to a plain `nbd://` URI is refused with a
//! message that says to use `nbds://`.

mod cache;
mod client;
mod counters;
mod handshake;
mod tls;
pub mod uri;
pub mod wire;

use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::{Mutex, RwLock};

pub use self::cache::{CachedExport, DEFAULT_CACHE_BYTES, cache_bytes, open_image};
use self::client::{Connection, lost};
use self::counters::Counters;
pub use self::counters::NbdStats;
use self::handshake::Stream;
pub use self::uri::{Endpoint, NbdUri, TlsParams, is_nbd_uri};
use self::wire::{BlockSizes, Cmd, ExportInfo, tflags};
use super::{BlockDevice, past_end};

/// How an [`NbdDevice`] talks to its server.
#[derive(Clone, Copy, Debug)]
pub struct NbdOptions {
    /// Open for writing (refused when the export is read-only).
    pub writable: bool,
    /// Most requests on the wire at once (1: a naive client).
    pub max_in_flight: usize,
    /// Largest payload of one request (clamped to the server's maximum).
    pub request_bytes: u32,
    /// A server silent this long is taken for dead.
    pub timeout: Duration,
}

impl Default for NbdOptions {
    fn default() -> Self {
        Self {
            writable: false,
            max_in_flight: 16,
            request_bytes: 256 << 10,
            timeout: Duration::from_secs(60),
        }
    }
}

/// The largest request payload the protocol lets a client assume when the
/// server names no maximum.
const DEFAULT_MAX_PAYLOAD: u32 = 32 << 20;

/// A block device reached over NBD.
pub struct NbdDevice {
    uri: NbdUri,
    opts: NbdOptions,
    conn: RwLock<Arc<Connection>>,
    info: ExportInfo,
    /// Writes begun (counted before they are sent), finished (acknowledged
    /// or refused by the server), and how many the last successful flush
    /// covered: a dead connection with a begun write not covered may have
    /// lost it. Begun, not finished, is what a death is checked against,
    /// so a write whose reply came in but whose count did not yet is
    /// still seen as uncovered by a reconnect in another thread.
    writes_started: AtomicU64,
    writes_acked: AtomicU64,
    writes_flushed: AtomicU64,
    /// Why writes are refused from now on.
    writes_lost: Mutex<Option<String>>,
    reconnecting: Mutex<()>,
    counters: Counters,
}

impl NbdDevice {
    /// Connects to `uri` and negotiates the export.
    ///
    /// # Errors
    /// The connection or handshake failing (no server, no such export,
    /// TLS required, a protocol breach: named in the message); a writable
    /// open of a read-only export (`ReadOnlyFilesystem`).
    pub fn open(uri: &NbdUri, opts: NbdOptions) -> io::Result<Self> {
        let conn = connect(uri, &opts)?;
        let info = conn.negotiated().info;
        if opts.writable && info.flags & tflags::READ_ONLY != 0 {
            return Err(io::Error::new(
                io::ErrorKind::ReadOnlyFilesystem,
                format!("{uri}: the server exports it read-only"),
            ));
        }
        Ok(Self {
            uri: uri.clone(),
            opts,
            conn: RwLock::new(Arc::new(conn)),
            info,
            writes_started: AtomicU64::new(0),
            writes_acked: AtomicU64::new(0),
            writes_flushed: AtomicU64::new(0),
            writes_lost: Mutex::new(None),
            reconnecting: Mutex::new(()),
            counters: Counters::default(),
        })
    }

    /// [`Self::open`] for a URI given as text, with default options.
    ///
    /// # Errors
    /// A malformed URI (`InvalidInput`), or as [`Self::open`].
    pub fn open_uri(uri: &str, writable: bool) -> io::Result<Self> {
        let opts = NbdOptions {
            writable,
            ..NbdOptions::default()
        };
        Self::open(&NbdUri::parse(uri)?, opts)
    }

    /// The requests sent so far, by kind.
    pub fn stats(&self) -> NbdStats {
        self.counters.read()
    }

    /// What the server said about the export.
    pub fn info(&self) -> ExportInfo {
        self.info
    }

    /// The server's block sizes, or the protocol's defaults (1 byte
    /// minimum, 4 KiB preferred, 32 MiB maximum) when it named none.
    pub fn block_sizes(&self) -> BlockSizes {
        self.info.block_size.unwrap_or(BlockSizes {
            min: 1,
            preferred: 4096,
            max: DEFAULT_MAX_PAYLOAD,
        })
    }

    /// Whether the server answers `NBD_CMD_BLOCK_STATUS` (it offered the
    /// `base:allocation` context).
    pub fn has_block_status(&self) -> bool {
        self.conn.read().negotiated().allocation_context.is_some()
    }

    fn request_bytes(&self) -> u64 {
        let b = self.block_sizes();
        let max = b.max.min(DEFAULT_MAX_PAYLOAD).max(b.min);
        let want = self.opts.request_bytes.clamp(b.min, max);
        u64::from(want - want % b.min)
    }

    fn check_range(&self, offset: u64, len: usize) -> io::Result<()> {
        match offset.checked_add(len as u64) {
            Some(end) if end <= self.info.size => Ok(()),
            _ => Err(past_end(offset, len, self.info.size)),
        }
    }

    /// `[offset, offset + len)` cut into request-sized pieces.
    fn pieces(&self, offset: u64, len: u64) -> impl Iterator<Item = (u64, u32)> {
        let step = self.request_bytes();
        (0..len.div_ceil(step)).map(move |i| {
            let at = i * step;
            (offset + at, (len - at).min(step) as u32)
        })
    }

    fn current(&self) -> Arc<Connection> {
        self.conn.read().clone()
    }

    /// Replaces a dead connection (unless another thread already did).
    /// Writes acknowledged but not flushed may be gone with the server:
    /// from then on writes are refused.
    fn reconnect(&self, dead: &Arc<Connection>) -> io::Result<()> {
        let _one = self.reconnecting.lock();
        if !Arc::ptr_eq(&self.current(), dead) {
            return Ok(());
        }
        self.note_death(dead);
        let fresh = connect(&self.uri, &self.opts)?;
        if fresh.negotiated().info.size != self.info.size {
            return Err(io::Error::other(format!(
                "{}: the export's size changed from {} to {} bytes across a reconnect",
                self.uri,
                self.info.size,
                fresh.negotiated().info.size
            )));
        }
        *self.conn.write() = Arc::new(fresh);
        Ok(())
    }

    fn note_death(&self, conn: &Connection) {
        let Some(why) = conn.death() else { return };
        if self.writes_started.load(Ordering::SeqCst) > self.writes_flushed.load(Ordering::SeqCst) {
            self.writes_lost.lock().get_or_insert(why);
        }
    }

    fn read_once(&self, conn: &Connection, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        let mut tickets = Vec::new();
        for (at, len) in self.pieces(offset, buf.len() as u64) {
            tickets.push((at, conn.submit(Cmd::Read, 0, at, len, &[])?));
            self.counters.note(Cmd::Read, len);
        }
        self.counters
            .note_batch(tickets.len().min(self.opts.max_in_flight.max(1)));
        for (at, t) in tickets {
            let data = t.wait()?.data;
            let from = (at - offset) as usize;
            buf[from..from + data.len()].copy_from_slice(&data);
        }
        Ok(())
    }

    /// Sends `cmd` over the whole range (writes with `data`) and waits
    /// for every piece; a dead connection refuses writes from then on.
    fn send_all(&self, cmd: Cmd, flags: u16, offset: u64, len: u64, data: Option<&[u8]>) -> io::Result<()> {
        self.send_batch(cmd, flags, &[(offset, len, data)])
    }

    /// Sends `cmd` over every range of `batch`, all pieces before the
    /// first reply is awaited, and waits for them all.
    fn send_batch(&self, cmd: Cmd, flags: u16, batch: &[(u64, u64, Option<&[u8]>)]) -> io::Result<()> {
        if let Some(why) = &*self.writes_lost.lock() {
            return Err(lost(why));
        }
        self.writes_started.fetch_add(1, Ordering::SeqCst);
        let conn = self.current();
        let r = (|| {
            let mut tickets = Vec::new();
            for &(offset, len, data) in batch {
                for (at, n) in self.pieces(offset, len) {
                    let payload = data.map(|d| &d[(at - offset) as usize..][..n as usize]);
                    tickets.push(conn.submit(cmd, flags, at, n, payload.as_slice())?);
                    self.counters.note(cmd, n);
                }
            }
            self.counters
                .note_batch(tickets.len().min(self.opts.max_in_flight.max(1)));
            tickets.into_iter().try_for_each(|t| t.wait().map(drop))
        })();
        if r.is_err()
            && let Some(why) = conn.death()
        {
            self.writes_lost.lock().get_or_insert(why);
            return r;
        }
        // Refused by the server, the write waits for no flush either.
        self.writes_acked.fetch_add(1, Ordering::SeqCst);
        r
    }

    fn writable(&self) -> io::Result<()> {
        if self.read_only() {
            return Err(io::Error::from_raw_os_error(libc::EROFS));
        }
        Ok(())
    }

    /// Writes `buf` with `NBD_CMD_FLAG_FUA` (durable when acknowledged),
    /// or a write and a flush when the server has no FUA.
    ///
    /// # Errors
    /// As [`BlockDevice::write_at`].
    pub fn write_durable(&self, offset: u64, buf: &[u8]) -> io::Result<()> {
        self.writable()?;
        self.check_range(offset, buf.len())?;
        if self.info.flags & tflags::SEND_FUA == 0 {
            self.write_at(offset, buf)?;
            return self.flush();
        }
        self.send_all(Cmd::Write, wire::CMD_FLAG_FUA, offset, buf.len() as u64, Some(buf))
    }

    /// Tells the server `len` bytes at `offset` are no longer needed
    /// (`NBD_CMD_TRIM`); they may read back as anything after.
    ///
    /// # Errors
    /// `EOPNOTSUPP` when the server does not trim; as a write otherwise.
    pub fn trim(&self, offset: u64, len: u64) -> io::Result<()> {
        self.writable()?;
        self.check_range(offset, len as usize)?;
        if self.info.flags & tflags::SEND_TRIM == 0 {
            return Err(io::Error::from_raw_os_error(libc::EOPNOTSUPP));
        }
        self.send_all(Cmd::Trim, 0, offset, len, None)
    }

    /// Zeroes `len` bytes at `offset` with `NBD_CMD_WRITE_ZEROES`, or by
    /// writing zeros when the server lacks it.
    ///
    /// # Errors
    /// As [`BlockDevice::write_at`].
    pub fn write_zeroes(&self, offset: u64, len: u64) -> io::Result<()> {
        self.writable()?;
        self.check_range(offset, len as usize)?;
        if self.info.flags & tflags::SEND_WRITE_ZEROES != 0 {
            return self.send_all(Cmd::WriteZeroes, 0, offset, len, None);
        }
        let zeros = vec![0u8; self.request_bytes() as usize];
        for (at, n) in self.pieces(offset, len) {
            self.write_at(at, &zeros[..n as usize])?;
        }
        Ok(())
    }

    /// The `base:allocation` status of the bytes from `offset`: `(length,
    /// flags)` runs, flag 1 a hole, flag 2 reading as zeros. The server may
    /// describe less than `len` bytes.
    ///
    /// # Errors
    /// `EOPNOTSUPP` when the server offered no such context; the
    /// server's error.
    pub fn block_status(&self, offset: u64, len: u32) -> io::Result<Vec<(u32, u32)>> {
        self.check_range(offset, len as usize)?;
        let conn = self.current();
        if conn.negotiated().allocation_context.is_none() {
            return Err(io::Error::from_raw_os_error(libc::EOPNOTSUPP));
        }
        self.counters.note(Cmd::BlockStatus, 0);
        Ok(conn.submit(Cmd::BlockStatus, 0, offset, len, &[])?.wait()?.extents)
    }
}

fn connect(uri: &NbdUri, opts: &NbdOptions) -> io::Result<Connection> {
    let s = Stream::connect(uri)?;
    s.set_read_timeout(Some(opts.timeout))?;
    let (s, negotiated) = handshake::negotiate(s, uri).map_err(|e| io::Error::new(e.kind(), format!("{uri}: {e}")))?;
    Connection::start(s, negotiated, opts.max_in_flight, opts.timeout)
}

impl BlockDevice for NbdDevice {
    fn len(&self) -> u64 {
        self.info.size
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        self.check_range(offset, buf.len())?;
        let mut tries = 0;
        loop {
            let conn = self.current();
            match self.read_once(&conn, offset, buf) {
                Err(e) if conn.death().is_some() && tries < 2 => {
                    tries += 1;
                    self.reconnect(&conn)
                        .map_err(|r| io::Error::new(r.kind(), format!("{e}; reconnecting: {r}")))?;
                }
                r => return r,
            }
        }
    }

    fn write_at(&self, offset: u64, buf: &[u8]) -> io::Result<()> {
        self.writable()?;
        self.check_range(offset, buf.len())?;
        self.send_all(Cmd::Write, 0, offset, buf.len() as u64, Some(buf))
    }

    /// Every write's pieces go on the wire before the first reply is
    /// awaited (up to [`NbdOptions::max_in_flight`] at once), so a page
    /// cache's write-back costs about one round trip, not one per run.
    fn write_many(&self, writes: &[(u64, &[u8])]) -> io::Result<()> {
        self.writable()?;
        for &(offset, buf) in writes {
            self.check_range(offset, buf.len())?;
        }
        let batch: Vec<_> = writes.iter().map(|&(o, b)| (o, b.len() as u64, Some(b))).collect();
        self.send_batch(Cmd::Write, 0, &batch)
    }

    fn flush(&self) -> io::Result<()> {
        if self.read_only() {
            return Ok(());
        }
        if let Some(why) = &*self.writes_lost.lock() {
            return Err(lost(why));
        }
        if self.info.flags & tflags::SEND_FLUSH == 0 {
            return Ok(());
        }
        let covered = self.writes_acked.load(Ordering::SeqCst);
        let conn = self.current();
        self.counters.note(Cmd::Flush, 0);
        let r = conn.submit(Cmd::Flush, 0, 0, 0, &[]).and_then(|t| t.wait().map(drop));
        match r {
            Ok(()) => {
                self.writes_flushed.fetch_max(covered, Ordering::SeqCst);
                Ok(())
            }
            Err(e) => {
                if let Some(why) = conn.death() {
                    self.writes_lost.lock().get_or_insert(why);
                }
                Err(e)
            }
        }
    }

    fn read_only(&self) -> bool {
        !self.opts.writable
    }

    fn name(&self) -> String {
        self.uri.to_string()
    }
}
