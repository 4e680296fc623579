//! `ext4kit layout IMAGE PATH… [--plot FILE]`: where files' blocks lie —
//! each extent as logical → physical, and a plot of logical against
//! physical block (seed 001's figures 3, 4, 7 and 8: packed small files
//! against gaps, one streaming file against interleaved ones); `--json`
//! for programs (docs/json.md).

use std::path::PathBuf;

use anyhow::{Result, bail};
use ext4kit_bench::plot::{Segments, segments};
use ext4kit_engine::Run;
use ext4kit_format::inode::FileType;
use serde_json::{Value, json};

use crate::ImageArgs;
use crate::open::open_ro;

/// Arguments of `layout`.
#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    image: ImageArgs,
    /// Files inside the image.
    #[arg(required = true)]
    paths: Vec<String>,
    /// Also plot the extents to this .svg or .png, one colour per file.
    #[arg(long, value_name = "FILE")]
    plot: Option<PathBuf>,
    /// An array of files and their runs, for programs (docs/json.md).
    #[arg(long)]
    json: bool,
}

/// Prints each file's extents and plots them.
pub fn run(a: Args) -> Result<()> {
    let fs = open_ro(&a.image)?;
    let mut groups = Vec::new();
    let mut files = Vec::new();
    for p in &a.paths {
        let inode = fs.resolve(p.as_bytes())?;
        if inode.file_type()? != FileType::Regular {
            bail!("{p}: not a regular file");
        }
        let runs = fs.all_runs(&inode)?;
        if a.json {
            files.push(file_json(p, &runs));
        } else {
            print_runs(p, &runs)?;
        }
        let point = |l: u64, ph: u64| (l as f64, ph as f64);
        groups.push(Segments {
            name: p.clone(),
            segments: runs
                .iter()
                .map(|r| (point(r.logical, r.physical), point(r.end(), r.physical + r.len)))
                .collect(),
        });
    }
    if let Some(path) = &a.plot {
        let title = format!("{}: where the blocks lie", a.image.image.display());
        segments(path, &title, "logical block", "physical block", &groups)?;
    }
    if a.json {
        outln!("{}", serde_json::to_string_pretty(&Value::Array(files))?);
    }
    Ok(())
}

fn print_runs(p: &str, runs: &[Run]) -> Result<()> {
    outln!("{p}: {} runs", runs.len());
    for r in runs {
        let flag = if r.unwritten { " unwritten" } else { "" };
        outln!(
            "  {}..{} -> {}..{} ({} blocks){flag}",
            r.logical,
            r.end() - 1,
            r.physical,
            r.physical + r.len - 1,
            r.len
        );
    }
    Ok(())
}

fn file_json(p: &str, runs: &[Run]) -> Value {
    let runs: Vec<Value> = runs
        .iter()
        .map(|r| {
            json!({
                "logical": r.logical,
                "physical": r.physical,
                "blocks": r.len,
                "unwritten": r.unwritten,
            })
        })
        .collect();
    json!({ "path": p, "runs": runs })
}
