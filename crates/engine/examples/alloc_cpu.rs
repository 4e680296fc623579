//! Allocation CPU cost through 4 KiB writes (issue 15: under 1 µs per
//! block; seed 001 credits mballoc's CPU saving with a system going from
//! 800 to 1,500 MB/s). One file is written in 4 KiB writes, then synced,
//! on a fresh image in memory, under four policies side by side: mballoc
//! and the ext3 allocator, each with and without delayed allocation.
//! Printed per policy, medians over the rounds: the whole path's ns per
//! block (writes and write-back; wall, and the writing thread's CPU
//! time), the allocator's own ns per block
//! (`MbStats::alloc_ns` over the blocks it returned), its requests and
//! blocks per request.
//!
//! `cargo run --release -p ext4kit-engine --example alloc_cpu -- [--rounds N] [--only NAME] [MIB ...]`
//!
//! (default: 3 rounds of 1024 MiB; `64 256 1024` shows how flat it is;
//! `--only` keeps the policies whose name contains NAME, for a profiler).

use std::error::Error;
use std::process::Command;
use std::time::Instant;

use ext4kit_engine::device::MemDevice;
use ext4kit_engine::mkfs::{MkfsOptions, mkfs};
use ext4kit_engine::{AllocOptions, Attr, BlockAllocator, Filesystem, NodeKind, OpenOptions, ROOT_INO};

const BLOCK: u64 = 4096;

/// The policies compared: name and options.
fn policies() -> [(&'static str, AllocOptions); 4] {
    let with = |blocks, delalloc| AllocOptions {
        blocks,
        delalloc,
        ..AllocOptions::default()
    };
    [
        ("mballoc delalloc", with(BlockAllocator::Mballoc, true)),
        ("mballoc nodelalloc", with(BlockAllocator::Mballoc, false)),
        ("ext3 delalloc", with(BlockAllocator::Ext3, true)),
        ("ext3 nodelalloc", with(BlockAllocator::Ext3, false)),
    ]
}

/// One run's figures.
#[derive(Clone, Copy)]
struct Run {
    total_ns: f64,
    /// The writing thread's time on a CPU, per block: the whole path
    /// without the time other programs on a shared machine took.
    cpu_ns: f64,
    alloc_ns: f64,
    requests: u64,
    alloc_blocks: u64,
    extents: u64,
}

/// A fresh ext4 (mkfs defaults, 4 KiB blocks, with its journal) in memory,
/// room for `mib` of data and its metadata. Every page of the buffer is
/// touched first, so the first write of each costs no page fault: the
/// figures are the engine's, not the host's zero-fill.
fn image(mib: u64) -> Result<MemDevice, Box<dyn Error>> {
    let bytes = (mib + mib / 4 + 128) << 20;
    let mut buf = vec![0u8; bytes as usize];
    for page in buf.chunks_mut(BLOCK as usize) {
        page[0] = 0xa5;
    }
    let dev = MemDevice::new(buf);
    let opts = MkfsOptions {
        block_size: Some(BLOCK as u32),
        uuid: Some([7; 16]),
        hash_seed: Some([9; 16]),
        timestamp: Some(1_700_000_000),
        ..MkfsOptions::default()
    };
    mkfs(&dev, &opts)?;
    Ok(dev)
}

/// Writes `mib` MiB to one open file in 4 KiB writes, syncs, and reads the
/// allocator's counts.
fn run(mib: u64, alloc: AllocOptions) -> Result<Run, Box<dyn Error>> {
    let dev = image(mib)?;
    let open = OpenOptions {
        alloc,
        ..OpenOptions::default()
    };
    let fs = Filesystem::open(Box::new(dev), open)?;
    let attr = Attr {
        perm: 0o644,
        uid: 0,
        gid: 0,
    };
    let f = fs.create(ROOT_INO, b"big", NodeKind::Regular, attr)?.ino;
    fs.open_file(f)?;
    let blocks = (mib << 20) / BLOCK;
    let mut data = vec![0u8; BLOCK as usize];
    let before = fs.mb_stats();
    let cpu0 = thread_cpu_ns();
    let start = Instant::now();
    for k in 0..blocks {
        data[..8].copy_from_slice(&k.to_le_bytes());
        fs.write(f, k * BLOCK, &data)?;
    }
    fs.sync()?;
    let total = start.elapsed().as_nanos() as f64;
    let cpu = thread_cpu_ns() - cpu0;
    let after = fs.mb_stats();
    fs.release_file(f)?;
    let frag = fs.file_frag(&fs.inode(f)?)?;
    if frag.blocks != blocks || after.data_blocks - before.data_blocks != blocks {
        return Err(format!("{blocks} blocks written, {} mapped, {after:?}", frag.blocks).into());
    }
    fs.unmount()?;
    Ok(Run {
        total_ns: total / blocks as f64,
        cpu_ns: cpu / blocks as f64,
        alloc_ns: (after.alloc_ns - before.alloc_ns) as f64 / blocks as f64,
        requests: after.data_requests - before.data_requests,
        alloc_blocks: blocks,
        extents: frag.extents,
    })
}

/// The calling thread's time on a CPU in ns, from the scheduler's own
/// account (`/proc/thread-self/schedstat`, first field); NaN where there
/// is none, so the column says so rather than showing a wrong figure.
fn thread_cpu_ns() -> f64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(f64::NAN)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// What the counter itself costs per request: one pair of clock reads.
fn clock_pair_ns() -> f64 {
    let n = 1_000_000;
    let t = Instant::now();
    let mut sink = 0u128;
    for _ in 0..n {
        sink += std::hint::black_box(Instant::now()).elapsed().as_nanos();
    }
    std::hint::black_box(sink);
    t.elapsed().as_nanos() as f64 / f64::from(n)
}

/// Runs policy `i` on `mib` in a child process of this program and reads
/// back its figures: each run starts from a fresh heap, so one run's
/// freed memory (returned to the kernel or not) does not speed up or slow
/// down the next one's page faults, which otherwise move the whole path's
/// figure by a factor of two depending on the order of the runs.
fn run_in_child(i: usize, mib: u64) -> Result<Run, Box<dyn Error>> {
    let out = Command::new(std::env::current_exe()?)
        .args(["--child", &i.to_string(), &mib.to_string()])
        .output()?;
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned().into());
    }
    let text = String::from_utf8(out.stdout)?;
    let f: Vec<f64> = text.split_whitespace().map(str::parse).collect::<Result<_, _>>()?;
    let [total_ns, cpu_ns, alloc_ns, requests, blocks, extents] = f[..] else {
        return Err(format!("child printed {text:?}").into());
    };
    Ok(Run {
        total_ns,
        cpu_ns,
        alloc_ns,
        requests: requests as u64,
        alloc_blocks: blocks as u64,
        extents: extents as u64,
    })
}

fn main() -> Result<(), Box<dyn Error>> {
    let mut rounds = 3;
    let mut only = String::new();
    let mut sizes = Vec::new();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--rounds" => rounds = args.next().ok_or("--rounds N")?.parse()?,
            "--only" => only = args.next().ok_or("--only NAME")?,
            "--child" => {
                let i: usize = args.next().ok_or("--child I MIB")?.parse()?;
                let mib: u64 = args.next().ok_or("--child I MIB")?.parse()?;
                let (_, alloc) = policies().get(i).copied().ok_or("no such policy")?;
                let r = run(mib, alloc)?;
                println!(
                    "{} {} {} {} {} {}",
                    r.total_ns, r.cpu_ns, r.alloc_ns, r.requests, r.alloc_blocks, r.extents
                );
                return Ok(());
            }
            mib => sizes.push(mib.parse::<u64>()?),
        }
    }
    if sizes.is_empty() {
        sizes.push(1024);
    }
    if rounds == 0 {
        return Err("--rounds must be at least 1".into());
    }
    println!(
        "one file in 4 KiB writes, then sync; median of {rounds} rounds, each run in a \
         process of its own; a clock-read pair costs {:.0} ns",
        clock_pair_ns()
    );
    println!();
    println!(
        "| MiB | policy | whole path wall ns/block | MB/s | whole path CPU ns/block | allocator ns/block | requests | blocks/request | extents |"
    );
    println!("|---:|---|---:|---:|---:|---:|---:|---:|---:|");
    let chosen: Vec<_> = (0..policies().len())
        .filter(|&i| policies()[i].0.contains(&only))
        .collect();
    for &mib in &sizes {
        let mut runs: Vec<Vec<Run>> = vec![Vec::new(); chosen.len()];
        // Policies alternate within a round, so a drift of the machine's
        // speed touches them all alike.
        for _ in 0..rounds {
            for (k, &i) in chosen.iter().enumerate() {
                runs[k].push(run_in_child(i, mib)?);
            }
        }
        for (&i, rs) in chosen.iter().zip(runs) {
            let total = median(rs.iter().map(|r| r.total_ns).collect());
            let cpu = median(rs.iter().map(|r| r.cpu_ns).collect());
            let alloc = median(rs.iter().map(|r| r.alloc_ns).collect());
            let last = rs[rs.len() - 1];
            println!(
                "| {mib} | {} | {total:.0} | {:.0} | {cpu:.0} | {alloc:.1} | {} | {:.1} | {} |",
                policies()[i].0,
                BLOCK as f64 * 1e3 / total,
                last.requests,
                last.alloc_blocks as f64 / last.requests as f64,
                last.extents,
            );
        }
    }
    Ok(())
}
