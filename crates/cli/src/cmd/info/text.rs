//! `info`'s text form: dumpe2fs's labels in dumpe2fs's order, read from
//! the same JSON value `--json` prints, so the two never disagree.

use anyhow::Result;
use serde_json::Value;

use crate::cmd::dates;

/// How a field's value is shown.
#[derive(Clone, Copy)]
enum Show {
    /// As it is (numbers, names).
    Plain,
    /// A list, space-separated; `(none)` when empty.
    Words,
    /// Seconds since 1970 as dumpe2fs's date; 0 is `n/a`.
    Date,
    /// A string, or `<none>` / `<not available>` when empty.
    Or(&'static str),
    /// Printed only when not 0.
    NonZero,
    /// Kibibytes with dumpe2fs's unit steps.
    KiB,
    /// Seconds, with the interval in words when not 0.
    Interval,
    /// A 32-bit number in hex, as jbd2's sequence numbers are shown.
    Hex,
}

/// The superblock fields, as `dumpe2fs -h` labels and orders them.
const SUPER: &[(&str, &str, Show)] = &[
    ("Filesystem volume name", "volume_name", Show::Or("<none>")),
    ("Last mounted on", "last_mounted", Show::Or("<not available>")),
    ("Filesystem UUID", "uuid", Show::Plain),
    ("Filesystem magic number", "magic", Show::Plain),
    ("Filesystem revision #", "revision", Show::Plain),
    ("Filesystem features", "features", Show::Words),
    ("Filesystem flags", "flags", Show::Words),
    ("Default mount options", "default_mount_options", Show::Words),
    ("Filesystem state", "state", Show::Plain),
    ("Errors behavior", "errors_behaviour", Show::Plain),
    ("Filesystem OS type", "os_type", Show::Plain),
    ("Inode count", "inode_count", Show::Plain),
    ("Block count", "block_count", Show::Plain),
    ("Reserved block count", "reserved_block_count", Show::Plain),
    ("Overhead clusters", "overhead_clusters", Show::NonZero),
    ("Free blocks", "free_blocks", Show::Plain),
    ("Free inodes", "free_inodes", Show::Plain),
    ("First block", "first_block", Show::Plain),
    ("Block size", "block_size", Show::Plain),
    ("Cluster size", "cluster_size", Show::Plain),
    ("Group descriptor size", "desc_size", Show::Plain),
    ("Reserved GDT blocks", "reserved_gdt_blocks", Show::Plain),
    ("Blocks per group", "blocks_per_group", Show::Plain),
    ("Clusters per group", "clusters_per_group", Show::Plain),
    ("Inodes per group", "inodes_per_group", Show::Plain),
    ("Inode blocks per group", "inode_table_blocks_per_group", Show::Plain),
    ("Flex block group size", "groups_per_flex", Show::Plain),
    ("Filesystem created", "created", Show::Date),
    ("Last mount time", "last_mount_time", Show::Date),
    ("Last write time", "last_write_time", Show::Date),
    ("Mount count", "mount_count", Show::Plain),
    ("Maximum mount count", "max_mount_count", Show::Plain),
    ("Last checked", "last_checked", Show::Date),
    ("Check interval", "check_interval", Show::Interval),
    ("Lifetime writes", "lifetime_writes_kib", Show::KiB),
    ("Reserved blocks uid", "reserved_blocks_uid", Show::Plain),
    ("Reserved blocks gid", "reserved_blocks_gid", Show::Plain),
    ("First inode", "first_inode", Show::Plain),
    ("Inode size", "inode_size", Show::Plain),
    ("Required extra isize", "required_extra_isize", Show::Plain),
    ("Desired extra isize", "desired_extra_isize", Show::Plain),
    ("Journal inode", "journal_inode", Show::NonZero),
    ("First orphan inode", "first_orphan_inode", Show::NonZero),
    ("Default directory hash", "default_hash_version", Show::Plain),
    ("Directory Hash Seed", "hash_seed", Show::Plain),
    ("Checksum type", "checksum_type", Show::Plain),
    ("Checksum seed", "checksum_seed", Show::Plain),
    ("Checksum", "checksum", Show::Plain),
    ("FS Error count", "error_count", Show::NonZero),
];

/// The journal superblock's fields (dumpe2fs's "Journal" lines).
const JOURNAL: &[(&str, &str, Show)] = &[
    ("Journal features", "features", Show::Words),
    ("Journal block size", "block_size", Show::Plain),
    ("Total journal blocks", "length_blocks", Show::Plain),
    ("Journal sequence", "sequence", Show::Hex),
    ("Journal start", "start", Show::Plain),
    ("Journal problem", "problem", Show::Plain),
];

/// Prints `v` (see `summary` and `groups` in the parent module).
pub fn print(v: &Value) -> Result<()> {
    fields(v, SUPER)?;
    if let Some(m) = v.get("mmp").filter(|m| m.is_object()) {
        outln!("{:<26}{}", "MMP block number:", m["block"]);
        outln!("{:<26}{}", "MMP update interval:", m["update_interval"]);
        if let Some(s) = m["state"].as_str() {
            outln!("{:<26}{s}", "MMP state:");
        }
    }
    if let Some(reason) = v["read_only_reason"].as_str() {
        outln!("{:<26}{reason}", "Served read-only because:");
    }
    let j = &v["journal"];
    if j["present"] == true {
        outln!();
        if j["needs_recovery"] == true {
            outln!("Journal needs recovery (ext4kit replays it when it opens the image for writing)");
        }
        fields(j, &JOURNAL[..1])?;
        if let (Some(bs), Some(n)) = (j["block_size"].as_u64(), j["length_blocks"].as_u64()) {
            let k = bs / 1024 * n;
            let size = if k < 8192 {
                format!("{k}k")
            } else {
                format!("{}M", k >> 10)
            };
            outln!("{:<26}{size}", "Total journal size:");
        }
        fields(j, &JOURNAL[1..])?;
    }
    if let Some(Value::Array(gs)) = v.get("groups") {
        outln!();
        for g in gs {
            group(v, g)?;
        }
    }
    Ok(())
}

fn fields(v: &Value, list: &[(&str, &str, Show)]) -> Result<()> {
    for &(label, key, show) in list {
        let val = &v[key];
        if val.is_null() || matches!(show, Show::NonZero) && val.as_u64() == Some(0) {
            continue;
        }
        outln!("{:<26}{}", format!("{label}:"), shown(val, show));
    }
    Ok(())
}

fn shown(val: &Value, show: Show) -> String {
    match show {
        Show::Words => {
            let w: Vec<&str> = val.as_array().into_iter().flatten().filter_map(Value::as_str).collect();
            if w.is_empty() { "(none)".into() } else { w.join(" ") }
        }
        Show::Date => dates::ctime(val.as_i64().unwrap_or(0)),
        Show::Or(empty) => match val.as_str() {
            Some("") | None => empty.into(),
            Some(s) => s.into(),
        },
        Show::KiB => kib(val.as_u64().unwrap_or(0)),
        Show::Interval => interval(val.as_u64().unwrap_or(0)),
        Show::Hex => format!("{:#010x}", val.as_u64().unwrap_or(0)),
        Show::Plain | Show::NonZero => val.as_str().map_or_else(|| val.to_string(), str::to_string),
    }
}

/// dumpe2fs's "Lifetime writes": kB below 8 MiB,
/// then MB, GB, TB, each while the number stays under 8192.
fn kib(k: u64) -> String {
    let mut n = k;
    for unit in ["kB", "MB", "GB", "TB"] {
        if n < 8192 {
            return format!("{n} {unit}");
        }
        n >>= 10;
    }
    format!("{n} PB")
}

/// `15552000 (6 months)`, as dumpe2fs spells a check interval; `0 (<none>)`.
fn interval(secs: u64) -> String {
    if secs == 0 {
        return "0 (<none>)".into();
    }
    let steps = [
        (2_592_000, "month"),
        (604_800, "week"),
        (86_400, "day"),
        (3_600, "hour"),
        (60, "minute"),
        (1, "second"),
    ];
    let mut left = secs;
    let mut words = Vec::new();
    for (len, name) in steps {
        let n = left / len;
        if n > 0 {
            words.push(format!("{n} {name}{}", if n == 1 { "" } else { "s" }));
            left %= len;
        }
    }
    format!("{secs} ({})", words.join(", "))
}

/// dumpe2fs's paragraph for one group (`list_desc`).
fn group(v: &Value, g: &Value) -> Result<()> {
    let num = |x: &Value| x.as_u64().unwrap_or(0);
    let features: Vec<&str> = v["features"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let has = |f: &str| features.contains(&f);
    let (first, last) = (num(&g["first_block"]), num(&g["last_block"]));
    let mut head = format!("Group {}: (Blocks {first}-{last})", g["group"]);
    if has("metadata_csum") || has("uninit_bg") {
        head += &format!(" csum {}", g["checksum"].as_str().unwrap_or(""));
        let flags: Vec<&str> = g["flags"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        if !flags.is_empty() {
            head += &format!(" [{}]", flags.join(", "));
        }
    }
    outln!("{head}");
    let mut copies = String::new();
    if let Some(sb) = g["superblock_at"].as_u64() {
        let which = if g["group"] == 0 { "Primary" } else { "Backup" };
        copies = format!("  {which} superblock at {sb}");
    }
    if let Some([a, b]) = g["descriptors"].as_array().map(Vec::as_slice) {
        copies += &format!(", Group descriptors at {a}-{b}");
        if let Some([a, b]) = g["reserved_gdt"].as_array().map(Vec::as_slice) {
            copies += &format!("\n  Reserved GDT blocks at {a}-{b}");
        }
    } else if let Some(d) = g["meta_bg_descriptor"].as_u64() {
        copies += &format!("{} Group descriptor at {d}", if copies.is_empty() { " " } else { "," });
    }
    if !copies.is_empty() {
        outln!("{copies}");
    }
    let rel = |block: u64, itable: bool| -> String {
        if (first..=last).contains(&block) {
            return if itable && block == first {
                String::new()
            } else {
                format!(" (+{})", block - first)
            };
        }
        let per = num(&v["blocks_per_group"]).max(1);
        if !has("flex_bg") {
            return String::new();
        }
        let fg = block.saturating_sub(num(&v["first_block"])) / per;
        format!(" (bg #{fg} + {})", block - (num(&v["first_block"]) + fg * per))
    };
    let csum = |k: &str| g[k].as_str().map(|c| format!(", csum {c}")).unwrap_or_default();
    let (bb, ib, it) = (num(&g["block_bitmap"]), num(&g["inode_bitmap"]), num(&g["inode_table"]));
    outln!("  Block bitmap at {bb}{}{}", rel(bb, false), csum("block_bitmap_csum"));
    outln!("  Inode bitmap at {ib}{}{}", rel(ib, false), csum("inode_bitmap_csum"));
    let it_last = it + num(&v["inode_table_blocks_per_group"]).max(1) - 1;
    outln!("  Inode table at {it}-{it_last}{}", rel(it, true));
    let (free, units) = if g["free_clusters"].is_null() {
        (&g["free_blocks"], "blocks")
    } else {
        (&g["free_clusters"], "clusters")
    };
    let unused = num(&g["itable_unused"]);
    let unused = if unused > 0 {
        format!(", {unused} unused inodes")
    } else {
        String::new()
    };
    outln!(
        "  {free} free {units}, {} free inodes, {} directories{unused}",
        g["free_inodes"],
        g["used_dirs"]
    );
    outln!(
        "  Free blocks: {}",
        runs(&g["free_block_runs"], !g["free_clusters"].is_null())
    );
    outln!("  Free inodes: {}", runs(&g["free_inode_runs"], false));
    Ok(())
}

/// Runs as dumpe2fs prints them: `a-b, c` (a one-block run alone, but
/// always as a range when counting clusters).
fn runs(v: &Value, clusters: bool) -> String {
    let list: Vec<String> = v
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|r| Some((r.get(0)?.as_u64()?, r.get(1)?.as_u64()?)))
        .map(|(a, b)| {
            if a == b && !clusters {
                a.to_string()
            } else {
                format!("{a}-{b}")
            }
        })
        .collect();
    list.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_and_intervals_read_as_dumpe2fs_prints_them() {
        assert_eq!(kib(4096), "4096 kB");
        assert_eq!(kib(65536), "64 MB");
        assert_eq!(kib(3 << 30), "3072 GB");
        assert_eq!(interval(0), "0 (<none>)");
        assert_eq!(interval(15_552_000), "15552000 (6 months)");
        assert_eq!(interval(90_061), "90061 (1 day, 1 hour, 1 minute, 1 second)");
    }
}
