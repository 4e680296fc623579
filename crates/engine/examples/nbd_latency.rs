//! How much requests in flight recover over a slow NBD link: sequential
//! write and read of 16 MiB (1 MiB accesses) and a small-file workload
//! (mkfs, 200 files of 2–16 KiB, sync, unmount) on an export, each with
//! 1 request in flight (a naive client) and with 16. Whole-process
//! figures are not these: each is the median of `RUNS` timed runs inside
//! one process.
//!
//! `cargo run --release -p ext4kit-engine --example nbd_latency -- URI`
//! against, for instance, `nbdkit -U SOCK --filter=delay memory 64M
//! rdelay=1ms wdelay=1ms` (the export must hold at least 64 MiB).

use std::time::{Duration, Instant};

use ext4kit_engine::device::{NbdDevice, NbdOptions, nbd::NbdUri};
use ext4kit_engine::mkfs::{MkfsOptions, mkfs};
use ext4kit_engine::{Attr, BlockDevice, Filesystem, NodeKind, OpenOptions, ROOT_INO};

const RUNS: usize = 3;
const SEQ: usize = 16 << 20;
const ACCESS: usize = 1 << 20;

fn open(uri: &NbdUri, in_flight: usize) -> NbdDevice {
    let opts = NbdOptions {
        writable: true,
        max_in_flight: in_flight,
        ..NbdOptions::default()
    };
    NbdDevice::open(uri, opts).expect("open the export")
}

fn seq_write(dev: &NbdDevice) {
    let buf = vec![0x5au8; ACCESS];
    for i in 0..SEQ / ACCESS {
        dev.write_at((i * ACCESS) as u64, &buf).unwrap();
    }
    dev.flush().unwrap();
}

fn seq_read(dev: &NbdDevice) {
    let mut buf = vec![0u8; ACCESS];
    for i in 0..SEQ / ACCESS {
        dev.read_at((i * ACCESS) as u64, &mut buf).unwrap();
    }
}

fn small_files(dev: NbdDevice) {
    let opts = MkfsOptions {
        size_bytes: Some(64 << 20),
        ..MkfsOptions::default()
    };
    mkfs(&dev, &opts).unwrap();
    let fs = Filesystem::open(Box::new(dev), OpenOptions::default()).unwrap();
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

fn median(mut f: impl FnMut() -> Duration) -> Duration {
    let mut t: Vec<Duration> = (0..RUNS).map(|_| f()).collect();
    t.sort();
    t[RUNS / 2]
}

fn timed(f: impl FnOnce()) -> Duration {
    let start = Instant::now();
    f();
    start.elapsed()
}

fn main() {
    let uri = std::env::args().nth(1).expect("usage: nbd_latency URI");
    let uri = NbdUri::parse(&uri).unwrap();
    println!("| requests in flight | seq write 16 MiB | seq read 16 MiB | small files (mkfs + 200 files + sync) |");
    println!("|---|---|---|---|");
    for n in [1usize, 16] {
        let w = median(|| {
            let dev = open(&uri, n);
            timed(|| seq_write(&dev))
        });
        let r = median(|| {
            let dev = open(&uri, n);
            timed(|| seq_read(&dev))
        });
        let s = median(|| {
            let dev = open(&uri, n);
            timed(|| small_files(dev))
        });
        let mib_s = |d: Duration| SEQ as f64 / (1 << 20) as f64 / d.as_secs_f64();
        println!(
            "| {n} | {:.0} ms ({:.1} MiB/s) | {:.0} ms ({:.1} MiB/s) | {:.0} ms |",
            w.as_secs_f64() * 1e3,
            mib_s(w),
            r.as_secs_f64() * 1e3,
            mib_s(r),
            s.as_secs_f64() * 1e3
        );
    }
}
