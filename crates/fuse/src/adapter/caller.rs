//! Who sent a request, as far as the set-group-ID bit cares. The kernel
//! decides `in_group_or_capable` itself and tells the server with
//! `FUSE_SETXATTR_ACL_KILL_SGID`, but only to servers that negotiated
//! `FUSE_SETXATTR_EXT`, which fuser 0.18 cannot parse (its
//! `fuse_setxattr_in` lacks `setxattr_flags`). So the server decides from
//! the request's uid, gid and pid, and the caller's supplementary groups
//! in `/proc/PID/status`.

use crate::options::IdMap;

use super::Ext4Fuse;

/// Who sent a request (`fuse_in_header`'s uid, gid and pid), whichever
/// transport carried it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Caller {
    pub(crate) uid: u32,
    pub(crate) gid: u32,
    pub(crate) pid: u32,
}

impl Caller {
    pub(crate) fn uid(&self) -> u32 {
        self.uid
    }

    pub(crate) fn gid(&self) -> u32 {
        self.gid
    }

    pub(crate) fn pid(&self) -> u32 {
        self.pid
    }
}

impl From<&fuser::Request> for Caller {
    fn from(r: &fuser::Request) -> Self {
        Self {
            uid: r.uid(),
            gid: r.gid(),
            pid: r.pid(),
        }
    }
}

/// Longest `/proc/PID/status` read (a few KiB in practice).
const STATUS_MAX: u64 = 64 << 10;

impl Ext4Fuse {
    /// Whether the caller of `req` keeps `S_ISGID` on a file of (image)
    /// group `gid`: it is in that group, or privileged. Privilege is
    /// approximated as uid 0; the caller's `CAP_FSETID` is not read.
    pub(super) fn keeps_sgid(&self, req: &Caller, gid: u32) -> bool {
        if req.uid() == 0 {
            return true;
        }
        let host = IdMap::to_host(self.cfg.gid_map, gid);
        req.gid() == host || supplementary_groups(req.pid()).contains(&host)
    }
}

/// The `Groups:` line of `/proc/PID/status`; empty when the caller is gone
/// or the line cannot be read.
fn supplementary_groups(pid: u32) -> Vec<u32> {
    use std::io::Read;
    let mut text = String::new();
    let read =
        std::fs::File::open(format!("/proc/{pid}/status")).and_then(|f| f.take(STATUS_MAX).read_to_string(&mut text));
    if let Err(e) = read {
        log::debug!("ext4kit: groups of pid {pid}: {e}");
        return Vec::new();
    }
    text.lines()
        .find_map(|l| l.strip_prefix("Groups:"))
        .map(|g| g.split_whitespace().filter_map(|n| n.parse().ok()).collect())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::supplementary_groups;

    #[test]
    fn groups_of_this_process_are_read() {
        let ours = supplementary_groups(std::process::id());
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let line = status.lines().find(|l| l.starts_with("Groups:")).unwrap();
        assert_eq!(line.split_whitespace().count() - 1, ours.len());
    }
}
