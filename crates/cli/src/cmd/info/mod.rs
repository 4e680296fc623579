//! `ext4kit info IMAGE [--json]`: the superblock, the journal superblock
//! and a per-group summary, as `dumpe2fs` shows them: its field names, its
//! names for enumerated values, its dates. `--json` carries the same
//! fields under stable snake_case keys (times as seconds since 1970, 0 for
//! never; docs/json.md).

mod text;

use anyhow::Result;
use ext4kit_engine::Filesystem;
use ext4kit_format::names;
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
    let reserved = u64::from(sb.s_r_blocks_count_lo.get()) | (u64::from(sb.s_r_blocks_count_hi.get()) << 32);
    let csum = g.features.metadata_csum();
    let time = |lo: u32, hi: u8| i64::from(lo) | (i64::from(hi) << 32);
    let mut v = json!({
        "volume_name": sb.volume_name(),
        "last_mounted": sb.last_mounted(),
        "uuid": uuid(&sb.s_uuid),
        "magic": format!("0x{:04X}", sb.s_magic.get()),
        "revision": names::revision(sb.s_rev_level.get()),
        "features": g.features.names(),
        "flags": names::fs_flags(sb.s_flags.get()),
        "default_mount_options": names::default_mount_opts(sb.s_default_mount_opts.get()),
        "state": names::state(sb.s_state.get()),
        "errors_behaviour": names::errors_behaviour(sb.s_errors.get()),
        "os_type": names::creator_os(sb.s_creator_os.get()),
        "inode_count": g.inodes_count,
        "block_count": g.blocks_count,
        "reserved_block_count": reserved,
        "free_blocks": free_blocks,
        "free_inodes": sb.s_free_inodes_count.get(),
        "first_block": g.first_data_block,
        "block_size": g.block_size,
        "desc_size": g.desc_size,
        "reserved_gdt_blocks": sb.s_reserved_gdt_blocks.get(),
        "blocks_per_group": g.blocks_per_group,
        "inodes_per_group": g.inodes_per_group,
        "inode_table_blocks_per_group": g.inode_table_blocks,
        "groups_per_flex": g.groups_per_flex,
        "group_count": g.group_count,
    });
    if g.cluster_bits > 0 {
        v["cluster_size"] = json!(g.block_size << g.cluster_bits);
        v["clusters_per_group"] = json!(g.clusters_per_group);
    }
    let times = json!({
        "created": time(sb.s_mkfs_time.get(), sb.s_mkfs_time_hi),
        "last_mount_time": time(sb.s_mtime.get(), sb.s_mtime_hi),
        "last_write_time": time(sb.s_wtime.get(), sb.s_wtime_hi),
        "mount_count": sb.s_mnt_count.get(),
        "max_mount_count": sb.s_max_mnt_count.get() as i16,
        "last_checked": time(sb.s_lastcheck.get(), sb.s_lastcheck_hi),
        "check_interval": sb.s_checkinterval.get(),
        "lifetime_writes_kib": sb.s_kbytes_written.get(),
        "reserved_blocks_uid": sb.s_def_resuid.get(),
        "reserved_blocks_gid": sb.s_def_resgid.get(),
        "first_inode": g.first_ino,
        "inode_size": g.inode_size,
        "required_extra_isize": sb.s_min_extra_isize.get(),
        "desired_extra_isize": sb.s_want_extra_isize.get(),
        "journal_inode": sb.s_journal_inum.get(),
        "first_orphan_inode": sb.s_last_orphan.get(),
        "default_hash_version": names::hash_version(sb.s_def_hash_version),
        "hash_seed": uuid(&hash_seed(&sb)),
        "checksum_type": csum.then(|| names::checksum_type(sb.s_checksum_type)),
        "checksum_seed": format!("{:#010x}", sb.csum_seed()),
        "checksum": csum.then(|| format!("{:#010x}", sb.s_checksum.get())),
        "overhead_clusters": sb.s_overhead_clusters.get(),
        "error_count": sb.s_error_count.get(),
        "journal": journal(fs),
        "read_only_reason": read_only_reason(fs),
    });
    if let (Value::Object(m), Value::Object(t)) = (&mut v, times) {
        m.extend(t);
    }
    if let Some(mmp) = fs.mmp_status() {
        v["mmp"] = mmp_summary(&mmp);
    }
    v
}

/// `s_hash_seed` as the 16 bytes dumpe2fs prints as a UUID.
fn hash_seed(sb: &ext4kit_format::superblock::RawSuperblock) -> [u8; 16] {
    let mut b = [0u8; 16];
    for (chunk, w) in b.chunks_mut(4).zip(&sb.s_hash_seed) {
        chunk.copy_from_slice(&w.get().to_le_bytes());
    }
    b
}

/// The journal superblock as dumpe2fs's "Journal" section shows it.
fn journal(fs: &Filesystem) -> Value {
    let j = fs.journal_info();
    let s = j.superblock.as_ref();
    json!({
        "present": j.present, "inode": j.inode, "external": j.external, "needs_recovery": j.needs_recovery,
        "features": s.map(|s| names::journal_features(s.compat, s.incompat)),
        "block_size": s.map(|s| s.block_size),
        "length_blocks": s.map(|s| s.max_len),
        "first": s.map(|s| s.first),
        "sequence": s.map(|s| s.sequence),
        "start": s.map(|s| s.start),
        "problem": j.problem,
    })
}

/// Why the engine would serve this image read-only, if anything but the
/// read-only open `info` itself makes.
fn read_only_reason(fs: &Filesystem) -> Option<String> {
    if fs.read_only_reason() == Some(ext4kit_engine::READ_ONLY_DEVICE) {
        return None;
    }
    fs.read_only_reason().map(str::to_string)
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

fn groups(fs: &Filesystem) -> Result<Value> {
    let g = fs.geometry();
    let csum = g.features.metadata_csum();
    let mut v = Vec::new();
    for (i, d) in fs.group_descs().iter().enumerate() {
        let i = i as u32;
        let first = g.group_first_block(i);
        let l = fs.group_layout(i)?;
        // bigalloc.rst: descriptors count free clusters.
        let free_key = if g.cluster_bits > 0 {
            "free_clusters"
        } else {
            "free_blocks"
        };
        v.push(json!({
            "group": i,
            "first_block": first,
            "last_block": first + u64::from(g.blocks_in_group(i)) - 1,
            "superblock_backup": fs.group_has_super(i),
            "superblock_at": l.superblock,
            "descriptors": l.descriptors.map(|r| [r.0, r.1]),
            "reserved_gdt": l.reserved_gdt.map(|r| [r.0, r.1]),
            "meta_bg_descriptor": l.meta_bg_descriptor,
            "block_bitmap": d.block_bitmap(),
            "block_bitmap_csum": csum.then(|| format!("{:#010x}", d.block_bitmap_csum())),
            "inode_bitmap": d.inode_bitmap(),
            "inode_bitmap_csum": csum.then(|| format!("{:#010x}", d.inode_bitmap_csum())),
            "inode_table": d.inode_table(),
            free_key: d.free_blocks(),
            "free_inodes": d.free_inodes(),
            "used_dirs": d.used_dirs(),
            "itable_unused": d.itable_unused(),
            "flags": flag_names(d.flags()),
            "checksum": format!("{:#06x}", d.bg_checksum.get()),
            "free_block_runs": l.free_blocks.iter().map(|r| [r.0, r.1]).collect::<Vec<_>>(),
            "free_inode_runs": l.free_inodes.iter().map(|r| [r.0, r.1]).collect::<Vec<_>>(),
        }));
    }
    Ok(Value::Array(v))
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
        v["groups"] = groups(&fs)?;
    }
    if a.json {
        outln!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    text::print(&v)
}
