//! The block cache in front of an export, as front ends open one: a
//! write-back [`PageCache`] over the [`NbdDevice`], sized by the URI's
//! `cache=SIZE` (`cache=0`: none), with readahead in units of the
//! export's preferred block size. Over a link where every request costs a
//! round trip, the engine's block-at-a-time metadata and journal writes
//! then cost nothing until a flush, which sends every dirty run at once
//! and awaits them all before `NBD_CMD_FLUSH`: a write acknowledged to
//! the engine is in this cache, as in a disk's volatile write cache, and
//! durable once a flush returns.

use std::io;

use super::{NbdDevice, NbdOptions, NbdUri};
use crate::device::{BlockDevice, PageCache, Passthrough};

/// The cache a front end puts in front of an export unless the URI says
/// otherwise: room for a small file system's metadata and journal
/// between two commits, little against a process's memory.
pub const DEFAULT_CACHE_BYTES: u64 = 64 << 20;

/// Cache pages of ext4's smallest block: no block write the engine makes
/// covers part of a page, so none waits a round trip to read the rest
/// first (with 4 KiB pages, every 1 KiB block written to a small file
/// system did).
const PAGE: usize = 1024;

/// An export behind a page cache. Dropping it writes back what is dirty
/// and flushes, as a disk empties its cache on a clean shutdown; an
/// error there is lost, so callers that care call
/// [`BlockDevice::flush`] first (the engine does at unmount and sync).
pub struct CachedExport {
    cache: PageCache<NbdDevice>,
}

impl CachedExport {
    /// `dev` behind a cache of `bytes` (0: requests pass straight
    /// through). Readahead widens misses to the export's preferred block
    /// size and grows on sequential reads up to what the connection keeps
    /// in flight at once.
    pub fn new(dev: NbdDevice, bytes: u64) -> Self {
        let unit = u64::from(dev.block_sizes().preferred);
        let window = dev.request_bytes() * dev.opts.max_in_flight.max(1) as u64;
        Self {
            cache: PageCache::with_page_size(dev, bytes, PAGE).with_readahead(unit, window),
        }
    }

    /// The cache (its counters) and, through it, the device.
    pub fn cache(&self) -> &PageCache<NbdDevice> {
        &self.cache
    }
}

impl Passthrough for CachedExport {
    fn inner(&self) -> &dyn BlockDevice {
        &self.cache
    }
}

impl Drop for CachedExport {
    fn drop(&mut self) {
        if !self.cache.read_only() {
            let _ = self.cache.flush();
        }
    }
}

/// Opens the image an NBD URI names, as every command does: the URI's
/// `cache=SIZE` sets the cache ([`DEFAULT_CACHE_BYTES`] when absent).
///
/// # Errors
/// A malformed URI or `cache=` value (`InvalidInput`); as
/// [`NbdDevice::open`].
pub fn open_image(uri: &str, writable: bool) -> io::Result<Box<dyn BlockDevice>> {
    let bytes = cache_bytes(uri)?;
    let opts = NbdOptions {
        writable,
        ..NbdOptions::default()
    };
    let dev = NbdDevice::open(&NbdUri::parse(uri)?, opts)?;
    Ok(Box::new(CachedExport::new(dev, bytes)))
}

/// The cache size a URI asks for with `cache=SIZE` in its query (bytes,
/// or with a K, M or G suffix, powers of 1024).
///
/// # Errors
/// `InvalidInput` naming the value when it is not a size.
pub fn cache_bytes(uri: &str) -> io::Result<u64> {
    let query = uri.split_once('?').map_or("", |(_, q)| q);
    let Some(v) = query.split('&').find_map(|kv| kv.strip_prefix("cache=")) else {
        return Ok(DEFAULT_CACHE_BYTES);
    };
    parse_size(v).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{uri}: cache={v} is not a size (write e.g. cache=64M, or cache=0 for none)"),
        )
    })
}

fn parse_size(v: &str) -> Option<u64> {
    let v = v.strip_suffix("iB").or_else(|| v.strip_suffix('B')).unwrap_or(v);
    let (digits, shift) = match v.as_bytes().last()? {
        b'k' | b'K' => (&v[..v.len() - 1], 10),
        b'm' | b'M' => (&v[..v.len() - 1], 20),
        b'g' | b'G' => (&v[..v.len() - 1], 30),
        _ => (v, 0),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse::<u64>().ok()?.checked_mul(1 << shift)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_sizes_from_the_query() {
        let size = |q: &str| cache_bytes(&format!("nbd+unix:///e?socket=/s{q}")).map_err(|e| e.to_string());
        assert_eq!(size(""), Ok(DEFAULT_CACHE_BYTES));
        assert_eq!(size("&cache=0"), Ok(0));
        assert_eq!(size("&cache=64M"), Ok(64 << 20));
        assert_eq!(size("&cache=512k"), Ok(512 << 10));
        assert_eq!(size("&cache=1GiB"), Ok(1 << 30));
        assert_eq!(size("&cache=4096"), Ok(4096));
        assert_eq!(cache_bytes("nbd://h/e?cache=2M").unwrap(), 2 << 20);
        for bad in ["&cache=", "&cache=M", "&cache=-1", "&cache=1T", "&cache=99999999999G"] {
            assert!(size(bad).unwrap_err().contains("is not a size"), "{bad}");
        }
    }
}
