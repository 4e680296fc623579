//! CPU cost of the page cache per request, over a memory device so that
//! only the cache is measured: ns per cached 4 KiB read and write, a
//! 512-byte read, the same 4 KiB read on the bare device, a cold 64 KiB
//! miss, and cached reads on 2 threads at once (the mutex's cost).
//!
//! `cargo run --release -p ext4kit-engine --example page_cache_speed -- [ROUNDS]`

use std::hint::black_box;
use std::sync::Arc;
use std::time::Instant;

use ext4kit_engine::device::{BlockDevice, MemDevice, PageCache};

const PAGE: u64 = 4096;
/// Pages held: 64 MiB, warm throughout.
const PAGES: u64 = 16 << 10;

/// Page numbers in a scattered but fixed order (an LCG), so the index is
/// probed as a random workload would, without timing a generator.
fn order(n: usize) -> Vec<u64> {
    let mut x = 1u64;
    (0..n)
        .map(|_| {
            x = x
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (x >> 33) % PAGES
        })
        .collect()
}

/// ns per call of `f` over `pages`, best of 5 passes.
fn per_call(pages: &[u64], mut f: impl FnMut(u64)) -> f64 {
    (0..5)
        .map(|_| {
            let t = Instant::now();
            for &p in pages {
                f(p);
            }
            t.elapsed().as_nanos() as f64 / pages.len() as f64
        })
        .fold(f64::INFINITY, f64::min)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let rounds: usize = std::env::args().nth(1).map_or(Ok(1 << 20), |s| s.parse())?;
    let pages = order(rounds);
    // Written bytes, not calloc's zero pages (which all map one physical
    // page and would make the bare device look as fast as L1).
    let image: Vec<u8> = (0..2 * PAGES * PAGE).map(|i| (i % 251) as u8).collect();
    let mem = Arc::new(MemDevice::new(image));
    let cache = PageCache::new(mem.clone(), PAGES * PAGE);
    let mut buf = vec![0u8; PAGE as usize];
    for p in 0..PAGES {
        cache.read_at(p * PAGE, &mut buf)?;
    }
    let read = per_call(&pages, |p| cache.read_at(p * PAGE, black_box(&mut buf)).unwrap());
    let small = per_call(&pages, |p| {
        cache.read_at(p * PAGE + 512, black_box(&mut buf[..512])).unwrap()
    });
    let write = per_call(&pages, |p| cache.write_at(p * PAGE, black_box(&buf)).unwrap());
    let bare = per_call(&pages, |p| mem.read_at(p * PAGE, black_box(&mut buf)).unwrap());
    let s = cache.stats();
    assert_eq!(s.inner_writes, 0, "every write stayed in memory");
    cache.flush()?;

    // Misses: 64 KiB runs beyond the held pages, each evicting 16 pages.
    let cold = PageCache::new(mem.clone(), 1 << 20);
    let mut run = vec![0u8; 16 * PAGE as usize];
    let t = Instant::now();
    let n = PAGES / 16;
    for i in 0..n {
        cold.read_at(i * 16 * PAGE, black_box(&mut run))?;
    }
    let miss = t.elapsed().as_nanos() as f64 / n as f64;

    let shared = Arc::new(cache);
    let t = Instant::now();
    std::thread::scope(|sc| {
        for half in pages.chunks(pages.len().div_ceil(2)) {
            let c = shared.clone();
            sc.spawn(move || {
                let mut buf = vec![0u8; PAGE as usize];
                for &p in half {
                    c.read_at(p * PAGE, black_box(&mut buf)).unwrap();
                }
            });
        }
    });
    let two = t.elapsed().as_nanos() as f64 / pages.len() as f64;

    println!(
        "page cache of {} MiB, {} requests per figure",
        (PAGES * PAGE) >> 20,
        pages.len()
    );
    println!("cached 4 KiB read      {read:7.0} ns");
    println!("cached 512 B read      {small:7.0} ns");
    println!("cached 4 KiB write     {write:7.0} ns");
    println!("bare MemDevice 4 KiB   {bare:7.0} ns");
    println!("cold 64 KiB read       {miss:7.0} ns (one inner read, 16 evictions)");
    println!("cached 4 KiB read, 2 threads: {two:.0} ns per read overall");
    Ok(())
}
