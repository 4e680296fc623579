//! Mounting without the right to call `mount(2)`: the set-user-ID helper
//! `fusermount3` opens `/dev/fuse`, mounts it (checking the user may, and
//! `user_allow_other` in `/etc/fuse.conf` for `allow_other`), and passes
//! the open descriptor back as `SCM_RIGHTS` over the socket named by the
//! `_FUSE_COMMFD` environment variable, as libfuse's `fuse_mount` does.

use std::fs::File;
use std::io;
use std::mem::MaybeUninit;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::process::{Command, Stdio};

use rustix::net::{
    AddressFamily, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SocketFlags, SocketType, recvmsg, socketpair,
};

/// The helper, found on `PATH`.
const HELPER: &str = "fusermount3";

/// Mounts at `mountpoint` with the comma-separated `options` (fusermount3
/// spells them as `mount -o` does) and returns the connection's device.
///
/// # Errors
/// The helper is missing or refuses (its message is in the error), or
/// sends no descriptor.
pub(crate) fn mount(mountpoint: &Path, options: &str) -> io::Result<File> {
    let (ours, theirs) = socketpair(AddressFamily::UNIX, SocketType::STREAM, SocketFlags::CLOEXEC, None)?;
    // Only the helper's end is inherited: this process keeps no copy of
    // it once the helper exits, so a helper that sends nothing gives EOF.
    rustix::io::fcntl_setfd(&theirs, rustix::io::FdFlags::empty())?;
    let out = Command::new(HELPER)
        .arg("-o")
        .arg(options)
        .arg("--")
        .arg(mountpoint)
        .env("_FUSE_COMMFD", theirs.as_raw_fd().to_string())
        .stdin(Stdio::null())
        .output();
    drop(theirs);
    let out = out.map_err(|e| io::Error::new(e.kind(), format!("running {HELPER}: {e}")))?;
    if !out.status.success() {
        let msg = String::from_utf8_lossy(&out.stderr);
        return Err(io::Error::other(format!("{HELPER}: {}", msg.trim())));
    }
    receive_fd(&ours)
}

/// The descriptor the helper sent.
fn receive_fd(sock: &impl std::os::fd::AsFd) -> io::Result<File> {
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let mut byte = [0u8; 1];
    let mut iov = [io::IoSliceMut::new(&mut byte)];
    recvmsg(sock, &mut iov, &mut control, RecvFlags::CMSG_CLOEXEC)?;
    for msg in control.drain() {
        if let RecvAncillaryMessage::ScmRights(mut fds) = msg
            && let Some(fd) = fds.next()
        {
            return Ok(File::from(fd));
        }
    }
    Err(io::Error::other(format!(
        "{HELPER} mounted but sent no /dev/fuse descriptor"
    )))
}

/// Unmounts through the helper (`fusermount3 -u`).
///
/// # Errors
/// The helper is missing or refuses.
pub(crate) fn unmount(mountpoint: &Path) -> io::Result<()> {
    let out = Command::new(HELPER).arg("-u").arg("--").arg(mountpoint).output()?;
    if out.status.success() {
        return Ok(());
    }
    Err(io::Error::other(format!(
        "{HELPER} -u: {}",
        String::from_utf8_lossy(&out.stderr).trim()
    )))
}

/// `value` as one `-o` option value: commas and backslashes escaped with
/// a backslash, which fusermount3 undoes.
pub(crate) fn escape(value: &str) -> String {
    let mut s = String::with_capacity(value.len());
    for c in value.chars() {
        if c == ',' || c == '\\' {
            s.push('\\');
        }
        s.push(c);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::escape;

    #[test]
    fn option_values_escape_commas() {
        assert_eq!(escape(r"/img,1\x"), r"/img\,1\\x");
    }
}
