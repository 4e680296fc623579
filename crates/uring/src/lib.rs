//! FUSE over io_uring, the part that needs `unsafe`: one ring entry of one
//! FUSE queue (`Documentation/filesystems/fuse-io-uring.rst`), on an
//! io_uring of its own. An entry is two buffers the kernel is given once,
//! at `FUSE_IO_URING_CMD_REGISTER`: a `struct fuse_uring_req_header`
//! (request or reply header, the opcode's fixed argument, and
//! `struct fuse_uring_ent_in_out`) and a payload buffer for the rest. The
//! kernel writes a request into them and completes the command; the
//! server writes its reply into the same buffers and sends
//! `FUSE_IO_URING_CMD_COMMIT_AND_FETCH`, which hands the reply over and
//! waits for the next request in one submission.
//!
//! The safe API keeps the rule that makes this sound: the buffers are
//! reachable from Rust only while no command is outstanding (the kernel
//! touches them only between a submission and its completion), and they
//! are never freed while the kernel may still use them — an entry dropped
//! with a command outstanding leaks its buffers rather than free them.
//! Everything about the FUSE messages inside the buffers (parsing,
//! encoding) is the caller's, in safe code.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};
use std::ptr::NonNull;

use io_uring::{IoUring, cqueue, opcode, squeue::Entry128, types};

/// `sizeof(struct fuse_uring_req_header)`: 128 bytes for the in/out
/// header, 128 for the opcode's fixed argument, 32 for
/// `struct fuse_uring_ent_in_out`.
pub const HEADER_LEN: usize = 288;
/// Offset of `op_in` in the header buffer.
pub const OP_IN: usize = 128;
/// Offset of `struct fuse_uring_ent_in_out` in the header buffer.
pub const ENT_IN_OUT: usize = 256;
/// Largest fixed argument (`FUSE_URING_OP_IN_OUT_SZ`).
pub const OP_IN_LEN: usize = 128;

/// `enum fuse_uring_cmd` (in `sqe->cmd_op`).
const CMD_REGISTER: u32 = 1;
const CMD_COMMIT_AND_FETCH: u32 = 2;

/// One entry of queue `qid`: its ring, its buffers, and whether the
/// kernel holds them (a command was submitted and has not completed).
pub struct RingEntry {
    ring: IoUring<Entry128, cqueue::Entry>,
    dev: OwnedFd,
    qid: u16,
    bufs: NonNull<Buffers>,
    outstanding: bool,
}

/// The memory the kernel is pointed at: the iovec pair REGISTER names and
/// the two buffers it describes. Boxed so that the addresses stay put.
struct Buffers {
    header: Box<[u8]>,
    payload: Box<[u8]>,
    iov: [libc::iovec; 2],
}

// SAFETY: the raw pointers in `Buffers` (the iovecs) point into the
// entry's own boxes; the entry is used by one thread at a time (`&mut`),
// and nothing is tied to the thread that made it.
#[allow(unsafe_code)]
unsafe impl Send for RingEntry {}

impl RingEntry {
    /// A new entry of queue `qid` of the FUSE connection `dev` (a
    /// `/dev/fuse` descriptor, duplicated here), with a payload buffer of
    /// `payload_len` bytes (at least the kernel's `max_payload_sz`: the
    /// larger of `max_write` and `max_pages` pages).
    ///
    /// # Errors
    /// io_uring is not available (`io_uring_setup` refused), or the
    /// descriptor cannot be duplicated.
    pub fn new(dev: BorrowedFd<'_>, qid: u16, payload_len: usize) -> io::Result<Self> {
        let ring = IoUring::<Entry128, cqueue::Entry>::builder().build(2)?;
        let mut bufs = Box::new(Buffers {
            header: vec![0u8; HEADER_LEN].into_boxed_slice(),
            payload: vec![0u8; payload_len].into_boxed_slice(),
            iov: [libc::iovec {
                iov_base: std::ptr::null_mut(),
                iov_len: 0,
            }; 2],
        });
        bufs.iov = [
            libc::iovec {
                iov_base: bufs.header.as_mut_ptr().cast(),
                iov_len: bufs.header.len(),
            },
            libc::iovec {
                iov_base: bufs.payload.as_mut_ptr().cast(),
                iov_len: bufs.payload.len(),
            },
        ];
        Ok(Self {
            ring,
            dev: dev.try_clone_to_owned()?,
            qid,
            bufs: NonNull::from(Box::leak(bufs)),
            outstanding: false,
        })
    }

    /// Submits `FUSE_IO_URING_CMD_REGISTER`: gives the kernel the buffers
    /// and asks for a first request. Completes (see [`Self::wait`]) when
    /// one is there.
    ///
    /// # Errors
    /// A command is already outstanding, or the submission fails.
    pub fn register(&mut self) -> io::Result<()> {
        let iov = self.buffers_ref().iov.as_ptr() as u64;
        let sqe = self.command(CMD_REGISTER, 0).addr(Some(iov)).build();
        self.submit(with_len(sqe, 2))
    }

    /// Submits `FUSE_IO_URING_CMD_COMMIT_AND_FETCH`: the reply now in the
    /// buffers answers the request `commit_id` (its `unique`), and the
    /// entry waits for the next request.
    ///
    /// # Errors
    /// A command is already outstanding, or the submission fails.
    pub fn commit_and_fetch(&mut self, commit_id: u64) -> io::Result<()> {
        let sqe = self.command(CMD_COMMIT_AND_FETCH, commit_id).build();
        self.submit(sqe)
    }

    /// Waits until the outstanding command completes: `Ok` when a request
    /// is in the buffers, the kernel's error otherwise (ENOTCONN once the
    /// connection is gone or the command was cancelled, EAGAIN for a
    /// REGISTER before INIT was answered, EOPNOTSUPP where the kernel does
    /// not allow FUSE over io_uring).
    ///
    /// # Errors
    /// Nothing outstanding, waiting fails, or the command failed.
    pub fn wait(&mut self) -> io::Result<()> {
        if !self.outstanding {
            return Err(io::Error::other("no command outstanding on the ring entry"));
        }
        loop {
            match self.ring.submit_and_wait(1) {
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
            if let Some(cqe) = self.ring.completion().next() {
                self.outstanding = false;
                let res = cqe.result();
                return if res < 0 {
                    Err(io::Error::from_raw_os_error(-res))
                } else {
                    Ok(())
                };
            }
        }
    }

    /// The header buffer (`struct fuse_uring_req_header`) and the payload
    /// buffer, while the kernel does not hold them; `None` while a
    /// command is outstanding.
    pub fn buffers(&mut self) -> Option<(&mut [u8], &mut [u8])> {
        if self.outstanding {
            return None;
        }
        // SAFETY: no command is outstanding, so the kernel neither reads
        // nor writes the buffers until the next submission, which needs
        // `&mut self` and so ends these borrows first; `bufs` came from a
        // leaked box and is freed only by `Drop`.
        #[allow(unsafe_code)]
        let bufs = unsafe { self.bufs.as_mut() };
        Some((&mut bufs.header, &mut bufs.payload))
    }

    /// The FUSE queue this entry belongs to.
    pub fn qid(&self) -> u16 {
        self.qid
    }

    /// Length of the payload buffer.
    pub fn payload_len(&self) -> usize {
        self.buffers_ref().iov[1].iov_len
    }

    /// Reads only fields the kernel never writes (the iovecs), and only
    /// the pointer values of the buffers, not their bytes.
    fn buffers_ref(&self) -> &Buffers {
        // SAFETY: `bufs` is a leaked box, alive until `Drop`; the kernel
        // reads the iovec pair but never writes it, so a shared borrow of
        // the struct is sound whether a command is outstanding or not.
        // The buffer bytes are not read through it while outstanding.
        #[allow(unsafe_code)]
        unsafe {
            self.bufs.as_ref()
        }
    }

    fn command(&self, cmd_op: u32, commit_id: u64) -> opcode::UringCmd80 {
        // struct fuse_uring_cmd_req: flags, commit_id, qid, padding.
        let mut cmd = [0u8; 80];
        cmd[8..16].copy_from_slice(&native_u64(commit_id));
        cmd[16..18].copy_from_slice(&native_u16(self.qid));
        opcode::UringCmd80::new(types::Fd(self.dev.as_raw_fd()), cmd_op).cmd(cmd)
    }

    fn submit(&mut self, sqe: Entry128) -> io::Result<()> {
        if self.outstanding {
            return Err(io::Error::other("a command is already outstanding on the ring entry"));
        }
        // SAFETY: the SQE names the iovec pair and, through it, the two
        // buffers; all three live in `bufs`, which is freed only by
        // `Drop`, and then only if no command is outstanding (otherwise
        // leaked). The buffers are not reachable from Rust until the
        // completion (see `buffers`).
        #[allow(unsafe_code)]
        let pushed = unsafe { self.ring.submission().push(&sqe) };
        pushed.map_err(|_| io::Error::other("io_uring submission queue full"))?;
        self.ring.submit()?;
        self.outstanding = true;
        Ok(())
    }
}

impl Drop for RingEntry {
    fn drop(&mut self) {
        if self.outstanding {
            // The kernel may still hold the buffers (it cancels the
            // command when the ring closes, on its own time): they stay.
            return;
        }
        // SAFETY: no command is outstanding, so the kernel holds no
        // reference to the buffers; `bufs` came from `Box::leak` in `new`
        // and is freed exactly once, here.
        #[allow(unsafe_code)]
        drop(unsafe { Box::from_raw(self.bufs.as_ptr()) });
    }
}

/// Sets `sqe->len`, which `UringCmd80` leaves 0 and REGISTER needs as the
/// number of iovecs (2). `len` is the u32 at offset 24 of
/// `struct io_uring_sqe`.
fn with_len(sqe: Entry128, len: u32) -> Entry128 {
    let mut raw = sqe_bytes(sqe);
    raw[24..28].copy_from_slice(&native_u32(len));
    sqe_from_bytes(raw)
}

fn sqe_bytes(sqe: Entry128) -> [u8; 128] {
    // SAFETY: `Entry128` is `repr(C)`: a 64-byte `struct io_uring_sqe`
    // (integers and unions of integers, zero-initialised by the builder)
    // then 64 bytes of command data, 128 bytes without padding, so every
    // byte is initialised.
    #[allow(unsafe_code)]
    unsafe {
        std::mem::transmute::<Entry128, [u8; 128]>(sqe)
    }
}

fn sqe_from_bytes(raw: [u8; 128]) -> Entry128 {
    // SAFETY: same size and layout as above; every bit pattern is a valid
    // `Entry128` (it holds only integers).
    #[allow(unsafe_code)]
    unsafe {
        std::mem::transmute::<[u8; 128], Entry128>(raw)
    }
}

/// The kernel reads SQE fields and `fuse_uring_cmd_req` in its own byte
/// order.
#[allow(clippy::host_endian_bytes)]
fn native_u16(v: u16) -> [u8; 2] {
    v.to_ne_bytes()
}

#[allow(clippy::host_endian_bytes)]
fn native_u32(v: u32) -> [u8; 4] {
    v.to_ne_bytes()
}

#[allow(clippy::host_endian_bytes)]
fn native_u64(v: u64) -> [u8; 8] {
    v.to_ne_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn len_lands_in_the_sqe_and_nothing_else_moves() {
        let sqe = || {
            opcode::UringCmd80::new(types::Fd(3), CMD_REGISTER)
                .cmd([7u8; 80])
                .addr(Some(0x1234))
                .build()
                .user_data(99)
        };
        let before = sqe_bytes(sqe());
        let after = sqe_bytes(with_len(sqe(), 2));
        assert_eq!(before[0], 46, "IORING_OP_URING_CMD");
        assert_eq!(&after[24..28], &native_u32(2));
        assert_eq!(before[..24], after[..24]);
        assert_eq!(before[28..], after[28..]);
        assert_eq!(&after[32..40], &native_u64(99));
        assert_eq!(&after[48..128], &[7u8; 80]);
    }

    #[test]
    fn buffers_are_ours_only_while_nothing_is_outstanding() {
        let Ok(dev) = std::fs::File::open("/dev/zero") else {
            return;
        };
        let Ok(mut e) = RingEntry::new(std::os::fd::AsFd::as_fd(&dev), 0, 4096) else {
            eprintln!("io_uring not available here; nothing to check");
            return;
        };
        assert_eq!(e.payload_len(), 4096);
        let (h, p) = e.buffers().unwrap();
        assert_eq!((h.len(), p.len()), (HEADER_LEN, 4096));
        assert!(e.wait().is_err());
        // /dev/zero has no uring_cmd: the command completes with an error
        // and the buffers come back.
        e.register().unwrap();
        assert!(e.buffers().is_none());
        assert!(e.register().is_err());
        let r = e.wait();
        assert!(r.is_err(), "{r:?}");
        assert!(e.buffers().is_some());
    }
}
