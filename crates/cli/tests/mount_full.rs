//! A full file system through `ext4kit mount` with the kernel's write-back
//! cache on (the default): `write(2)` itself must fail with ENOSPC, every
//! byte it accepted must be stored, and nothing must read back that was
//! not written. Needs root and /dev/fuse; skips loudly otherwise.

use std::fs::File;
use std::io::{ErrorKind, Write};
use std::path::{Path, PathBuf};
use std::process::Command;

use ext4kit_testkit::fuse::{FuseMount, can_fuse_mount};
use ext4kit_testkit::tools::{e2fsck_fn, require_tool, skip_unless};

const CHUNK: usize = 1 << 20;

fn exe() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_ext4kit"))
}

fn ready() -> bool {
    skip_unless(can_fuse_mount()).is_some() && skip_unless(require_tool("mkfs.ext4")).is_some()
}

fn make_image(dir: &Path, size: &str) -> PathBuf {
    let img = dir.join("full.ext4");
    let out = Command::new("mkfs.ext4")
        .args(["-q", "-F"])
        .arg(&img)
        .arg(size)
        .output()
        .expect("run mkfs.ext4");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    img
}

/// The bytes writer `id` puts at `offset`: every 8 bytes name the writer
/// and their own offset, so a misplaced or zeroed range shows.
fn pattern(id: u8, offset: u64, len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(len);
    let mut at = offset;
    while out.len() < len {
        let word = (u64::from(id) << 56) | (at / 8);
        out.extend_from_slice(&word.to_le_bytes());
        at += 8;
    }
    out.truncate(len);
    out
}

/// Writes chunks of the pattern until `write(2)` fails; returns the file,
/// still open, how many bytes it accepted and the error that stopped it.
fn fill(path: &Path, id: u8) -> (File, u64, std::io::Error) {
    let mut f = File::create(path).unwrap();
    let mut written = 0u64;
    loop {
        let buf = pattern(id, written, CHUNK);
        match f.write(&buf) {
            Ok(0) => panic!("write(2) returned 0 at {written}"),
            Ok(n) => written += n as u64,
            Err(e) => {
                // Everything write(2) accepted must reach the image.
                f.sync_all()
                    .unwrap_or_else(|e2| panic!("fsync after {written} accepted bytes: {e2}"));
                return (f, written, e);
            }
        }
        assert!(written < 1 << 30, "write(2) never failed: {written} bytes accepted");
    }
}

/// Free bytes of the mount, as `df` sees them.
fn free_bytes(dir: &Path) -> u64 {
    let s = rustix::fs::statvfs(dir).unwrap();
    s.f_bfree * s.f_frsize
}

/// The file as the image stores it, read after unmounting.
fn stored(img: &Path, name: &str) -> Vec<u8> {
    let out = Command::new(exe())
        .arg("cat")
        .arg(img)
        .arg(format!("/{name}"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    out.stdout
}

fn assert_stored_exactly(img: &Path, name: &str, id: u8, accepted: u64) {
    let data = stored(img, name);
    assert_eq!(
        data.len() as u64,
        accepted,
        "{name}: the image holds {} bytes, write(2) accepted {accepted}",
        data.len()
    );
    let want = pattern(id, 0, data.len());
    if let Some(at) = data.iter().zip(&want).position(|(a, b)| a != b) {
        let word = at / 8 * 8;
        let found = u64::from_le_bytes(data[word..word + 8].try_into().unwrap());
        let bad = data.chunks(1024).zip(want.chunks(1024)).filter(|(a, b)| a != b).count();
        panic!(
            "{name}: byte {at} of {} differs from what was written: found {found:#x} (writer {}, offset {}); {bad} KiB differ",
            data.len(),
            found >> 56,
            (found & ((1 << 56) - 1)) * 8
        );
    }
}

fn assert_clean(img: &Path) {
    let r = e2fsck_fn(img).expect("run e2fsck");
    assert!(r.is_clean(), "e2fsck -fn: {}", r.output);
}

/// One writer: ENOSPC from write(2) itself, within the reserve of the real
/// limit; all accepted bytes stored; space freed by an unlink can be
/// written again.
#[test]
fn write_fails_with_enospc_and_keeps_every_accepted_byte() {
    if !ready() {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let img = make_image(work.path(), "64M");
    let m = FuseMount::start(exe(), &img, "").unwrap();
    let (f, accepted, err) = fill(&m.path().join("a"), 1);
    drop(f);
    assert_eq!(err.kind(), ErrorKind::StorageFull, "write(2) failed with {err}");
    // The default max_dirty for 64 MiB is 2 MiB: the reserve is 3 MiB, and
    // the band where every write asks first another 2 MiB.
    let left = free_bytes(m.path());
    assert!(left <= 5 << 20, "write(2) refused with {left} bytes still free");
    assert!(accepted >= 40 << 20, "only {accepted} bytes accepted on a 64 MiB image");
    std::fs::remove_file(m.path().join("a")).unwrap();
    let mut f = File::create(m.path().join("b")).unwrap();
    f.write_all(&pattern(2, 0, 4 * CHUNK)).unwrap();
    f.sync_all().unwrap();
    drop(f);
    assert!(m.unmount().unwrap().success());
    assert_stored_exactly(&img, "b", 2, 4 * CHUNK as u64);
    assert_clean(&img);
}

/// `close(2)` sends its RELEASE in the background, so an unlink can reach
/// the server while the file still counts as open, and a create or write right
/// after it finds the space still held. The server waits for the release
/// before answering ENOSPC: here the file is closed 50 ms after the create
/// starts, and the create and write, which fit only in its space, succeed.
/// On `/dev/fuse`, where other threads read the RELEASE while one waits;
/// on io_uring at one entry per queue, a RELEASE sent from the waiting
/// request's CPU queues behind it, and the wait ends in ENOSPC.
#[test]
fn space_held_by_a_removed_file_closing_soon_is_waited_for() {
    if !ready() {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let img = make_image(work.path(), "64M");
    let m = FuseMount::start(exe(), &img, "transport=dev").unwrap();
    let (f, _, err) = fill(&m.path().join("a"), 1);
    assert_eq!(err.kind(), ErrorKind::StorageFull, "write(2) failed with {err}");
    std::fs::remove_file(m.path().join("a")).unwrap();
    let b = std::thread::scope(|s| {
        s.spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(50));
            drop(f);
        });
        let mut b = File::create(m.path().join("b")).expect("the create waits for the release");
        b.write_all(&pattern(2, 0, 4 * CHUNK))
            .expect("the write waits for the release");
        b
    });
    b.sync_all().unwrap();
    drop(b);
    assert!(m.unmount().unwrap().success());
    assert_stored_exactly(&img, "b", 2, 4 * CHUNK as u64);
    assert_clean(&img);
}

/// Four writers at once: each sees ENOSPC from write(2), and each file
/// holds exactly what its writer was told was written.
#[test]
fn concurrent_writers_each_keep_what_write_accepted() {
    if !ready() {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let img = make_image(work.path(), "128M");
    let m = FuseMount::start(exe(), &img, "").unwrap();
    let results: Vec<(u64, std::io::Error)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..4u8)
            .map(|id| {
                let path = m.path().join(format!("w{id}"));
                s.spawn(move || {
                    let (_, accepted, err) = fill(&path, id);
                    (accepted, err)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (id, (_, err)) in results.iter().enumerate() {
        assert_eq!(err.kind(), ErrorKind::StorageFull, "writer {id}: {err}");
    }
    assert!(m.unmount().unwrap().success());
    for (id, (accepted, _)) in results.iter().enumerate() {
        assert_stored_exactly(&img, &format!("w{id}"), id as u8, *accepted);
    }
    assert_clean(&img);
}

/// Once full, every other way to take space fails at once with ENOSPC
/// (not later, at close), and what the mount shows is what the image holds.
/// (The writer stays open: the room kept for it is freed when it closes.)
#[test]
fn a_full_mount_refuses_new_data_at_once() {
    if !ready() {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let img = make_image(work.path(), "64M");
    let m = FuseMount::start(exe(), &img, "").unwrap();
    let (big, accepted, _) = fill(&m.path().join("big"), 3);
    // Creating the file may already be refused (it can take a directory
    // block); if not, its first write(2) is.
    match File::create(m.path().join("second")) {
        Ok(mut second) => {
            let e = second.write(&pattern(4, 0, 4096)).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::StorageFull, "write to a second file: {e}");
            second.sync_all().unwrap();
        }
        Err(e) => assert_eq!(e.kind(), ErrorKind::StorageFull, "create: {e}"),
    }
    let e = std::fs::create_dir(m.path().join("d")).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::StorageFull, "mkdir: {e}");
    let shown = std::fs::read(m.path().join("big")).unwrap();
    assert_eq!(shown.len() as u64, accepted);
    drop(big);
    assert!(m.unmount().unwrap().success());
    assert_stored_exactly(&img, "big", 3, accepted);
    let second = Command::new(exe())
        .arg("cat")
        .arg(&img)
        .arg("/second")
        .output()
        .unwrap();
    assert!(second.stdout.is_empty(), "a refused write left data behind");
    assert_clean(&img);
}

/// One `write(2)` call larger than the whole file system is checked only
/// at its start and overruns: fsync reports ENOSPC, and once the file is
/// closed the mount shows exactly what the image stored — no size or data
/// the image does not hold.
#[test]
fn an_overrunning_write_call_reads_back_as_what_was_stored() {
    if !ready() {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let img = make_image(work.path(), "64M");
    let m = FuseMount::start(exe(), &img, "").unwrap();
    let path = m.path().join("huge");
    let mut f = File::create(&path).unwrap();
    let n = f.write(&pattern(5, 0, 80 << 20)).unwrap();
    let e = f.sync_all().unwrap_err();
    assert_eq!(e.kind(), ErrorKind::StorageFull, "fsync after {n} bytes: {e}");
    drop(f);
    // The kernel forgets the file's name and pages from a thread of the
    // server: wait until its size is no longer the cached one.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while std::fs::metadata(&path).unwrap().len() >= 64 << 20 {
        assert!(
            std::time::Instant::now() < deadline,
            "the mount still shows the unstored size"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let shown = std::fs::read(&path).unwrap();
    assert!(m.unmount().unwrap().success());
    let kept = stored(&img, "huge");
    assert_eq!(
        shown.len(),
        kept.len(),
        "the mount showed a size the image does not hold"
    );
    assert!(shown == kept, "the mount showed data the image does not hold");
    assert_stored_exactly(&img, "huge", 5, kept.len() as u64);
    assert_clean(&img);
}

/// A tmpfs of a given size, unmounted on drop.
struct Tmpfs(tempfile::TempDir);

impl Tmpfs {
    fn new(size: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let st = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .status()
            .unwrap();
        assert!(st.success(), "mount -t tmpfs");
        Tmpfs(dir)
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.0.path()).status();
    }
}

/// A sparse 64 MiB image on a 40 MiB host file system: the host fills
/// first. write(2) fails with ENOSPC (not EROFS later), every accepted
/// byte is stored, other changes are refused with ENOSPC, and the image
/// unmounts clean.
#[test]
fn a_full_host_under_a_sparse_image_is_enospc_from_write() {
    if !ready() {
        return;
    }
    let host = Tmpfs::new("40m");
    let img = host.0.path().join("sparse.ext4");
    let out = Command::new(exe())
        .args(["mkfs", "-q"])
        .arg(&img)
        .arg("64M")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let m = FuseMount::start(exe(), &img, "").unwrap();
    let (f, accepted, err) = fill(&m.path().join("big"), 6);
    assert_eq!(err.kind(), ErrorKind::StorageFull, "write(2) failed with {err}");
    // (While the writer is open: its room is kept until it closes.)
    let e = File::create(m.path().join("after")).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::StorageFull, "create: {e}");
    drop(f);
    assert!(
        m.unmount().unwrap().success(),
        "the server did not close the image cleanly"
    );
    assert_stored_exactly(&img, "big", 6, accepted);
    assert!(
        accepted >= 24 << 20,
        "only {accepted} bytes accepted with 40 MiB on the host"
    );
    assert_clean(&img);
}
