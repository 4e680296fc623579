//! What maintaining the itree costs the CPU (issue 16: creates at most 15 %
//! slower with the second tree at 1,000,000 entries; a mass delete at least
//! as fast as without it). Seed 003's own implementation made creates 40 %
//! slower and could not make deletes faster, coalescing on every removal.
//!
//! On fresh in-memory images (4 KiB blocks, journal), with and without the
//! `itree` feature, alternating rounds: N files created in one directory,
//! the directory listed as a mount's `getdents` lists it (hash order; an
//! itree's inode order), then every name unlinked in that order (the order
//! `rm -r` takes). `--cache` sets the engine's block cache (default 64 MiB,
//! the engine's own default): the itree adds its nodes to what the cache
//! must hold. Printed per variant, medians over the rounds: the
//! writing thread's CPU ns per create, per listed name and per unlink, and
//! the ratios itree / htree. The disk-model side of the same experiments
//! is `ext4kit bench readdir-stat --compare features=itree`.
//!
//! `cargo run --release -p ext4kit-engine --example itree_cost -- [--rounds N] [--cache MIB] [--only htree|itree] [ENTRIES]`
//! (`--only` runs one side, for a profiler)
//! (default: 3 rounds of 1,000,000)

use std::error::Error;

use ext4kit_engine::device::MemDevice;
use ext4kit_engine::mkfs::{MkfsOptions, mkfs};
use ext4kit_engine::{Attr, Filesystem, NodeKind, OpenOptions, ROOT_INO};

const ATTR: Attr = Attr {
    perm: 0o644,
    uid: 0,
    gid: 0,
};

/// A table row: its label and the figure it shows.
type Row = (&'static str, fn(&Run) -> f64);

/// CPU ns per operation of one run.
#[derive(Clone, Copy)]
struct Run {
    create: f64,
    list: f64,
    unlink: f64,
    /// Extents of the full directory: itree nodes in its way fragment it.
    extents: usize,
}

fn image(entries: u64, itree: bool) -> Result<MemDevice, Box<dyn Error>> {
    let bytes = (entries * 400 + (256 << 20)).next_multiple_of(1 << 20);
    let mut buf = vec![0u8; bytes as usize];
    for page in buf.chunks_mut(4096) {
        page[0] = 0xa5;
    }
    let dev = MemDevice::new(buf);
    let mut opts = MkfsOptions {
        block_size: Some(4096),
        inode_count: Some(entries + 4096),
        uuid: Some([7; 16]),
        hash_seed: Some([9; 16]),
        timestamp: Some(1_700_000_000),
        ..MkfsOptions::default()
    };
    if itree {
        opts.add_features("itree");
    }
    mkfs(&dev, &opts)?;
    Ok(dev)
}

/// The names of `dir` as `getdents` on a mount returns them: hash order
/// for an htree, inode order for an itree.
fn listing(fs: &Filesystem, dir: u32) -> Result<Vec<Vec<u8>>, Box<dyn Error>> {
    let inode = fs.inode(dir)?;
    let mut stream = fs.dir_stream(&inode)?;
    let mut out = Vec::new();
    fs.read_dir_from(&inode, &mut stream, 0, |e, _| {
        if e.name != b"." && e.name != b".." {
            out.push(e.name.clone());
        }
        Ok(true)
    })?;
    Ok(out)
}

fn run(entries: u64, itree: bool, cache_mib: usize) -> Result<Run, Box<dyn Error>> {
    let opts = OpenOptions {
        cache_bytes: cache_mib << 20,
        ..OpenOptions::default()
    };
    let fs = Filesystem::open(Box::new(image(entries, itree)?), opts)?;
    let dir = fs.create(ROOT_INO, b"big", NodeKind::Directory, ATTR)?.ino;
    let t = thread_cpu_ns();
    for i in 0..entries {
        fs.create(dir, format!("file-{i:08}").as_bytes(), NodeKind::Regular, ATTR)?;
    }
    fs.sync()?;
    let create = (thread_cpu_ns() - t) / entries as f64;
    let runs = fs.all_runs(&fs.inode(dir)?)?;
    let extents = runs.len();
    if std::env::var_os("DBG").is_some() {
        eprintln!("itree {itree}: {:?}", &runs[..runs.len().min(12)]);
    }
    let t = thread_cpu_ns();
    let names = listing(&fs, dir)?;
    let list = (thread_cpu_ns() - t) / entries as f64;
    let t = thread_cpu_ns();
    for name in &names {
        fs.unlink(dir, name)?;
    }
    fs.sync()?;
    let unlink = (thread_cpu_ns() - t) / entries as f64;
    Ok(Run {
        create,
        list,
        unlink,
        extents,
    })
}

fn main() -> Result<(), Box<dyn Error>> {
    let mut args = std::env::args().skip(1);
    let (mut rounds, mut entries, mut cache_mib) = (3usize, 1_000_000u64, 64usize);
    let mut only: Option<String> = None;
    while let Some(a) = args.next() {
        match a.as_str() {
            "--rounds" => rounds = args.next().ok_or("--rounds N")?.parse()?,
            "--cache" => cache_mib = args.next().ok_or("--cache MIB")?.parse()?,
            "--only" => only = Some(args.next().ok_or("--only htree|itree")?),
            n => entries = n.parse()?,
        }
    }
    let (mut htree, mut itree) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        for (itree_on, runs) in [(false, &mut htree), (true, &mut itree)] {
            let name = if itree_on { "itree" } else { "htree" };
            if only.as_deref().is_none_or(|o| o == name) {
                runs.push(run(entries, itree_on, cache_mib)?);
            }
        }
        eprintln!("round {} of {rounds} done", round + 1);
    }
    if only.is_some() {
        return Ok(());
    }
    let extents = |runs: &[Run]| runs.first().map_or(0, |r| r.extents);
    println!(
        "{entries} entries, {cache_mib} MiB block cache, {rounds} rounds, medians of the writing thread's CPU ns per operation"
    );
    println!(
        "directory extents: htree {}, htree + itree {}",
        extents(&htree),
        extents(&itree)
    );
    println!("| | htree | htree + itree | ratio |");
    println!("|---|---:|---:|---:|");
    let rows: [Row; 3] = [
        ("create", |r| r.create),
        ("readdir (per name)", |r| r.list),
        ("unlink, readdir order", |r| r.unlink),
    ];
    for (name, f) in rows {
        let (h, i) = (
            median(htree.iter().map(f).collect()),
            median(itree.iter().map(f).collect()),
        );
        println!("| {name} | {h:.0} | {i:.0} | {:.3} |", i / h);
    }
    Ok(())
}

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
