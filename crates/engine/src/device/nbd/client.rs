//! One NBD connection in its transmission phase, with several requests in
//! flight. Callers [`Connection::submit`] a request and get a [`Ticket`];
//! a reader thread takes replies as they come, in any order, and hands
//! each to the ticket whose cookie it names. Structured replies (data,
//! hole, block-status and error chunks) are assembled per request.
//!
//! The connection dies at the first thing that breaks the stream (the
//! server gone, a reply to no request, a chunk past its request, bad
//! magic): every request in flight then fails with EIO naming why, and so
//! does every later one. What to do next (reconnect for reads, refuse
//! writes) is the device's business, not this module's.

use std::collections::HashMap;
use std::io::{self, IoSlice, Read, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, sync_channel};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use super::handshake::{Negotiated, Stream};
use super::wire::{self, Cmd, ReplyKind, WireError};

/// A request's outcome: a read's bytes, or block-status extents.
#[derive(Debug, Default)]
pub struct Reply {
    /// The bytes read (empty for other requests).
    pub data: Vec<u8>,
    /// `(length, flags)` descriptors of `base:allocation`.
    pub extents: Vec<(u32, u32)>,
}

/// Where one in-flight request stands. Dropping it frees its slot.
struct Pending {
    cmd: Cmd,
    offset: u64,
    len: u32,
    data: Vec<u8>,
    covered: u64,
    extents: Vec<(u32, u32)>,
    error: Option<io::Error>,
    tx: SyncSender<io::Result<Reply>>,
    _slot: Slot,
}

impl Pending {
    fn finish(mut self) {
        let r = match self.error.take() {
            Some(e) => Err(e),
            None if self.cmd == Cmd::Read && self.covered != u64::from(self.len) => Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "NBD: the reply to a read of {} bytes at {} covered only {} of them",
                    self.len, self.offset, self.covered
                ),
            )),
            None => Ok(Reply {
                data: std::mem::take(&mut self.data),
                extents: std::mem::take(&mut self.extents),
            }),
        };
        let _ = self.tx.send(r);
    }

    fn fail(self, why: &str) {
        let _ = self.tx.send(Err(lost(why)));
    }
}

/// A connection-loss error: EIO to the engine, with the reason.
pub fn lost(why: &str) -> io::Error {
    io::Error::other(format!("NBD connection lost: {why}"))
}

/// Requests in flight and whether the connection still lives: one lock,
/// so a request is never added to a table that has been drained.
#[derive(Default)]
struct Table {
    pending: HashMap<u64, Pending>,
    dead: Option<String>,
}

struct Shared {
    table: Mutex<Table>,
    in_flight: Mutex<usize>,
    slot_freed: Condvar,
    max_in_flight: usize,
    /// A handle on the socket to shut it down while others use it.
    control: Stream,
}

/// One request's claim on the in-flight budget.
struct Slot(Arc<Shared>);

impl Drop for Slot {
    fn drop(&mut self) {
        *lock(&self.0.in_flight) -= 1;
        self.0.slot_freed.notify_one();
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Shared {
    fn kill(&self, why: String) {
        let drained: Vec<Pending> = {
            let mut t = lock(&self.table);
            if t.dead.is_none() {
                t.dead = Some(why.clone());
            }
            t.pending.drain().map(|(_, p)| p).collect()
        };
        self.control.shutdown();
        for p in drained {
            p.fail(&why);
        }
    }

    fn slot(self: &Arc<Self>) -> Slot {
        let mut n = lock(&self.in_flight);
        while *n >= self.max_in_flight {
            n = self.slot_freed.wait(n).unwrap_or_else(PoisonError::into_inner);
        }
        *n += 1;
        Slot(self.clone())
    }
}

/// An open connection.
pub struct Connection {
    writer: Mutex<Stream>,
    shared: Arc<Shared>,
    next_cookie: AtomicU64,
    negotiated: Negotiated,
    reader: Mutex<Option<JoinHandle<()>>>,
    timeout: Duration,
}

/// A submitted request; [`Ticket::wait`] gives its reply.
pub struct Ticket<'a> {
    conn: &'a Connection,
    rx: Receiver<io::Result<Reply>>,
}

impl Ticket<'_> {
    /// Waits for the reply. A server silent for longer than the timeout
    /// is taken for dead: the connection is killed and the request fails.
    ///
    /// # Errors
    /// The server's error (its errno), or EIO when the connection died.
    pub fn wait(self) -> io::Result<Reply> {
        match self.rx.recv_timeout(self.conn.timeout) {
            Ok(r) => r,
            Err(RecvTimeoutError::Timeout) => {
                let why = format!("no reply within {:?}", self.conn.timeout);
                self.conn.shared.kill(why);
                self.rx.recv().unwrap_or_else(|_| Err(lost("the request was dropped")))
            }
            Err(RecvTimeoutError::Disconnected) => Err(lost(&self.conn.death().unwrap_or_default())),
        }
    }
}

impl Connection {
    /// Starts the transmission phase on a negotiated socket.
    ///
    /// # Errors
    /// The OS error of cloning the socket or starting the reader thread.
    pub fn start(stream: Stream, negotiated: Negotiated, max_in_flight: usize, timeout: Duration) -> io::Result<Self> {
        stream.set_read_timeout(None)?;
        let shared = Arc::new(Shared {
            table: Mutex::default(),
            in_flight: Mutex::new(0),
            slot_freed: Condvar::new(),
            max_in_flight: max_in_flight.max(1),
            control: stream.try_clone()?,
        });
        let mut reader = Reader {
            stream: stream.try_clone()?,
            shared: shared.clone(),
            structured: negotiated.structured,
        };
        let handle = std::thread::Builder::new()
            .name("nbd-reader".into())
            .spawn(move || reader.run())?;
        Ok(Self {
            writer: Mutex::new(stream),
            shared,
            next_cookie: AtomicU64::new(1),
            negotiated,
            reader: Mutex::new(Some(handle)),
            timeout,
        })
    }

    /// What the handshake settled.
    pub fn negotiated(&self) -> &Negotiated {
        &self.negotiated
    }

    /// Why the connection died, if it has.
    pub fn death(&self) -> Option<String> {
        lock(&self.shared.table).dead.clone()
    }

    /// Sends a request (waiting first while the in-flight budget is
    /// spent). `payload` is a write's data, sent after the header.
    ///
    /// # Errors
    /// EIO when the connection is dead.
    pub fn submit(&self, cmd: Cmd, flags: u16, offset: u64, len: u32, payload: &[&[u8]]) -> io::Result<Ticket<'_>> {
        let slot = self.shared.slot();
        let cookie = self.next_cookie.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = sync_channel(1);
        let data = if cmd == Cmd::Read {
            vec![0; len as usize]
        } else {
            Vec::new()
        };
        {
            let mut t = lock(&self.shared.table);
            if let Some(why) = &t.dead {
                return Err(lost(why));
            }
            let p = Pending {
                cmd,
                offset,
                len,
                data,
                covered: 0,
                extents: Vec::new(),
                error: None,
                tx,
                _slot: slot,
            };
            t.pending.insert(cookie, p);
        }
        let header = wire::encode_request(flags, cmd, cookie, offset, len);
        let mut parts = Vec::with_capacity(1 + payload.len());
        parts.push(IoSlice::new(&header));
        parts.extend(payload.iter().map(|p| IoSlice::new(p)));
        if let Err(e) = write_all_vectored(&mut lock(&self.writer), &mut parts) {
            self.shared.kill(format!("sending a request: {e}"));
        }
        Ok(Ticket { conn: self, rx })
    }

    /// Says goodbye (`NBD_CMD_DISC`), closes the socket, and waits for the
    /// reader thread.
    pub fn close(&self) {
        if self.death().is_none() {
            let header = wire::encode_request(0, Cmd::Disc, 0, 0, 0);
            let _ = lock(&self.writer).write_all(&header);
        }
        self.shared.kill("the connection was closed".into());
        if let Some(h) = lock(&self.reader).take() {
            let _ = h.join();
        }
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        self.close();
    }
}

fn write_all_vectored(w: &mut Stream, mut parts: &mut [IoSlice<'_>]) -> io::Result<()> {
    while !parts.is_empty() {
        match w.write_vectored(parts) {
            Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
            Ok(n) => IoSlice::advance_slices(&mut parts, n),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// The reader thread: one reply (or chunk) at a time until the stream
/// breaks, then the connection is killed with the reason.
struct Reader {
    stream: Stream,
    shared: Arc<Shared>,
    structured: bool,
}

impl Reader {
    fn run(&mut self) {
        let why = loop {
            if let Err(e) = self.one() {
                break e;
            }
        };
        self.shared.kill(why);
    }

    fn read(&mut self, buf: &mut [u8], what: &str) -> Result<(), String> {
        self.stream.read_exact(buf).map_err(|e| match e.kind() {
            io::ErrorKind::UnexpectedEof => format!("the server closed the connection (while reading {what})"),
            _ => format!("reading {what}: {e}"),
        })
    }

    fn take(&self, cookie: u64) -> Result<Pending, String> {
        let mut t = lock(&self.shared.table);
        t.pending
            .remove(&cookie)
            .ok_or_else(|| format!("the server replied to cookie {cookie}, which no request in flight holds"))
    }

    fn one(&mut self) -> Result<(), String> {
        let mut magic = [0u8; 4];
        self.read(&mut magic, "a reply")?;
        match wire::reply_kind(magic).map_err(|e| e.to_string())? {
            ReplyKind::Simple => self.simple(),
            ReplyKind::Structured if self.structured => self.chunk(),
            ReplyKind::Structured => Err("a structured reply, which was not negotiated".into()),
        }
    }

    fn simple(&mut self) -> Result<(), String> {
        let mut rest = [0u8; 12];
        self.read(&mut rest, "a simple reply")?;
        let (error, cookie) = wire::parse_simple(&rest);
        let mut p = self.take(cookie)?;
        if error != 0 {
            p.error = Some(io::Error::from_raw_os_error(wire::errno(error)));
        } else if p.cmd == Cmd::Read {
            let mut data = std::mem::take(&mut p.data);
            if let Err(why) = self.read(&mut data, "read data") {
                p.fail(&why);
                return Err(why);
            }
            p.data = data;
            p.covered = u64::from(p.len);
        }
        p.finish();
        Ok(())
    }

    fn chunk(&mut self) -> Result<(), String> {
        let mut rest = [0u8; 16];
        self.read(&mut rest, "a structured reply chunk")?;
        let c = wire::parse_chunk(&rest);
        let mut p = self.take(c.cookie)?;
        if let Err(why) = self.chunk_payload(&c, &mut p) {
            p.fail(&why);
            return Err(why);
        }
        if c.flags & wire::REPLY_FLAG_DONE != 0 {
            p.finish();
            return Ok(());
        }
        let mut t = lock(&self.shared.table);
        match &t.dead {
            Some(why) => {
                let why = why.clone();
                drop(t);
                p.fail(&why);
            }
            None => {
                t.pending.insert(c.cookie, p);
            }
        }
        Ok(())
    }

    fn chunk_payload(&mut self, c: &wire::Chunk, p: &mut Pending) -> Result<(), String> {
        let bad = |what: String| Err(format!("chunk for cookie {}: {what}", c.cookie));
        let meta_max = wire::MAX_CHUNK_META;
        match c.kind {
            wire::REPLY_TYPE_OFFSET_DATA if p.cmd == Cmd::Read => {
                if c.len < 8 || c.len - 8 > p.len {
                    return bad(WireError::TooLong {
                        what: "data chunk",
                        len: c.len.into(),
                        max: u64::from(p.len) + 8,
                    }
                    .to_string());
                }
                let mut off = [0u8; 8];
                self.read(&mut off, "a data chunk")?;
                let at = self.place(wire::be64(&off), u64::from(c.len - 8), p)?;
                let mut data = std::mem::take(&mut p.data);
                let r = self.read(&mut data[at..at + (c.len - 8) as usize], "read data");
                p.data = data;
                r
            }
            wire::REPLY_TYPE_OFFSET_HOLE if p.cmd == Cmd::Read => {
                if c.len != 12 {
                    return bad(format!("hole chunk of {} bytes, not 12", c.len));
                }
                let mut b = [0u8; 12];
                self.read(&mut b, "a hole chunk")?;
                let len = u64::from(wire::be32(&b[8..]));
                let at = self.place(wire::be64(&b), len, p)?;
                p.data[at..at + len as usize].fill(0);
                Ok(())
            }
            wire::REPLY_TYPE_BLOCK_STATUS if p.cmd == Cmd::BlockStatus => {
                if c.len < 4 || c.len > meta_max || !(c.len - 4).is_multiple_of(8) {
                    return bad(format!("block status chunk of {} bytes", c.len));
                }
                let mut b = vec![0u8; c.len as usize];
                self.read(&mut b, "a block status chunk")?;
                p.extents
                    .extend(b[4..].chunks_exact(8).map(|d| (wire::be32(d), wire::be32(&d[4..]))));
                Ok(())
            }
            k if wire::is_error_chunk(k) => {
                if c.len > meta_max {
                    return bad(WireError::TooLong {
                        what: "error chunk",
                        len: c.len.into(),
                        max: meta_max.into(),
                    }
                    .to_string());
                }
                let mut b = vec![0u8; c.len as usize];
                self.read(&mut b, "an error chunk")?;
                let (err, msg) = wire::parse_error_chunk(&b).map_err(|e| e.to_string())?;
                // A generic EIO keeps the server's message; any other
                // errno travels as itself (ENOSPC must stay ENOSPC).
                let e = match wire::errno(err) {
                    libc::EIO => io::Error::other(format!("NBD server: I/O error: {msg}")),
                    n => io::Error::from_raw_os_error(n),
                };
                p.error.get_or_insert(e);
                Ok(())
            }
            wire::REPLY_TYPE_NONE if c.len == 0 && c.flags & wire::REPLY_FLAG_DONE != 0 => Ok(()),
            k => bad(format!(
                "chunk type {k} of {} bytes is not a reply to a {:?} request",
                c.len, p.cmd
            )),
        }
    }

    /// Where a chunk for bytes `[offset, offset + len)` of the export
    /// lands in the request's buffer; outside the request is a breach.
    fn place(&self, offset: u64, len: u64, p: &mut Pending) -> Result<usize, String> {
        let inside = offset >= p.offset
            && offset
                .checked_add(len)
                .is_some_and(|end| end <= p.offset + u64::from(p.len));
        if !inside {
            return Err(format!(
                "a chunk for {len} bytes at {offset} lies outside the read of {} bytes at {}",
                p.len, p.offset
            ));
        }
        p.covered += len;
        Ok((offset - p.offset) as usize)
    }
}
