//! Directories: htree (debugfs `htree_dump`) and dx_hash.

use anyhow::{Result, bail};
use ext4kit_engine::Filesystem;
use ext4kit_format::hash::{HashVersion, dx_hash as hash, seed_from_bytes};

use super::inode_of;

pub(super) fn htree(fs: &Filesystem, args: &[String]) -> Result<()> {
    let dir = inode_of(fs, args.iter().find(|a| !a.starts_with('-')))?;
    let d = fs.htree_dump(&dir)?;
    outln!("Root node dump:");
    outln!("\t Reserved zero: 0");
    outln!("\t Hash Version: {}", d.hash_version);
    outln!("\t Info length: {}", d.info_length);
    outln!("\t Indirect levels: {}", d.indirect_levels);
    // C's %#x prints 0 bare.
    let flags = if d.flags == 0 {
        "0".into()
    } else {
        format!("{:#x}", d.flags)
    };
    outln!("\t Flags: {flags}");
    entries(&d.root, d.limit)?;
    for n in &d.nodes {
        outln!("Index block {}:", n.logical);
        entries(&n.entries, n.limit)?;
    }
    for leaf in &d.leaves {
        outln!("Reading directory block {}, phys {}", leaf.logical, leaf.physical);
        let mut line = String::new();
        for n in &leaf.names {
            let item = format!(
                "{} 0x{:08x}-{:08x} ({}) {}   ",
                n.ino,
                n.hash,
                n.minor,
                n.rec_len,
                String::from_utf8_lossy(&n.name)
            );
            if line.len() + item.len() > 80 {
                outln!("{line}");
                line.clear();
            }
            line.push_str(&item);
        }
        outln!("{line}");
    }
    Ok(())
}

fn entries(v: &[ext4kit_format::htree::DxEntry], limit: u16) -> Result<()> {
    outln!("Number of entries (count): {}", v.len());
    outln!("Number of entries (limit): {limit}");
    for (i, e) in v.iter().enumerate() {
        outln!("Entry #{i}: Hash 0x{:08x}, block {}", e.hash, e.block);
    }
    outln!();
    Ok(())
}

/// `dx_hash [-h HASH] [-s SEED] NAME`: legacy and a zero seed by default,
/// as debugfs.
pub(super) fn dx_hash(_fs: &Filesystem, args: &[String]) -> Result<()> {
    let (mut version, mut seed, mut name) = (HashVersion::Legacy, [0u32; 4], None);
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "-h" => version = hash_version(it.next().map_or("", String::as_str))?,
            "-s" => seed = seed_from_bytes(&uuid(it.next().map_or("", String::as_str))?),
            _ => name = Some(a.as_str()),
        }
    }
    let Some(name) = name else {
        bail!("usage: dx_hash [-h HASH] [-s SEED] NAME")
    };
    let h = hash(name.as_bytes(), version, &seed)?;
    outln!("Hash of {name} is 0x{:x} (minor 0x{:x})", h.major, h.minor);
    Ok(())
}

fn hash_version(s: &str) -> Result<HashVersion> {
    let code = match s {
        "legacy" => 0,
        "half_md4" => 1,
        "tea" => 2,
        "legacy_unsigned" => 3,
        "half_md4_unsigned" => 4,
        "tea_unsigned" => 5,
        "siphash" => 6,
        n => n.parse().map_err(|_| anyhow::anyhow!("unknown hash: {s}"))?,
    };
    HashVersion::from_code(code).ok_or_else(|| anyhow::anyhow!("unknown hash: {s}"))
}

fn uuid(s: &str) -> Result<[u8; 16]> {
    let hex: String = s.chars().filter(|c| *c != '-').collect();
    if hex.len() != 32 {
        bail!("bad seed (a UUID): {s}");
    }
    let mut out = [0u8; 16];
    for (i, b) in out.iter_mut().enumerate() {
        *b = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16)?;
    }
    Ok(out)
}
