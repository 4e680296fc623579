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

    /// How many serving threads [`Self::run`] starts for `threads=` on
    /// this machine: `threads` spread over the queues, at least one each.
    pub(crate) fn per_queue(threads: usize) -> usize {
        threads.div_ceil(possible_cpus().unwrap_or(1).max(1)).max(1)
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
    let mut request = Vec::with_capacity(session::BUF_LEN);
    let mut waiting = entry.register();
    loop {
        if let Err(e) = waiting.and_then(|()| entry.wait()) {
            return if ended(&e) { Ok(()) } else { Err(e) };
        }
        let commit_id = serve_one(&mut entry, &mut request, server);
        waiting = entry.commit_and_fetch(commit_id);
    }
}

/// Serves the request now in `entry` and leaves its reply there; returns
/// the request's commit id. A request that does not parse, or that the
/// server leaves unanswered, is answered EIO: the entry must be committed
/// to come back.
fn serve_one(entry: &mut RingEntry, request: &mut Vec<u8>, server: &dyn Serve) -> u64 {
    let Some((header, payload)) = entry.buffers() else {
        return 0;
    };
    let commit_id = read_u64(header, ENT_IN_OUT + 8);
    let joined = join_request(header, payload, request);
    let out = RingReply {
        bufs: RefCell::new(Some((header, payload))),
    };
    match joined.and_then(|()| Request::parse(request)) {
        Ok(req) => server.serve(&out, &req),
        Err(abi::Malformed) => log::warn!("ext4kit: malformed FUSE request on io_uring ({commit_id})"),
    }
    if out.bufs.borrow().is_some() {
        let _ = super::Sink::send(&out, &Reply::error(commit_id, libc::EIO));
    }
    commit_id
}

/// Joins the pieces of the request in `header` and `payload` into
/// `out`, as `/dev/fuse` would have delivered it: the in header, the
/// fixed argument (whose length is what `len` leaves after the header
/// and the payload), the payload.
fn join_request(header: &[u8], payload: &[u8], out: &mut Vec<u8>) -> Result<(), abi::Malformed> {
    let len = read_u32(header, 0) as usize;
    let payload_len = read_u32(header, ENT_IN_OUT + 16) as usize;
    let arg_len = len
        .checked_sub(IN_HEADER_LEN + payload_len)
        .filter(|&n| n <= OP_IN_LEN)
        .ok_or(abi::Malformed)?;
    let payload = payload.get(..payload_len).ok_or(abi::Malformed)?;
    out.clear();
    out.extend_from_slice(&header[..IN_HEADER_LEN]);
    out.extend_from_slice(&header[OP_IN..OP_IN + arg_len]);
    out.extend_from_slice(payload);
    Ok(())
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
/// payload, its length into `fuse_uring_ent_in_out.payload_sz`).
struct RingReply<'a> {
    bufs: RefCell<Option<(&'a mut [u8], &'a mut [u8])>>,
}

impl super::Sink for RingReply<'_> {
    fn send(&self, r: &Reply<'_>) -> io::Result<()> {
        let mut slot = self.bufs.borrow_mut();
        let Some((header, payload)) = slot.take() else {
            return Err(io::Error::other("a second reply to one request"));
        };
        let [head, tail] = r.parts();
        let (out_header, fixed) = head.split_at(OUT_HEADER_LEN);
        let n = fixed.len() + tail.len();
        if n > payload.len() {
            // Never sent: the kernel would refuse it. EIO instead.
            let unique = read_u64(out_header, 8);
            *slot = Some((header, payload));
            drop(slot);
            self.send(&Reply::error(unique, libc::EIO))?;
            return Err(io::Error::other(format!(
                "a reply of {n} bytes does not fit the ring entry"
            )));
        }
        header[..OUT_HEADER_LEN].copy_from_slice(out_header);
        payload[..fixed.len()].copy_from_slice(fixed);
        payload[fixed.len()..n].copy_from_slice(tail);
        header[ENT_IN_OUT + 16..ENT_IN_OUT + 20].copy_from_slice(&(n as u32).to_le_bytes());
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

    #[test]
    fn pieces_join_into_the_request_dev_would_read() {
        let mut body = 0o644u32.to_le_bytes().to_vec();
        body.extend_from_slice(&0o22u32.to_le_bytes());
        body.extend_from_slice(b"dir\0");
        let req = request(opcode::MKDIR, 5, 1, &body);
        let (header, payload) = as_ring(&req, 8);
        let mut joined = Vec::new();
        join_request(&header, &payload, &mut joined).unwrap();
        assert_eq!(joined, req);
        assert_eq!(
            Request::parse(&joined).unwrap().op,
            abi::Op::Mkdir {
                mode: 0o644,
                umask: 0o22,
                name: b"dir"
            }
        );
    }

    #[test]
    fn lengths_that_do_not_add_up_are_malformed() {
        let req = request(opcode::LOOKUP, 5, 1, b"name\0");
        let (mut header, payload) = as_ring(&req, 0);
        let mut out = Vec::new();
        for len in [0u32, 39, 40 + 5 + 129, u32::MAX] {
            header[..4].copy_from_slice(&len.to_le_bytes());
            assert_eq!(join_request(&header, &payload, &mut out), Err(abi::Malformed));
        }
        header[..4].copy_from_slice(&(req.len() as u32).to_le_bytes());
        header[ENT_IN_OUT + 16..ENT_IN_OUT + 20].copy_from_slice(&5000u32.to_le_bytes());
        assert_eq!(join_request(&header, &payload, &mut out), Err(abi::Malformed));
    }

    #[test]
    fn a_reply_splits_into_header_and_payload() {
        let (mut header, mut payload) = (vec![0u8; ext4kit_uring::HEADER_LEN], vec![0u8; 64]);
        let out = RingReply {
            bufs: RefCell::new(Some((&mut header, &mut payload))),
        };
        out.send(&Reply::written(9, 4096)).unwrap();
        assert!(out.send(&Reply::empty(9)).is_err(), "one reply per request");
        assert_eq!(read_u32(&header, 0), 24);
        assert_eq!(read_u64(&header, 8), 9);
        assert_eq!(read_u32(&header, ENT_IN_OUT + 16), 8);
        assert_eq!(&payload[..8], &[0, 16, 0, 0, 0, 0, 0, 0]);
    }

    #[test]
    fn a_reply_too_large_for_the_entry_becomes_eio() {
        let (mut header, mut payload) = (vec![0u8; ext4kit_uring::HEADER_LEN], vec![0u8; 4]);
        let out = RingReply {
            bufs: RefCell::new(Some((&mut header, &mut payload))),
        };
        assert!(out.send(&Reply::data(3, b"too long")).is_err());
        assert_eq!(read_u32(&header, 4) as i32, -libc::EIO);
        assert_eq!(read_u64(&header, 8), 3);
        assert_eq!(read_u32(&header, ENT_IN_OUT + 16), 0);
    }

    #[test]
    fn cpu_lists_count_the_highest_cpu() {
        assert!(possible_cpus().unwrap() >= 1);
        assert!(payload_len() >= MAX_IO as usize);
        assert_eq!(Rings::per_queue(0), 1);
    }
}
