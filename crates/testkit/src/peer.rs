//! The e2fsprogs test-suite images (shared peer data), decompressed into a
//! cache directory.

use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Decompressed images larger than this are skipped.
pub const MAX_IMAGE_BYTES: u64 = 256 << 20;

/// One decompressed e2fsprogs test image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerImage {
    /// The e2fsprogs test name (its directory, e.g. `f_badcluster`).
    pub test: String,
    /// The decompressed image in the cache directory.
    pub path: PathBuf,
    /// The compressed original.
    pub source: PathBuf,
}

/// The `e2fsprogs-tests` directory: `$EXT4KIT_PEER_DATA` (either the
/// `peer-data` directory or its `e2fsprogs-tests` child) or else
/// `<repo root>/../shared/peer-data/e2fsprogs-tests`. `None` if absent.
pub fn peer_data_dir() -> Option<PathBuf> {
    if let Some(env) = std::env::var_os("EXT4KIT_PEER_DATA") {
        let p = PathBuf::from(env);
        for cand in [p.join("e2fsprogs-tests"), p.clone()] {
            if cand.is_dir() {
                return Some(cand);
            }
        }
        eprintln!("peer: EXT4KIT_PEER_DATA={} is not a directory", p.display());
        return None;
    }
    // crates/testkit -> repo root -> ../shared
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let p = repo.join("../shared/peer-data/e2fsprogs-tests");
    p.is_dir().then(|| p.canonicalize().unwrap_or(p))
}

/// The default cache directory: `$CARGO_TARGET_TMPDIR/ext4kit-peer` when that
/// variable is set at run time, else `<temp dir>/ext4kit-peer`. (Integration
/// tests can pass `env!("CARGO_TARGET_TMPDIR")` to
/// [`e2fsprogs_images_in`] instead.)
pub fn default_cache_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_TMPDIR") {
        Some(t) => PathBuf::from(t).join("ext4kit-peer"),
        None => std::env::temp_dir().join("ext4kit-peer"),
    }
}

/// Every `image.gz` and `image.bz2` of the e2fsprogs tests, decompressed into
/// [`default_cache_dir`]. Empty (with a message) when the peer data is absent.
pub fn e2fsprogs_images() -> Vec<PeerImage> {
    e2fsprogs_images_in(&default_cache_dir())
}

/// Just the paths of [`e2fsprogs_images`].
pub fn e2fsprogs_image_paths() -> Vec<PathBuf> {
    e2fsprogs_images().into_iter().map(|p| p.path).collect()
}

/// Like [`e2fsprogs_images`], decompressing into `cache` (reused across runs:
/// an image already there is not decompressed again). `.bz2` images need
/// the `bzip2` command and are skipped with a message without it; images over
/// [`MAX_IMAGE_BYTES`] are skipped with a message.
pub fn e2fsprogs_images_in(cache: &Path) -> Vec<PeerImage> {
    let Some(root) = peer_data_dir() else {
        eprintln!("peer: no e2fsprogs-tests peer data found (set EXT4KIT_PEER_DATA)");
        return Vec::new();
    };
    let mut tests: Vec<PathBuf> = match fs::read_dir(&root) {
        Ok(rd) => rd
            .filter_map(|e| e.ok())
            .map(|e| e.path())
            .filter(|p| p.is_dir())
            .collect(),
        Err(e) => {
            eprintln!("peer: cannot list {}: {e}", root.display());
            return Vec::new();
        }
    };
    tests.sort();
    let have_bzip2 = crate::tools::require_tool("bzip2").is_ok();
    let mut out = Vec::new();
    for dir in tests {
        let test = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        for (name, kind) in [("image.gz", Codec::Gzip), ("image.bz2", Codec::Bzip2)] {
            let source = dir.join(name);
            if !source.is_file() {
                continue;
            }
            if kind == Codec::Bzip2 && !have_bzip2 {
                eprintln!("peer: skipping {test}/{name}: no bzip2 command");
                continue;
            }
            let dest = cache.join(&test).join("image");
            if dest.is_file() {
                out.push(PeerImage {
                    test: test.clone(),
                    path: dest,
                    source,
                });
                continue;
            }
            match decompress(&source, &dest, kind) {
                Ok(true) => out.push(PeerImage {
                    test: test.clone(),
                    path: dest,
                    source,
                }),
                Ok(false) => {
                    eprintln!("peer: skipping {test}/{name}: larger than {MAX_IMAGE_BYTES} bytes")
                }
                Err(e) => eprintln!("peer: skipping {test}/{name}: {e}"),
            }
        }
    }
    out
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Codec {
    Gzip,
    Bzip2,
}

/// Decompresses `src` to `dest` through a temporary file; `Ok(false)` when
/// the output would exceed [`MAX_IMAGE_BYTES`].
fn decompress(src: &Path, dest: &Path, codec: Codec) -> io::Result<bool> {
    let parent = dest.parent().unwrap_or(Path::new("."));
    fs::create_dir_all(parent)?;
    let mut tmp = tempfile::NamedTempFile::new_in(parent)?;
    let fits = match codec {
        Codec::Gzip => {
            let dec = flate2::read::MultiGzDecoder::new(File::open(src)?);
            copy_bounded(dec, tmp.as_file_mut())?
        }
        Codec::Bzip2 => {
            let mut child = Command::new("bzip2")
                .arg("-dc")
                .arg(src)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()?;
            let stdout = child.stdout.take().ok_or_else(|| io::Error::other("no bzip2 stdout"))?;
            let fits = copy_bounded(stdout, tmp.as_file_mut());
            if !matches!(fits, Ok(true)) {
                let _ = child.kill();
            }
            let status = child.wait()?;
            let fits = fits?;
            if fits && !status.success() {
                return Err(io::Error::other(format!("bzip2 -dc exited with {status}")));
            }
            fits
        }
    };
    if fits {
        tmp.as_file_mut().flush()?;
        tmp.persist(dest).map_err(|e| e.error)?;
    }
    Ok(fits)
}

/// Copies at most [`MAX_IMAGE_BYTES`] from `r` into the file `w`, leaving
/// holes where whole 4 KiB blocks are zero (the images are mostly zeros);
/// `Ok(false)` when there was more.
fn copy_bounded<R: Read>(r: R, w: &mut File) -> io::Result<bool> {
    use std::io::{Seek, SeekFrom};
    let mut limited = r.take(MAX_IMAGE_BYTES + 1);
    let mut buf = vec![0u8; 1 << 16];
    let zeros = [0u8; 4096];
    let mut pos = 0u64;
    loop {
        let n = read_full(&mut limited, &mut buf)?;
        if n == 0 {
            break;
        }
        for block in buf[..n].chunks(4096) {
            if block == &zeros[..block.len()] {
                w.seek(SeekFrom::Current(block.len() as i64))?;
            } else {
                w.write_all(block)?;
            }
        }
        pos += n as u64;
    }
    w.set_len(pos.min(MAX_IMAGE_BYTES + 1))?;
    Ok(pos <= MAX_IMAGE_BYTES)
}

/// Reads until `buf` is full or the input ends.
fn read_full<R: Read>(r: &mut R, buf: &mut [u8]) -> io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match r.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copy_bounded_stops_at_limit_and_keeps_bytes() {
        let mut f = tempfile::tempfile().unwrap();
        let mut data = vec![0u8; 10_000];
        data[5000] = 7;
        data[9999] = 9;
        assert!(copy_bounded(&data[..], &mut f).unwrap());
        let mut back = Vec::new();
        use std::io::{Seek, SeekFrom};
        f.seek(SeekFrom::Start(0)).unwrap();
        f.read_to_end(&mut back).unwrap();
        assert_eq!(back, data);
        let mut f = tempfile::tempfile().unwrap();
        assert!(!copy_bounded(io::repeat(0).take(MAX_IMAGE_BYTES + 1), &mut f).unwrap());
    }

    #[test]
    fn gzip_roundtrip_into_cache() {
        let t = tempfile::tempdir().unwrap();
        let src = t.path().join("image.gz");
        let mut enc = flate2::write::GzEncoder::new(File::create(&src).unwrap(), flate2::Compression::fast());
        enc.write_all(b"not really an image").unwrap();
        enc.finish().unwrap();
        let dest = t.path().join("cache/x/image");
        assert!(decompress(&src, &dest, Codec::Gzip).unwrap());
        assert_eq!(fs::read(&dest).unwrap(), b"not really an image");
    }
}
