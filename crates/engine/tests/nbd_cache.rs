//! The block cache in front of an NBD export (`nbd::open_image`, a
//! write-back page cache with readahead) against real servers: cached
//! writes reach the backing file only at a flush, all acknowledged before
//! the server sees `NBD_CMD_FLUSH` (read from nbdkit's log filter), and
//! the file system made through it checks clean; a server killed with
//! dirty pages held makes the flush fail with EIO and loses nothing
//! flushed before; readahead grows on sequential reads and never asks
//! past the export's end; mkfs streams large writes, many in flight.

use std::path::Path;

use ext4kit_engine::device::nbd::{CachedExport, NbdUri, open_image};
use ext4kit_engine::device::{FileDevice, NbdDevice, NbdOptions};
use ext4kit_engine::mkfs::{MkfsOptions, mkfs};
use ext4kit_engine::{Attr, BlockDevice, Filesystem, NodeKind, OpenOptions, ROOT_INO};
use ext4kit_testkit::nbd::{Listen, NbdServer, servers_missing};
use ext4kit_testkit::rng::Rng;
use ext4kit_testkit::{skipped, tools};

fn servers_here() -> bool {
    match servers_missing() {
        Some(why) => {
            skipped!("NBD servers missing: {why}");
            false
        }
        None => true,
    }
}

fn image_file(dir: &Path, len: u64) -> std::path::PathBuf {
    let p = dir.join("backing.img");
    std::fs::File::create(&p).unwrap().set_len(len).unwrap();
    p
}

fn cached(uri: &str, cache: u64) -> CachedExport {
    let opts = NbdOptions {
        writable: true,
        ..NbdOptions::default()
    };
    let dev = NbdDevice::open(&NbdUri::parse(uri).unwrap(), opts).unwrap_or_else(|e| panic!("{uri}: {e}"));
    CachedExport::new(dev, cache)
}

fn errno(e: &std::io::Error) -> i32 {
    e.raw_os_error().unwrap_or(libc::EIO)
}

/// One request in nbdkit's log filter output: (id, command, count) at its
/// start, or the id of a reply.
enum Logged {
    Start { id: u64, cmd: String, count: u64 },
    Done { id: u64 },
}

fn parse_log(text: &str) -> Vec<Logged> {
    let field = |l: &str, key: &str| {
        l.split_whitespace()
            .find_map(|w| w.strip_prefix(key))
            .map(|v| match v.strip_prefix("0x") {
                Some(h) => u64::from_str_radix(h, 16).unwrap(),
                None => v.parse().unwrap(),
            })
    };
    let mut out = Vec::new();
    for l in text.lines().filter(|l| l.contains(" connection=")) {
        let Some(id) = field(l, "id=") else { continue };
        let words: Vec<&str> = l.split_whitespace().collect();
        let Some(cmd) = words
            .iter()
            .position(|w| w.starts_with("connection="))
            .map(|i| words[i + 1])
        else {
            continue;
        };
        if cmd.starts_with("...") {
            out.push(Logged::Done { id });
        } else {
            out.push(Logged::Start {
                id,
                cmd: cmd.to_string(),
                count: field(l, "count=").unwrap_or(0),
            });
        }
    }
    out
}

/// Checks, in the server's own order of events (a delay filter below the
/// log filter keeps each write open long enough to be seen overlapping), that every write started
/// before a flush was answered before that flush started; returns the
/// most writes the server held at once.
fn writes_done_before_each_flush(log: &[Logged]) -> usize {
    let mut open = std::collections::HashSet::new();
    let mut most = 0;
    for e in log {
        match e {
            Logged::Start { id, cmd, .. } if cmd == "Write" => {
                open.insert(*id);
                most = most.max(open.len());
            }
            Logged::Start { cmd, .. } if cmd == "Flush" => {
                assert!(open.is_empty(), "a flush was sent with writes {open:?} unanswered");
            }
            Logged::Done { id } => {
                open.remove(id);
            }
            Logged::Start { .. } => {}
        }
    }
    most
}

/// Writes stay in the cache until a flush; the flush sends them all in
/// flight and only then `NBD_CMD_FLUSH`; a file system made, written and
/// unmounted through the cache is clean on the backing file.
#[test]
fn cached_writes_reach_the_file_at_flush_in_order() {
    if !servers_here() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let img = image_file(dir.path(), 64 << 20);
    let log = dir.path().join("log.txt");
    let srv = NbdServer::nbdkit(
        &[
            "--filter=log",
            "--filter=delay",
            "file",
            &format!("file={}", img.display()),
            &format!("logfile={}", log.display()),
            "wdelay=2ms",
        ],
        &Listen::Unix(dir.path().join("c.sock")),
    )
    .unwrap();
    let dev = cached(&srv.uri(""), 16 << 20);
    let data = Rng::new(5).bytes(3 << 20);
    // Every other 4 KiB page: 384 runs the flush must write.
    for (i, page) in data.chunks(4096).enumerate().step_by(2) {
        dev.write_at(((i * 4096) + (8 << 20)) as u64, page).unwrap();
    }
    let on_file = |at: u64, n: usize| {
        use std::os::unix::fs::FileExt;
        let mut b = vec![0u8; n];
        std::fs::File::open(&img).unwrap().read_exact_at(&mut b, at).unwrap();
        b
    };
    assert!(
        on_file(8 << 20, 4096).iter().all(|&b| b == 0),
        "a write reached the file before any flush"
    );
    let before = dev.cache().inner().stats();
    dev.flush().unwrap();
    let sent = dev.cache().inner().stats().since(&before);
    assert_eq!((sent.writes, sent.flushes), (384, 1), "{sent:?}");
    assert_eq!(sent.widest_batch, 16, "the write-back went one by one: {sent:?}");
    for (i, page) in data.chunks(4096).enumerate().step_by(2) {
        assert!(
            on_file(((i * 4096) + (8 << 20)) as u64, 4096) == page,
            "page {i} after the flush"
        );
    }

    mkfs(&dev, &MkfsOptions::default()).unwrap();
    let fs = Filesystem::open(Box::new(dev), OpenOptions::default()).unwrap();
    let attr = Attr {
        perm: 0o644,
        uid: 0,
        gid: 0,
    };
    for i in 0..100usize {
        let f = fs
            .create(ROOT_INO, format!("f{i}").as_bytes(), NodeKind::Regular, attr)
            .unwrap();
        fs.write(f.ino, 0, &vec![i as u8; 1000 + i * 397]).unwrap();
        if i % 25 == 24 {
            fs.sync().unwrap();
        }
    }
    fs.unmount().unwrap();
    drop(srv);
    let events = parse_log(&std::fs::read_to_string(&log).unwrap());
    let most = writes_done_before_each_flush(&events);
    assert!(most >= 8, "the server never held more than {most} writes at once");
    tools::assert_fsck_clean(&img).unwrap();
    let local = FileDevice::open(&img, false).unwrap();
    let fs = Filesystem::open(Box::new(local), OpenOptions::default()).unwrap();
    let f = fs.resolve(b"/f99").unwrap();
    assert!(fs.read_all(&f, 1 << 20).unwrap() == vec![99u8; 1000 + 99 * 397]);
}

/// A server killed while the cache holds dirty pages: the flush fails
/// with EIO, so does every later one, and what the flush before the kill
/// covered is on the export while the lost pages are not.
#[test]
fn a_killed_server_with_dirty_pages_fails_the_flush() {
    if !servers_here() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let img = image_file(dir.path(), 4 << 20);
    let mut srv = NbdServer::qemu_nbd(&img, "", &Listen::Unix(dir.path().join("k.sock"))).unwrap();
    let dev = cached(&srv.uri(""), 8 << 20);
    let flushed = vec![0xa5u8; 256 << 10];
    dev.write_at(0, &flushed).unwrap();
    dev.flush().unwrap();
    let dirty = vec![0x5au8; 64 << 10];
    dev.write_at(1 << 20, &dirty).unwrap();
    srv.kill();
    let e = dev.flush().expect_err("a flush with the server gone succeeded");
    assert_eq!(errno(&e), libc::EIO, "{e}");
    let e = dev.flush().expect_err("a second flush succeeded");
    assert_eq!(errno(&e), libc::EIO, "{e}");
    srv.restart().unwrap();
    drop(dev);
    drop(srv);
    let file = std::fs::read(&img).unwrap();
    assert!(file[..flushed.len()] == flushed[..], "flushed data lost");
    assert!(
        file[1 << 20..(1 << 20) + dirty.len()].iter().all(|&b| b == 0),
        "pages of the failed flush reached the file after the connection was lost"
    );
}

/// The engine over the cache: files synced before the kill survive, the
/// sync after it fails with EIO, and the replayed image checks clean.
#[test]
fn a_file_system_over_the_cache_survives_a_killed_server() {
    if !servers_here() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let img = image_file(dir.path(), 64 << 20);
    let mut srv = NbdServer::qemu_nbd(&img, "", &Listen::Unix(dir.path().join("f.sock"))).unwrap();
    let dev = open_image(&format!("{}&cache=32M", srv.uri("")), true).unwrap();
    mkfs(&*dev, &MkfsOptions::default()).unwrap();
    let fs = Filesystem::open(dev, OpenOptions::default()).unwrap();
    let attr = Attr {
        perm: 0o644,
        uid: 0,
        gid: 0,
    };
    let mut rng = Rng::new(9);
    let mut made = Vec::new();
    for i in 0..20usize {
        let data = rng.bytes(1 + i * 9001);
        let f = fs
            .create(ROOT_INO, format!("s{i}").as_bytes(), NodeKind::Regular, attr)
            .unwrap();
        fs.write(f.ino, 0, &data).unwrap();
        made.push((format!("/s{i}"), data));
    }
    fs.sync().unwrap();
    srv.kill();
    let late = fs
        .create(ROOT_INO, b"late", NodeKind::Regular, attr)
        .and_then(|f| fs.write(f.ino, 0, &[7u8; 100_000]))
        .and_then(|_| fs.sync());
    let e = late.expect_err("a sync with the server gone succeeded");
    assert_eq!(e.errno(), libc::EIO, "{e}");
    drop(fs);
    srv.restart().unwrap();
    drop(srv);
    let local = FileDevice::open(&img, true).unwrap();
    let fs = Filesystem::open(Box::new(local), OpenOptions::default()).unwrap();
    for (path, data) in &made {
        let f = fs.resolve(path.as_bytes()).unwrap();
        assert!(fs.read_all(&f, 1 << 20).unwrap() == *data, "{path}");
    }
    fs.unmount().unwrap();
    tools::assert_fsck_clean(&img).unwrap();
}

/// Sequential reads grow the readahead window, so far fewer requests
/// reach the server than reads were made; reads near the end of an
/// export whose size is no multiple of the page size never ask past it
/// (a server refuses such a read, which would fail ours).
#[test]
fn readahead_grows_on_streams_and_stops_at_the_end() {
    if !servers_here() {
        return;
    }
    let len: u64 = (6 << 20) + 1536;
    let srv = NbdServer::nbdkit(&["memory", &len.to_string()], &Listen::free_tcp().unwrap()).unwrap();
    let model = Rng::new(3).bytes(len as usize);
    {
        let plain = NbdDevice::open_uri(&srv.uri(""), true).unwrap();
        plain.write_at(0, &model).unwrap();
        plain.flush().unwrap();
    }
    let dev = cached(&srv.uri(""), 32 << 20);
    let mut buf = vec![0u8; 64 << 10];
    let mut at = 0u64;
    while at < len {
        let n = buf.len().min((len - at) as usize);
        dev.read_at(at, &mut buf[..n]).unwrap();
        assert!(buf[..n] == model[at as usize..at as usize + n], "bytes at {at}");
        at += n as u64;
    }
    let st = dev.cache().stats();
    let net = dev.cache().inner().stats();
    assert!(st.readahead_pages > 0, "{st:?}");
    assert!(
        net.read_bytes <= len,
        "read {} bytes of a {len}-byte export",
        net.read_bytes
    );
    assert!(
        st.inner_reads * 8 <= st.reads,
        "{} inner reads for {} sequential reads",
        st.inner_reads,
        st.reads
    );
    // A fresh cache, the last bytes first: widening is clipped at the end.
    let dev = cached(&srv.uri(""), 32 << 20);
    for tail in [512u64, 1536, 5000, 70_000] {
        let mut b = vec![0u8; tail as usize];
        dev.read_at(len - tail, &mut b).unwrap();
        assert!(b[..] == model[(len - tail) as usize..], "the last {tail} bytes");
    }
    assert!(dev.cache().inner().stats().read_bytes <= len);
}

/// mkfs through `open_image` reaches the server as large writes with
/// many in flight: the client's counters and nbdkit's log agree.
#[test]
fn mkfs_streams_large_writes() {
    if !servers_here() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("mkfs.log");
    let srv = NbdServer::nbdkit(
        &[
            "--filter=log",
            "--filter=delay",
            "memory",
            "256M",
            &format!("logfile={}", log.display()),
            "wdelay=2ms",
        ],
        &Listen::Unix(dir.path().join("m.sock")),
    )
    .unwrap();
    let dev = cached(&srv.uri(""), 64 << 20);
    mkfs(&dev, &MkfsOptions::default()).unwrap();
    let net = dev.cache().inner().stats();
    drop(dev);
    drop(srv);
    let events = parse_log(&std::fs::read_to_string(&log).unwrap());
    let writes: Vec<u64> = events
        .iter()
        .filter_map(|e| match e {
            Logged::Start { cmd, count, .. } if cmd == "Write" => Some(*count),
            _ => None,
        })
        .collect();
    assert_eq!(writes.len() as u64, net.writes, "the log and the counters disagree");
    let bytes: u64 = writes.iter().sum();
    assert!(bytes / net.writes >= 64 << 10, "{} writes of {bytes} bytes", net.writes);
    assert_eq!(writes.iter().max(), Some(&(256 << 10)));
    assert_eq!(net.widest_batch, 16, "{net:?}");
    let most = writes_done_before_each_flush(&events);
    assert!(most >= 8, "the server never held more than {most} writes at once");
    eprintln!("mkfs of 256 MiB: {net:?}; the server held up to {most} writes at once");
}
