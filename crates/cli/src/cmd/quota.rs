//! `ext4kit quota IMAGE` (usage and limits per id, like `repquota`; `--set`
//! changes one id's limits) and `ext4kit project IMAGE PATH [ID]
//! [--inherit]` (an inode's project id and PROJINHERIT flag). The
//! accounting is the engine's (`ext4kit_engine` quota module). `quota
//! --json` prints the same for programs (docs/json.md).

use anyhow::{Context, Result, bail};
use ext4kit_engine::QuotaLimits;
use ext4kit_format::quota::QuotaType;
use serde_json::{Value, json};

use crate::ImageArgs;
use crate::open::{open_ro, open_rw};

/// Arguments of `quota`.
#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    image: ImageArgs,
    /// Set the limits of ID in this quota type (`user`, `group`,
    /// `project`), e.g. `--set user 1000`.
    #[arg(long, num_args = 2, value_names = ["TYPE", "ID"])]
    set: Option<Vec<String>>,
    /// Block soft limit, KiB (0: none).
    #[arg(long, default_value_t = 0)]
    blocks_soft: u64,
    /// Block hard limit, KiB (0: none).
    #[arg(long, default_value_t = 0)]
    blocks_hard: u64,
    /// Inode soft limit (0: none).
    #[arg(long, default_value_t = 0)]
    inodes_soft: u64,
    /// Inode hard limit (0: none).
    #[arg(long, default_value_t = 0)]
    inodes_hard: u64,
    /// An array of quota types and their ids, for programs (docs/json.md).
    #[arg(long, conflicts_with = "set")]
    json: bool,
}

/// Reports every quota type, or sets one id's limits.
pub fn run(a: Args) -> Result<()> {
    if let Some(set) = &a.set {
        let t = QuotaType::from_name(&set[0]).with_context(|| format!("{}: not user, group or project", set[0]))?;
        let id: u32 = set[1].parse().with_context(|| format!("{}: not an id", set[1]))?;
        let l = QuotaLimits {
            blocks_soft: a.blocks_soft,
            blocks_hard: a.blocks_hard,
            inodes_soft: a.inodes_soft,
            inodes_hard: a.inodes_hard,
        };
        let fs = open_rw(&a.image)?;
        fs.set_quota_limits(t, id, l)?;
        fs.unmount()?;
        return Ok(());
    }
    let fs = open_ro(&a.image)?;
    let mut any = false;
    let mut types = Vec::new();
    for t in QuotaType::ALL {
        let Some((info, entries)) = fs.quota_entries(t)? else {
            continue;
        };
        any = true;
        if a.json {
            let ids: Vec<Value> = entries
                .iter()
                .map(|d| {
                    json!({
                        "id": d.id,
                        "space_bytes": d.curspace,
                        "blocks_soft_kib": d.bsoftlimit,
                        "blocks_hard_kib": d.bhardlimit,
                        "inodes": d.curinodes,
                        "inodes_soft": d.isoftlimit,
                        "inodes_hard": d.ihardlimit,
                    })
                })
                .collect();
            types.push(json!({
                "type": t.name(),
                "block_grace_secs": info.bgrace,
                "inode_grace_secs": info.igrace,
                "ids": ids,
            }));
            continue;
        }
        println!(
            "*** {} quotas (block grace {}s, inode grace {}s)",
            t.name(),
            info.bgrace,
            info.igrace
        );
        println!(
            "{:>10} {:>12} {:>10} {:>10} {:>10} {:>10} {:>10}",
            "id", "KiB used", "soft", "hard", "inodes", "soft", "hard"
        );
        for d in entries {
            println!(
                "{:>10} {:>12} {:>10} {:>10} {:>10} {:>10} {:>10}",
                d.id,
                d.curspace.div_ceil(1024),
                d.bsoftlimit,
                d.bhardlimit,
                d.curinodes,
                d.isoftlimit,
                d.ihardlimit
            );
        }
    }
    if !any {
        bail!("{}: no quota files (mkfs -O quota)", a.image.image.display());
    }
    if a.json {
        outln!("{}", serde_json::to_string_pretty(&Value::Array(types))?);
    }
    Ok(())
}

/// Arguments of `project`.
#[derive(clap::Args)]
pub struct ProjectArgs {
    #[command(flatten)]
    image: ImageArgs,
    /// The file or directory.
    path: String,
    /// The project id to set (without it, the current one is shown).
    id: Option<u32>,
    /// Set PROJINHERIT (directories: what is created inside gets the
    /// project).
    #[arg(long)]
    inherit: bool,
}

/// Shows or sets an inode's project.
pub fn project(a: ProjectArgs) -> Result<()> {
    if a.id.is_none() && !a.inherit {
        let fs = open_ro(&a.image)?;
        let ino = fs.resolve(a.path.as_bytes())?.ino;
        let (id, inherit) = fs.project(ino)?;
        println!("{id}{}", if inherit { " inherit" } else { "" });
        return Ok(());
    }
    let fs = open_rw(&a.image)?;
    let ino = fs.resolve(a.path.as_bytes())?.ino;
    fs.set_project(ino, a.id, a.inherit.then_some(true))?;
    fs.unmount()?;
    Ok(())
}
