//! `ext4kit frag IMAGE [PATH…]`: how fragmented the files and the free
//! space are (`e4defrag -c` and `e2freefrag` in one): per file its extents
//! against the fewest its size allows and a 0–100 score, then the free
//! space as a histogram of run lengths. Without paths, every regular file.

use anyhow::{Result, bail};
use ext4kit_engine::frag::{FileFrag, FreeSpace};
use ext4kit_format::inode::FileType;
use serde_json::json;

use crate::ImageArgs;
use crate::open::open_ro;

/// Arguments of `frag`.
#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    image: ImageArgs,
    /// Files to measure [default: every regular file].
    paths: Vec<String>,
    /// Print JSON instead of tables.
    #[arg(long)]
    json: bool,
}

/// Measures and prints.
pub fn run(a: Args) -> Result<()> {
    let fs = open_ro(&a.image)?;
    let files = if a.paths.is_empty() {
        fs.regular_files()?
    } else {
        let mut v = Vec::new();
        for p in &a.paths {
            let inode = fs.resolve(p.as_bytes())?;
            if inode.file_type()? != FileType::Regular {
                bail!("{p}: not a regular file");
            }
            v.push((p.clone(), inode));
        }
        v
    };
    let mut measured = Vec::with_capacity(files.len());
    for (p, inode) in &files {
        measured.push((p.as_str(), fs.file_frag(inode)?));
    }
    let free = fs.free_space()?;
    if a.json {
        outln!(
            "{}",
            serde_json::to_string_pretty(&to_json(&measured, &free, fs.block_size()))?
        );
    } else {
        print_files(&measured)?;
        print_free(&free, fs.block_size() as u64)?;
    }
    Ok(())
}

fn to_json(files: &[(&str, FileFrag)], free: &FreeSpace, block_size: usize) -> serde_json::Value {
    let files: Vec<_> = files
        .iter()
        .map(|(p, f)| json!({"path": p, "blocks": f.blocks, "extents": f.extents, "best": f.best, "score": f.score}))
        .collect();
    let buckets: Vec<_> = free
        .buckets
        .iter()
        .map(|b| json!({"min_blocks": b.min, "max_blocks": b.max, "runs": b.runs, "blocks": b.blocks}))
        .collect();
    json!({
        "block_size": block_size,
        "files": files,
        "free": {
            "total_blocks": free.total_blocks,
            "free_blocks": free.free_blocks,
            "free_runs": free.free_runs,
            "largest_run": free.largest_run,
            "histogram": buckets,
        },
    })
}

fn print_files(files: &[(&str, FileFrag)]) -> Result<()> {
    outln!("{:>10} {:>8} {:>5} {:>5}  path", "blocks", "extents", "best", "score");
    for (p, f) in files {
        outln!("{:>10} {:>8} {:>5} {:>5}  {p}", f.blocks, f.extents, f.best, f.score);
    }
    let n = files.len().max(1) as f64;
    let extents: u64 = files.iter().map(|(_, f)| f.extents).sum();
    let worse = files.iter().filter(|(_, f)| f.extents > f.best).count();
    outln!(
        "\n{}, {:.2} extents per file, {} ({:.1} %) in more extents than their size needs",
        crate::cmd::util::count(files.len() as u64, "file", "files"),
        extents as f64 / n,
        worse,
        100.0 * worse as f64 / n
    );
    Ok(())
}

fn print_free(free: &FreeSpace, bs: u64) -> Result<()> {
    let pct = |b: u64| 100.0 * b as f64 / free.free_blocks.max(1) as f64;
    outln!(
        "\nFree: {} of {} blocks in {} runs; the longest is {} blocks ({} KiB)",
        free.free_blocks,
        free.total_blocks,
        free.free_runs,
        free.largest_run,
        free.largest_run * bs / 1024
    );
    outln!(
        "{:>12} {:>12} {:>10} {:>12} {:>8}",
        "run from",
        "to (blocks)",
        "runs",
        "blocks",
        "% free"
    );
    for b in &free.buckets {
        outln!(
            "{:>12} {:>12} {:>10} {:>12} {:>7.2}%",
            b.min,
            b.max,
            b.runs,
            b.blocks,
            pct(b.blocks)
        );
    }
    Ok(())
}
