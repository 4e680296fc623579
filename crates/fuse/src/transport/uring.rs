//! FUSE over io_uring (Linux 6.14+, `Documentation/filesystems/fuse-io-uring.rst`):
//! after INIT, requests come through ring entries instead of `read` on
//! `/dev/fuse`, and each reply goes back with the fetch of the next
//! request in one submission (`FUSE_IO_URING_CMD_COMMIT_AND_FETCH`).
//!
//! The kernel keeps one queue per possible CPU and puts a request on the
//! queue of the CPU that made it; it switches to the rings only once every
//! queue has an entry. Here each entry has a thread and an io_uring of its
//! own (see [`ext4kit_uring::RingEntry`], where all the unsafe code is),
//! so a slow request holds up only its own entry. FORGET and INTERRUPT
//! still come through `/dev/fuse`, as do the server's notifications, so
//! one thread keeps reading the device as [`super::session`] does.
//!
//! A ring entry holds a request as three pieces: the `fuse_in_header`,
//! the opcode's fixed argument (`op_in`) and the rest (the payload). They
//! are joined into one buffer for [`abi::Request::parse`], so both
//! transports parse and answer requests with the same code; a reply
//! ([`Reply`]) is split the other way, its `fuse_out_header` into the
//! header buffer and the rest into the payload.

use std::cell::RefCell;
use std::io;
use std::os::fd::AsFd;
use std::sync::Arc;

use ext4kit_uring::{ENT_IN_OUT, OP_IN, OP_IN_LEN, RingEntry};

use super::Channel;
use super::abi::{self, IN_HEADER_LEN, Request};
use super::reply::{OUT_HEADER_LEN, Reply};
use super::session::{self, MAX_IO, Serve};

/// Where the kernel says whether it allows FUSE over io_uring.
const ENABLE: &str = "/sys/module/fuse/parameters/enable_uring";

/// Why this machine cannot serve over io_uring, if it cannot: the module
/// parameter is off or absent (the kernel then never offers it at INIT).
pub(crate) fn unavailable() -> Option<String> {
    match std::fs::read_to_string(ENABLE) {
        Ok(v) if v.trim() == "Y" => None,
        Ok(_) => Some(format!("{ENABLE} is N (root can turn it on: echo Y > {ENABLE})")),
        Err(_) => Some(format!(
            "no {ENABLE} (a kernel before 6.14, or without CONFIG_FUSE_IO_URING)"
        )),
    }
}

/// The ring entries of a connection, made before INIT (when making them
/// fails, INIT does not ask for io_uring and nothing waits for rings).
pub(crate) struct Rings {
    entries: Vec<RingEntry>,
}

impl Rings {
    /// `per_queue` entries for each of the kernel's queues (one per
    /// possible CPU), for the connection `chan`.
    ///
    /// # Errors
    /// The possible CPUs cannot be read, or io_uring is unavailable
    /// (`io_uring_setup` refused, e.g. by `kernel.io_uring_disabled`).
    pub(crate) fn new(chan: &Channel, per_queue: usize) -> io::Result<Self> {
        let queues = possible_cpus()?;
        let payload = payload_len();
        let mut entries = Vec::new();
        for qid in 0..queues {
            let qid = u16::try_from(qid).map_err(|_| io::Error::other("more than 65536 CPUs"))?;
            for _ in 0..per_queue.max(1) {
                entries.push(RingEntry::new(chan.device().as_fd(), qid, payload)?);
            }
        }
        Ok(Self { entries })
    }

    /// Registers the entries and serves requests, each entry on a thread
    /// named `ext4kit-ring-Q.N`, plus one thread on `/dev/fuse`, until the
    /// connection ends; then calls [`Serve::destroy`].
    ///
    /// # Errors
    /// A thread cannot be started, or an entry fails otherwise than by
    /// the end of the connection.
    pub(crate) fn run(self, chan: &Arc<Channel>, server: Arc<dyn Serve>) -> io::Result<()> {
        let mut workers = Vec::new();
        let mut per_queue = std::collections::HashMap::<u16, usize>::new();
        for entry in self.entries {
            let n = per_queue.entry(entry.qid()).or_default();
            let name = format!("ext4kit-ring-{}.{n}", entry.qid());
            *n += 1;
            let server = server.clone();
            workers.push(
                std::thread::Builder::new()
                    .name(name)
                    .spawn(move || serve_entry(entry, &*server))?,
            );
        }
        let (chan2, server2) = (chan.clone(), server.clone());
        workers.push(
            std::thread::Builder::new()
                .name(session::thread_name(0))
                .spawn(move || session::serve_loop(&chan2, &*server2, false))?,
        );
        session::join(workers, &*server)
    }
}

/// The kernel's queue count: its possible CPUs
/// (`/sys/devices/system/cpu/possible`, e.g. `0-3` or `0,2-5`).
fn possible_cpus() -> io::Result<usize> {
    let list = std::fs::read_to_string("/sys/devices/system/cpu/possible")?;
    let bad = || io::Error::other(format!("unreadable CPU list {list:?}"));
    let mut highest = 0usize;
    for part in list.trim().split(',') {
        let last = part.rsplit('-').next().ok_or_else(bad)?;
        highest = highest.max(last.parse::<usize>().map_err(|_| bad())?);
    }
    Ok(highest + 1)
}

/// The payload buffer the kernel requires (`max_payload_sz`): the larger
/// of `max_write` and `max_pages` pages, as INIT answers them
/// ([`session::MAX_IO`] both), and at least `FUSE_MIN_READ_BUFFER`.
fn payload_len() -> usize {
    let pages = (MAX_IO as usize).div_ceil(4096);
    (MAX_IO as usize).max(pages * rustix::param::page_size()).max(8192)
}

/// Whether a failed command means the connection is over (unmounted,
/// aborted, or the server is exiting and the ring cancelled it).
fn ended(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::ENOTCONN | libc::ECONNABORTED | libc::ECANCELED | libc::ENODEV)
    )
}

/// Registers `entry` and serves the requests it brings until the
/// connection ends.
fn serve_entry(mut entry: RingEntry, server: &dyn Serve) -> io::Result<()> {
    let mut waiting = entry.register();
    loop {
        if let Err(e) = waiting.and_then(|()| entry.wait()) {
            return if ended(&e) { Ok(()) } else { Err(e) };
        }
        let commit_id = serve_one(&mut entry, server);
        waiting = entry.commit_and_fetch(commit_id);
    }
}

/// Serves the request now in `entry` and leaves its reply there; returns
/// the request's commit id. A request that does not parse, or that the
/// server leaves unanswered, is answered EIO: the entry must be committed
/// to come back.
///
/// The request is parsed where it lies: names and WRITE data borrow from
/// the payload buffer. Only the in header and the fixed argument (at
/// most 168 bytes) are copied out first, so that the reply's out header
/// can go straight into the header buffer; a request without payload
/// (READ, READDIR, GETATTR…) leaves the payload buffer to the reply, and
/// the few bytes answering one with a payload are held until the request
/// is done with the buffer.
fn serve_one(entry: &mut RingEntry, server: &dyn Serve) -> u64 {
    match entry.buffers() {
        Some((header, payload)) => serve_buffers(header, payload, server),
        None => 0,
    }
}

/// [`serve_one`] on the entry's header and payload buffers.
fn serve_buffers(header: &mut [u8], payload: &mut [u8], server: &dyn Serve) -> u64 {
    let commit_id = read_u64(header, ENT_IN_OUT + 8);
    let mut fixed = [0u8; IN_HEADER_LEN + OP_IN_LEN];
    let Ok((arg_len, payload_len)) = lengths(header, payload.len()) else {
        log::warn!("ext4kit: malformed FUSE request on io_uring ({commit_id})");
        answer_eio(&RingReply::new(header, payload), commit_id);
        return commit_id;
    };
    fixed[..IN_HEADER_LEN].copy_from_slice(&header[..IN_HEADER_LEN]);
    fixed[IN_HEADER_LEN..IN_HEADER_LEN + arg_len].copy_from_slice(&header[OP_IN..OP_IN + arg_len]);
    let (in_header, arg) = fixed[..IN_HEADER_LEN + arg_len].split_at(IN_HEADER_LEN);
    if payload_len == 0 {
        let out = RingReply::new(header, payload);
        serve_parsed(&out, Request::parse_parts(in_header, arg, &[]), server, commit_id);
        return commit_id;
    }
    let out = RingReply::holding(header, payload.len());
    let parsed = Request::parse_parts(in_header, arg, &payload[..payload_len]);
    serve_parsed(&out, parsed, server, commit_id);
    out.release_into(payload);
    commit_id
}

/// Serves `parsed` (or answers EIO when it did not parse), making sure
/// `out` holds a reply afterwards.
fn serve_parsed(out: &RingReply<'_>, parsed: Result<Request<'_>, abi::Malformed>, server: &dyn Serve, commit_id: u64) {
    match parsed {
        Ok(req) => server.serve(out, &req),
        Err(abi::Malformed) => log::warn!("ext4kit: malformed FUSE request on io_uring ({commit_id})"),
    }
    answer_eio(out, commit_id);
}

/// Answers EIO unless `out` already holds a reply.
fn answer_eio(out: &RingReply<'_>, commit_id: u64) {
    if !out.slot.borrow().sent {
        let _ = super::Sink::send(out, &Reply::error(commit_id, libc::EIO));
    }
}

/// Where the request in a ring entry lies: the length of its fixed
/// argument (in `op_in`: what the header's `len` leaves after the in
/// header and the payload) and of its payload (`payload_sz`), checked
/// against the buffers (`payload_cap` bytes of payload).
fn lengths(header: &[u8], payload_cap: usize) -> Result<(usize, usize), abi::Malformed> {
    let len = read_u32(header, 0) as usize;
    let payload_len = read_u32(header, ENT_IN_OUT + 16) as usize;
    if payload_len > payload_cap {
        return Err(abi::Malformed);
    }
    let arg_len = len
        .checked_sub(IN_HEADER_LEN + payload_len)
        .filter(|&n| n <= OP_IN_LEN)
        .ok_or(abi::Malformed)?;
    Ok((arg_len, payload_len))
}

fn read_u32(b: &[u8], at: usize) -> u32 {
    let mut r = abi::Reader::new(&b[at..]);
    r.u32().unwrap_or(0)
}

fn read_u64(b: &[u8], at: usize) -> u64 {
    let mut r = abi::Reader::new(&b[at..]);
    r.u64().unwrap_or(0)
}

/// The reply side of one ring entry: the first reply sent goes into its
/// buffers (out header into the header buffer, the rest into the
/// payload, its length into `fuse_uring_ent_in_out.payload_sz`). While
/// the request still borrows the payload buffer, the rest is held here
/// and moved in by [`Self::release_into`].
struct RingReply<'a> {
    slot: RefCell<Slot<'a>>,
}

struct Slot<'a> {
    header: &'a mut [u8],
    /// The payload buffer, when the request does not borrow it.
    payload: Option<&'a mut [u8]>,
    /// Bytes the payload buffer holds.
    capacity: usize,
    /// What follows the out header, while `payload` is `None`.
    held: Vec<u8>,
    sent: bool,
}

impl<'a> RingReply<'a> {
    /// The reply into `header` and `payload`.
    fn new(header: &'a mut [u8], payload: &'a mut [u8]) -> Self {
        let capacity = payload.len();
        Self::with(header, Some(payload), capacity)
    }

    /// The reply into `header`, its rest held until
    /// [`Self::release_into`] the payload buffer of `capacity` bytes,
    /// which the request borrows until then.
    fn holding(header: &'a mut [u8], capacity: usize) -> Self {
        Self::with(header, None, capacity)
    }

    fn with(header: &'a mut [u8], payload: Option<&'a mut [u8]>, capacity: usize) -> Self {
        Self {
            slot: RefCell::new(Slot {
                header,
                payload,
                capacity,
                held: Vec::new(),
                sent: false,
            }),
        }
    }

    /// Moves the held part of the reply into `payload`, the buffer the
    /// request no longer borrows.
    fn release_into(self, payload: &mut [u8]) {
        let held = self.slot.into_inner().held;
        payload[..held.len()].copy_from_slice(&held);
    }
}

impl super::Sink for RingReply<'_> {
    fn send(&self, r: &Reply<'_>) -> io::Result<()> {
        let mut slot = self.slot.borrow_mut();
        if slot.sent {
            return Err(io::Error::other("a second reply to one request"));
        }
        let [head, tail] = r.parts();
        let (out_header, fixed) = head.split_at(OUT_HEADER_LEN);
        let n = fixed.len() + tail.len();
        if n > slot.capacity {
            // Never sent: the kernel would refuse it. EIO instead.
            let unique = read_u64(out_header, 8);
            drop(slot);
            self.send(&Reply::error(unique, libc::EIO))?;
            return Err(io::Error::other(format!(
                "a reply of {n} bytes does not fit the ring entry"
            )));
        }
        let slot = &mut *slot;
        slot.sent = true;
        slot.header[..OUT_HEADER_LEN].copy_from_slice(out_header);
        slot.header[ENT_IN_OUT + 16..ENT_IN_OUT + 20].copy_from_slice(&(n as u32).to_le_bytes());
        match slot.payload.as_deref_mut() {
            Some(payload) => {
                payload[..fixed.len()].copy_from_slice(fixed);
                payload[fixed.len()..n].copy_from_slice(tail);
            }
            None => {
                slot.held.extend_from_slice(fixed);
                slot.held.extend_from_slice(tail);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::Sink;
    use crate::transport::abi::opcode;
    use crate::transport::abi::tests::request;

    /// A ring entry's header buffer holding `req` (as the kernel fills
    /// it: `arg_len` bytes of fixed argument in `op_in`), and its payload.
    fn as_ring(req: &[u8], arg_len: usize) -> (Vec<u8>, Vec<u8>) {
        let mut header = vec![0u8; ext4kit_uring::HEADER_LEN];
        header[..IN_HEADER_LEN].copy_from_slice(&req[..IN_HEADER_LEN]);
        let arg = &req[IN_HEADER_LEN..IN_HEADER_LEN + arg_len];
        header[OP_IN..OP_IN + arg_len].copy_from_slice(arg);
        let rest = &req[IN_HEADER_LEN + arg_len..];
        header[ENT_IN_OUT + 8..ENT_IN_OUT + 16].copy_from_slice(&77u64.to_le_bytes());
        header[ENT_IN_OUT + 16..ENT_IN_OUT + 20].copy_from_slice(&(rest.len() as u32).to_le_bytes());
        let mut payload = vec![0xeeu8; 4096];
        payload[..rest.len()].copy_from_slice(rest);
        (header, payload)
    }

    /// The request in a ring entry, parsed in place as [`serve_one`] does.
    fn parse_ring<'a>(header: &'a [u8], payload: &'a [u8]) -> Result<Request<'a>, abi::Malformed> {
        let (arg_len, payload_len) = lengths(header, payload.len())?;
        Request::parse_parts(
            &header[..IN_HEADER_LEN],
            &header[OP_IN..OP_IN + arg_len],
            &payload[..payload_len],
        )
    }

    #[test]
    fn pieces_parse_as_the_request_dev_would_read() {
        let mut body = 0o644u32.to_le_bytes().to_vec();
        body.extend_from_slice(&0o22u32.to_le_bytes());
        body.extend_from_slice(b"dir\0");
        let req = request(opcode::MKDIR, 5, 1, &body);
        let (header, payload) = as_ring(&req, 8);
        assert_eq!(parse_ring(&header, &payload), Request::parse(&req));
        assert_eq!(
            parse_ring(&header, &payload).unwrap().op,
            abi::Op::Mkdir {
                mode: 0o644,
                umask: 0o22,
                name: b"dir"
            }
        );
    }

    #[test]
    fn write_data_is_borrowed_from_the_payload_buffer() {
        let mut body = [3u64, 4096].map(u64::to_le_bytes).concat();
        body.extend_from_slice(&5u32.to_le_bytes());
        body.extend_from_slice(&[0; 20]);
        body.extend_from_slice(b"hello");
        let req = request(opcode::WRITE, 5, 1, &body);
        let (header, payload) = as_ring(&req, 40);
        let parsed = parse_ring(&header, &payload).unwrap();
        let abi::Op::Write { data, .. } = parsed.op else {
            panic!("{parsed:?}")
        };
        assert_eq!(data, b"hello");
        assert_eq!(data.as_ptr(), payload.as_ptr(), "not copied");
    }

    #[test]
    fn lengths_that_do_not_add_up_are_malformed() {
        let req = request(opcode::LOOKUP, 5, 1, b"name\0");
        let (mut header, payload) = as_ring(&req, 0);
        for len in [0u32, 39, 40 + 5 + 129, u32::MAX] {
            header[..4].copy_from_slice(&len.to_le_bytes());
            assert_eq!(lengths(&header, payload.len()), Err(abi::Malformed));
        }
        header[..4].copy_from_slice(&(req.len() as u32).to_le_bytes());
        assert_eq!(lengths(&header, payload.len()), Ok((0, 5)));
        header[ENT_IN_OUT + 16..ENT_IN_OUT + 20].copy_from_slice(&5000u32.to_le_bytes());
        assert_eq!(lengths(&header, payload.len()), Err(abi::Malformed));
    }

    #[test]
    fn a_reply_splits_into_header_and_payload() {
        let (mut header, mut payload) = (vec![0u8; ext4kit_uring::HEADER_LEN], vec![0u8; 64]);
        let out = RingReply::new(&mut header, &mut payload);
        out.send(&Reply::written(9, 4096)).unwrap();
        assert!(out.send(&Reply::empty(9)).is_err(), "one reply per request");
        drop(out);
        assert_eq!(read_u32(&header, 0), 24);
        assert_eq!(read_u64(&header, 8), 9);
        assert_eq!(read_u32(&header, ENT_IN_OUT + 16), 8);
        assert_eq!(&payload[..8], &[0, 16, 0, 0, 0, 0, 0, 0]);
    }

    #[test]
    fn a_reply_held_while_the_request_borrows_the_payload_lands_there_after() {
        let (mut header, mut payload) = (vec![0u8; ext4kit_uring::HEADER_LEN], vec![0xeeu8; 64]);
        let out = RingReply::holding(&mut header, payload.len());
        assert!(out.send(&Reply::data(9, &[1; 65])).is_err(), "larger than the buffer");
        let out = RingReply::holding(&mut header, payload.len());
        out.send(&Reply::written(9, 4096)).unwrap();
        out.release_into(&mut payload);
        assert_eq!(read_u32(&header, 0), 24);
        assert_eq!(read_u32(&header, ENT_IN_OUT + 16), 8);
        assert_eq!(&payload[..9], &[0, 16, 0, 0, 0, 0, 0, 0, 0xee]);
    }

    #[test]
    fn a_reply_too_large_for_the_entry_becomes_eio() {
        let (mut header, mut payload) = (vec![0u8; ext4kit_uring::HEADER_LEN], vec![0u8; 4]);
        let out = RingReply::new(&mut header, &mut payload);
        assert!(out.send(&Reply::data(3, b"too long")).is_err());
        drop(out);
        assert_eq!(read_u32(&header, 4) as i32, -libc::EIO);
        assert_eq!(read_u64(&header, 8), 3);
        assert_eq!(read_u32(&header, ENT_IN_OUT + 16), 0);
    }

    /// Answers every request with `written(unique, 4096)` after looking
    /// at its name or data, as the adapter does.
    struct Answer;

    impl Serve for Answer {
        fn serve(&self, out: &dyn Sink, req: &Request<'_>) {
            if let abi::Op::Mkdir { name, .. } = req.op {
                assert_eq!(name, b"dir");
            }
            out.send(&Reply::written(req.unique(), 4096)).unwrap();
        }
        fn destroy(&self) {}
    }

    #[test]
    fn a_request_with_a_payload_gets_its_reply_in_the_payload_buffer() {
        let mut body = 0o644u32.to_le_bytes().to_vec();
        body.extend_from_slice(&0o22u32.to_le_bytes());
        body.extend_from_slice(b"dir\0");
        let req = request(opcode::MKDIR, 5, 1, &body);
        let (mut header, mut payload) = as_ring(&req, 8);
        assert_eq!(serve_buffers(&mut header, &mut payload, &Answer), 77);
        assert_eq!(read_u32(&header, 0), 24);
        assert_eq!(read_u32(&header, 4), 0, "no error");
        assert_eq!(read_u64(&header, 8), 5);
        assert_eq!(read_u32(&header, ENT_IN_OUT + 16), 8);
        assert_eq!(&payload[..8], &[0, 16, 0, 0, 0, 0, 0, 0]);
        let req = request(opcode::GETATTR, 6, 1, &[0; 16]);
        let (mut header, mut payload) = as_ring(&req, 16);
        serve_buffers(&mut header, &mut payload, &Answer);
        assert_eq!((read_u32(&header, 4), read_u64(&header, 8)), (0, 6));
        assert_eq!(&payload[..8], &[0, 16, 0, 0, 0, 0, 0, 0]);
    }

    #[test]
    fn cpu_lists_count_the_highest_cpu() {
        assert!(possible_cpus().unwrap() >= 1);
        assert!(payload_len() >= MAX_IO as usize);
    }
}
