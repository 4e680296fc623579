//! Resizing a live mount: `ext4kit resize MOUNTPOINT SIZE` (or the image
//! an ext4kit mount serves), as `resize2fs` on a mounted ext4 asks the
//! kernel (`EXT4_IOC_RESIZE_FS`).
//!
//! The request travels like the sync request ([`crate::sync_request`]):
//! the caller reads the extended attribute [`request_name`] of the mount
//! point, the new size in blocks in its name, with a buffer of
//! [`REPLY_MAX`] bytes. The server answers with a value rather than an
//! errno, so the caller can show why a resize was refused:
//! [`RESIZED`] followed by the old and new block and group counts, or
//! [`REFUSED`] followed by the engine's message
//! ([`ext4kit_engine::Filesystem::plan_online_grow`], [`crate::swap`]). A size query gets
//! [`REPLY_MAX`], since the answer is known only once the resize is done.

use fuser::Errno;

use crate::adapter::Ext4Fuse;

/// The prefix of the extended attribute whose reading is a resize
/// request; the new size in blocks follows after a dot.
pub const RESIZE_XATTR: &str = "ext4kit.resize";

/// The start of the reply to a resize that was done (or had nothing to
/// do): `OLD_BLOCKS NEW_BLOCKS OLD_GROUPS NEW_GROUPS BLOCK_SIZE` follow.
pub const RESIZED: &str = "ext4kit resized ";

/// The start of the reply to a refused resize; the reason follows.
pub const REFUSED: &str = "ext4kit refused: ";

/// The longest reply (a longer reason is cut).
pub const REPLY_MAX: usize = 1024;

/// The attribute name asking for a file system of `blocks` blocks.
pub fn request_name(blocks: u64) -> String {
    format!("{RESIZE_XATTR}.{blocks}")
}

/// The size asked for by the attribute `name`: `None` when it is not a
/// resize request, `Some(None)` when it is one with a malformed size.
pub(crate) fn parse_request(name: &[u8]) -> Option<Option<u64>> {
    let rest = name.strip_prefix(RESIZE_XATTR.as_bytes())?.strip_prefix(b".")?;
    Some(std::str::from_utf8(rest).ok().and_then(|s| s.parse().ok()))
}

/// The reply for a grow of `engine`'s outcome.
fn reply(r: ext4kit_engine::Result<ext4kit_engine::resize::ResizeReport>) -> Vec<u8> {
    let mut v = match r {
        Ok(r) => format!(
            "{RESIZED}{} {} {} {} {}",
            r.old_blocks, r.new_blocks, r.old_groups, r.new_groups, r.block_size
        ),
        Err(e) => format!("{REFUSED}{e}"),
    }
    .into_bytes();
    v.truncate(REPLY_MAX);
    v
}

impl Ext4Fuse {
    /// Answers a resize request for `blocks`: a size query gets
    /// [`REPLY_MAX`], a read resizes first. Served outside the request
    /// gate, which the grow takes exclusively (see [`crate::swap`]).
    pub(crate) fn resize_request(&self, blocks: u64, size: u32) -> Result<Vec<u8>, Errno> {
        if size == 0 {
            return Ok(vec![0; REPLY_MAX]);
        }
        if self.writable().is_err() {
            return Ok(reply(Err(ext4kit_engine::Error::InvalidArgument(
                "the mount is read-only".into(),
            ))));
        }
        let planned = {
            let _gate = self.served.enter();
            self.fs().plan_online_grow(blocks)
        };
        let r = match planned {
            Ok(p) if p.new_blocks == p.old_blocks => Ok(p),
            Ok(_) => self.served.grow(blocks).map(|(r, held)| {
                log::info!(
                    "ext4kit: grown from {} to {} blocks while mounted ({} blocks moved out of the \
                     descriptor table's way); requests held for {} ms",
                    r.old_blocks,
                    r.new_blocks,
                    r.moved_blocks,
                    held.as_millis()
                );
                r
            }),
            Err(e) => Err(e),
        };
        if let Err(e) = &r {
            log::error!("ext4kit: resize to {blocks} blocks: {e}");
        }
        Ok(reply(r))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_names_carry_the_size() {
        assert_eq!(parse_request(request_name(123_456).as_bytes()), Some(Some(123_456)));
        assert_eq!(parse_request(b"ext4kit.resize.12x"), Some(None));
        assert_eq!(parse_request(b"ext4kit.resize"), None);
        assert_eq!(parse_request(b"ext4kit.resizex.1"), None);
        assert_eq!(parse_request(b"user.ext4kit.resize.1"), None);
    }

    #[test]
    fn refusals_carry_their_reason() {
        let e = ext4kit_engine::Error::InvalidArgument("too small".into());
        let v = reply(Err(e));
        assert!(v.starts_with(REFUSED.as_bytes()));
        assert!(String::from_utf8_lossy(&v).contains("too small"));
        assert!(reply(Err(ext4kit_engine::Error::InvalidArgument("x".repeat(5000)))).len() <= REPLY_MAX);
    }
}
