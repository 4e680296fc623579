//! `ext4kit info IMAGE [--json]`: the superblock and a per-group summary,
//! with dumpe2fs's field names.

use anyhow::Result;
use ext4kit_engine::Filesystem;
use serde_json::{Value, json};

use crate::ImageArgs;
use crate::open::open_ro;

/// Arguments of `info`.
#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    image: ImageArgs,
    /// Machine-readable output.
    #[arg(long)]
    json: bool,
    /// Only the superblock, no groups (like `dumpe2fs -h`).
    #[arg(short = 'H', long)]
    header_only: bool,
}

fn uuid(b: &[u8; 16]) -> String {
    let h: Vec<String> = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        h[..4].concat(),
        h[4..6].concat(),
        h[6..8].concat(),
        h[8..10].concat(),
        h[10..].concat()
    )
}

fn summary(fs: &Filesystem) -> Value {
    let sb = fs.superblock();
    let g = fs.geometry();
    let free_blocks = u64::from(sb.s_free_blocks_count_lo.get()) | (u64::from(sb.s_free_blocks_count_hi.get()) << 32);
    let j = fs.journal_info();
    let mut v = json!({
        "volume_name": sb.volume_name(),
        "last_mounted": sb.last_mounted(),
        "uuid": uuid(&sb.s_uuid),
        "magic": format!("{:#06x}", sb.s_magic.get()),
        "revision": sb.s_rev_level.get(),
        "features": g.features.names(),
        "state": if sb.s_state.get() & 1 != 0 { "clean" } else { "not clean" },
        "errors_behaviour": sb.s_errors.get(),
        "inode_count": g.inodes_count,
        "block_count": g.blocks_count,
        "free_blocks": free_blocks,
        "free_inodes": sb.s_free_inodes_count.get(),
        "first_block": g.first_data_block,
        "block_size": g.block_size,
        "blocks_per_group": g.blocks_per_group,
        "inodes_per_group": g.inodes_per_group,
        "inode_size": g.inode_size,
        "desc_size": g.desc_size,
        "group_count": g.group_count,
        "groups_per_flex": g.groups_per_flex,
        "inode_table_blocks_per_group": g.inode_table_blocks,
        "first_inode": g.first_ino,
        "reserved_gdt_blocks": sb.s_reserved_gdt_blocks.get(),
        "default_hash_version": sb.s_def_hash_version,
        "checksum_seed": format!("{:#010x}", sb.csum_seed()),
        "journal": {
            "present": j.present, "inode": j.inode, "external": j.external, "needs_recovery": j.needs_recovery,
            "block_size": j.superblock.as_ref().map(|s| s.block_size),
            "length_blocks": j.superblock.as_ref().map(|s| s.max_len),
            "sequence": j.superblock.as_ref().map(|s| s.sequence),
            "start": j.superblock.as_ref().map(|s| s.start),
            "incompat": j.superblock.as_ref().map(|s| format!("{:#x}", s.incompat)),
            "problem": j.problem,
        },
        "read_only_reason": fs.read_only_reason(),
    });
    if let Some(mmp) = fs.mmp_status() {
        v["mmp"] = mmp_summary(&mmp);
    }
    v
}

/// The MMP block as found (`dumpe2fs`' "MMP_block" section): who last
/// held the file system, and whether it is held now.
fn mmp_summary(m: &ext4kit_engine::mmp::MmpStatus) -> Value {
    use ext4kit_format::mmp::MmpState;
    let r = m.record.as_ref();
    json!({
        "block": m.block,
        "update_interval": m.update_interval,
        "state": r.map(|r| match r.state() {
            MmpState::Clean => "clean",
            MmpState::Fsck => "being checked by e2fsck",
            MmpState::Active(_) => "in use (or its holder died)",
            MmpState::Unknown(_) => "unknown sequence",
        }),
        "sequence": r.map(|r| format!("{:#010x}", r.mmp_seq.get())),
        "node_name": r.map(|r| r.nodename()),
        "device_name": r.map(|r| r.bdevname()),
        "update_time": r.map(|r| r.mmp_time.get()),
        "check_interval": r.map(|r| r.mmp_check_interval.get()),
        "problem": m.problem,
    })
}

fn groups(fs: &Filesystem) -> Value {
    let g = fs.geometry();
    let v: Vec<Value> = fs
        .group_descs()
        .iter()
        .enumerate()
        .map(|(i, d)| {
            let i = i as u32;
            let first = g.group_first_block(i);
            json!({
                "group": i,
                "first_block": first,
                "last_block": first + u64::from(g.blocks_in_group(i)) - 1,
                "superblock_backup": fs.group_has_super(i),
                "block_bitmap": d.block_bitmap(),
                "inode_bitmap": d.inode_bitmap(),
                "inode_table": d.inode_table(),
                "free_blocks": d.free_blocks(),
                "free_inodes": d.free_inodes(),
                "used_dirs": d.used_dirs(),
                "itable_unused": d.itable_unused(),
                "flags": flag_names(d.flags()),
                "checksum": format!("{:#06x}", d.bg_checksum.get()),
            })
        })
        .collect();
    Value::Array(v)
}

fn flag_names(f: u16) -> Vec<&'static str> {
    [(1, "INODE_UNINIT"), (2, "BLOCK_UNINIT"), (4, "ITABLE_ZEROED")]
        .iter()
        .filter(|(b, _)| f & b != 0)
        .map(|(_, n)| *n)
        .collect()
}

/// Prints the summary.
pub fn run(a: Args) -> Result<()> {
    let fs = open_ro(&a.image)?;
    let mut v = summary(&fs);
    if !a.header_only {
        v["groups"] = groups(&fs);
    }
    if a.json {
        outln!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    print_text(&v)
}

fn print_text(v: &Value) -> Result<()> {
    let Value::Object(m) = v else { return Ok(()) };
    for (k, val) in m {
        if k == "groups" {
            continue;
        }
        let text = match val {
            Value::Array(a) => a
                .iter()
                .map(|x| x.as_str().map_or_else(|| x.to_string(), str::to_string))
                .collect::<Vec<_>>()
                .join(" "),
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        outln!("{:<30} {text}", format!("{}:", k.replace('_', " ")));
    }
    if let Some(Value::Array(gs)) = m.get("groups") {
        for g in gs {
            outln!(
                "\nGroup {}: (Blocks {}-{}){} [{}]\n  Block bitmap at {}, Inode bitmap at {}, Inode table at {}\n  {} free blocks, {} free inodes, {} directories, {} unused inodes, csum {}",
                g["group"],
                g["first_block"],
                g["last_block"],
                if g["superblock_backup"] == true {
                    " superblock"
                } else {
                    ""
                },
                g["flags"]
                    .as_array()
                    .map(|a| a.iter().filter_map(|x| x.as_str()).collect::<Vec<_>>().join(", "))
                    .unwrap_or_default(),
                g["block_bitmap"],
                g["inode_bitmap"],
                g["inode_table"],
                g["free_blocks"],
                g["free_inodes"],
                g["used_dirs"],
                g["itable_unused"],
                g["checksum"].as_str().unwrap_or(""),
            );
        }
    }
    Ok(())
}
