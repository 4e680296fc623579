//! How much requests in flight and the block cache recover over a slow
//! NBD link: sequential write and read of 16 MiB (1 MiB accesses) and a
//! small-file workload (mkfs, 200 files of 2–16 KiB, sync, unmount) on
//! an export, each by a naive client (1 request in flight, no cache),
//! with 16 in flight, and with 16 in flight behind a 64 MiB write-back
//! cache with readahead (`nbd::CachedExport`, what `open_image` gives
//! the commands). The NBD requests each run sent are counted too.
//! Whole-process figures are not these: each is the median of `RUNS`
//! timed runs inside one process.
//!
//! `cargo run --release -p ext4kit-engine --example nbd_latency -- URI`
//! against, for instance, `nbdkit -U SOCK --filter=delay memory 64M
//! rdelay=1ms wdelay=1ms` (the export must hold at least 64 MiB).

use std::sync::Arc;
use std::time::{Duration, Instant};

use ext4kit_engine::device::nbd::{CachedExport, NbdStats, NbdUri};
use ext4kit_engine::device::{NbdDevice, NbdOptions};
use ext4kit_engine::mkfs::{MkfsOptions, mkfs};
use ext4kit_engine::{Attr, BlockDevice, Filesystem, NodeKind, OpenOptions, ROOT_INO};

const RUNS: usize = 3;
const SEQ: usize = 16 << 20;
const ACCESS: usize = 1 << 20;

/// One client configuration.
#[derive(Clone, Copy)]
struct Client {
    name: &'static str,
    in_flight: usize,
    cache: u64,
}

const CLIENTS: [Client; 3] = [
    Client {
        name: "naive: 1 in flight, no cache",
        in_flight: 1,
        cache: 0,
    },
    Client {
        name: "16 in flight, no cache",
        in_flight: 16,
        cache: 0,
    },
    Client {
        name: "16 in flight + 64 MiB cache",
        in_flight: 16,
        cache: 64 << 20,
    },
];

fn open(uri: &NbdUri, c: Client) -> Arc<CachedExport> {
    let opts = NbdOptions {
        writable: true,
        max_in_flight: c.in_flight,
        ..NbdOptions::default()
    };
    Arc::new(CachedExport::new(
        NbdDevice::open(uri, opts).expect("open the export"),
        c.cache,
    ))
}

fn seq_write(dev: &dyn BlockDevice) {
    let buf = vec![0x5au8; ACCESS];
    for i in 0..SEQ / ACCESS {
        dev.write_at((i * ACCESS) as u64, &buf).unwrap();
    }
    dev.flush().unwrap();
}

fn seq_read(dev: &dyn BlockDevice) {
    let mut buf = vec![0u8; ACCESS];
    for i in 0..SEQ / ACCESS {
        dev.read_at((i * ACCESS) as u64, &mut buf).unwrap();
    }
}

fn small_files(dev: Box<dyn BlockDevice>) {
    let opts = MkfsOptions {
        size_bytes: Some(64 << 20),
        ..MkfsOptions::default()
    };
    mkfs(&*dev, &opts).unwrap();
    let fs = Filesystem::open(dev, OpenOptions::default()).unwrap();
    let attr = Attr {
        perm: 0o644,
        uid: 0,
        gid: 0,
    };
    for i in 0..200usize {
        let f = fs
            .create(ROOT_INO, format!("f{i}").as_bytes(), NodeKind::Regular, attr)
            .unwrap();
        fs.write(f.ino, 0, &vec![i as u8; 2048 + (i * 709) % 14336]).unwrap();
    }
    fs.sync().unwrap();
    fs.unmount().unwrap();
}

/// The median time of `RUNS` runs of `f` on a fresh device each, and the
/// requests the last run sent.
fn median(uri: &NbdUri, c: Client, f: impl Fn(&Arc<CachedExport>) -> Duration) -> (Duration, NbdStats) {
    let mut t = Vec::new();
    let mut sent = NbdStats::default();
    for _ in 0..RUNS {
        let dev = open(uri, c);
        t.push(f(&dev));
        sent = dev.cache().inner().stats();
    }
    t.sort();
    (t[RUNS / 2], sent)
}

fn timed(f: impl FnOnce()) -> Duration {
    let start = Instant::now();
    f();
    start.elapsed()
}

fn main() {
    let uri = std::env::args().nth(1).expect("usage: nbd_latency URI");
    let uri = NbdUri::parse(&uri).unwrap();
    println!(
        "| client | seq write 16 MiB | seq read 16 MiB | small files | small files: NBD writes / flushes / reads |"
    );
    println!("|---|---|---|---|---|");
    for c in CLIENTS {
        let (w, _) = median(&uri, c, |d| timed(|| seq_write(&**d)));
        let (r, _) = median(&uri, c, |d| timed(|| seq_read(&**d)));
        let (s, sent) = median(&uri, c, |d| timed(|| small_files(Box::new(d.clone()))));
        let mib_s = |d: Duration| SEQ as f64 / (1 << 20) as f64 / d.as_secs_f64();
        println!(
            "| {} | {:.0} ms ({:.1} MiB/s) | {:.0} ms ({:.1} MiB/s) | {:.0} ms | {} / {} / {} |",
            c.name,
            w.as_secs_f64() * 1e3,
            mib_s(w),
            r.as_secs_f64() * 1e3,
            mib_s(r),
            s.as_secs_f64() * 1e3,
            sent.writes,
            sent.flushes,
            sent.reads,
        );
    }
}
