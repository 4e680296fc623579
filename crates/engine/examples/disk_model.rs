//! The disk model's fit and cost: prints the hp-sas-10k seek curve fitted
//! to seed 004's figures (target vs model, the table in
//! docs/disk-model.md), its zone rates, the modeled time of a few request
//! patterns, and the model's own CPU time per request.
//!
//! `cargo run --release -p ext4kit-engine --example disk_model -- [REQUESTS]`

use std::io;
use std::time::Instant;

use ext4kit_engine::device::{BlockDevice, DiskModel, DiskProfile};

/// A device the size of the drive that stores nothing, so the timing is
/// the model's alone.
struct Void(u64);

impl BlockDevice for Void {
    fn len(&self) -> u64 {
        self.0
    }
    fn read_at(&self, _: u64, _: &mut [u8]) -> io::Result<()> {
        Ok(())
    }
    fn write_at(&self, _: u64, _: &[u8]) -> io::Result<()> {
        Ok(())
    }
    fn flush(&self) -> io::Result<()> {
        Ok(())
    }
    fn read_only(&self) -> bool {
        false
    }
}

const SIZE: u64 = 146_000_000_000;

/// The request patterns timed: name, and the request for step `i`
/// (offset, true for a write; `None` for a flush).
type Pattern = fn(u64, &mut u64) -> Option<(u64, bool)>;

fn xorshift(s: &mut u64) -> u64 {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    *s
}

fn random_read(_: u64, s: &mut u64) -> Option<(u64, bool)> {
    Some((xorshift(s) % (SIZE / 4096) * 4096, false))
}

fn sequential_read(i: u64, _: &mut u64) -> Option<(u64, bool)> {
    Some((i * 4096 % SIZE, false))
}

fn random_write_flush_every_64(i: u64, s: &mut u64) -> Option<(u64, bool)> {
    (i % 65 != 64).then(|| (xorshift(s) % (SIZE / 4096) * 4096, true))
}

fn run(dev: &dyn BlockDevice, pattern: Pattern, n: u64) -> f64 {
    let mut seed = 0x9E37_79B9_7F4A_7C15;
    let mut buf = [0u8; 4096];
    let t = Instant::now();
    for i in 0..n {
        match pattern(i, &mut seed) {
            Some((off, false)) => dev.read_at(off, &mut buf).unwrap(),
            Some((off, true)) => dev.write_at(off, &buf).unwrap(),
            None => dev.flush().unwrap(),
        }
    }
    t.elapsed().as_nanos() as f64 / n as f64
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let n: u64 = std::env::args().nth(1).map_or(Ok(2_000_000), |s| s.parse())?;
    let profile: DiskProfile = "hp-sas-10k".parse()?;
    let model = DiskModel::new(Void(SIZE), &profile)?;
    let (curve, geo) = (model.seek_curve().unwrap(), model.geometry().unwrap());
    let DiskProfile::Hdd(hdd) = &profile else {
        unreachable!()
    };
    let settle = hdd.settle_ns as f64;
    let ms = |ns: f64| ns / 1e6;
    println!(
        "hp-sas-10k: {} cylinders x {} heads, zones of {:?} sectors/track",
        geo.cylinders, geo.heads, geo.sectors_per_track
    );
    let rates = geo.media_rates();
    println!(
        "media rate {:.1} MB/s (outer) .. {:.1} MB/s (inner)",
        rates[0] as f64 / 1e6,
        rates[rates.len() - 1] as f64 / 1e6
    );
    println!(
        "seek curve (settle excluded): a = {:.1} us, b = {:.4} us, c = {:.1} us, e = {:.5} us/cyl, crossover {:.0} cylinders",
        curve.a / 1e3,
        curve.b / 1e3,
        curve.c / 1e3,
        curve.e / 1e3,
        curve.crossover
    );
    println!("| figure | target | model (curve + {:.1} ms settle) |", ms(settle));
    println!("|---|---|---|");
    println!(
        "| track-to-track (1 cylinder) | {:.3} ms | {:.3} ms |",
        ms(hdd.seek.track_to_track_ns as f64),
        ms(curve.time_ns(1) as f64 + settle)
    );
    println!(
        "| average (random seeks) | {:.3} ms | {:.3} ms |",
        ms(hdd.seek.average_ns as f64),
        ms(curve.mean_over_random_seeks_ns() + settle)
    );
    println!(
        "| full stroke ({} cylinders) | {:.3} ms | {:.3} ms |",
        curve.max_distance,
        ms(hdd.seek.full_stroke_ns as f64),
        ms(curve.time_ns(curve.max_distance) as f64 + settle)
    );
    println!(
        "| (mean over uniform distances, not a target) | - | {:.3} ms |",
        ms(curve.mean_over_uniform_distances_ns() + settle)
    );

    let patterns: [(&str, Pattern); 3] = [
        ("random 4 KiB reads", random_read),
        ("sequential 4 KiB reads", sequential_read),
        ("random 4 KiB writes, flush every 64", random_write_flush_every_64),
    ];
    println!(
        "\n{n} requests per pattern; CPU ns/request is the model's own (time on the model minus on the bare device)"
    );
    println!("| pattern | profile | modeled us/request | CPU ns/request |");
    println!("|---|---|---|---|");
    for (name, pattern) in patterns {
        let bare = run(&Void(SIZE), pattern, n);
        for p in DiskProfile::NAMES {
            let m = DiskModel::new(Void(SIZE), &p.parse()?)?;
            let cpu = run(&m, pattern, n) - bare;
            let s = m.stats();
            println!(
                "| {name} | {p} | {:.1} | {cpu:.0} |",
                s.modeled_ns as f64 / n as f64 / 1e3
            );
        }
    }
    Ok(())
}
