//! Blocks and inodes: icheck, ncheck, blocks, bmap, dump_extents, imap,
//! ffb, ffi — in debugfs's formats.

use std::collections::HashMap;

use anyhow::{Result, bail};
use ext4kit_engine::Filesystem;
use ext4kit_format::extent::{ExtentNode, NodeEntries};

use super::{inode_of, number};

pub(super) fn icheck(fs: &Filesystem, args: &[String]) -> Result<()> {
    if args.is_empty() {
        bail!("usage: icheck BLOCK…");
    }
    let blocks = args.iter().map(|a| number(a)).collect::<Result<Vec<_>>>()?;
    let owners = fs.block_owners(&blocks)?;
    outln!("Block\tInode number");
    for (b, o) in blocks.iter().zip(owners) {
        match o {
            Some(ino) => outln!("{b}\t{ino}"),
            None => outln!("{b}\t<block not found>"),
        }
    }
    Ok(())
}

pub(super) fn ncheck(fs: &Filesystem, args: &[String]) -> Result<()> {
    if args.is_empty() {
        bail!("usage: ncheck INODE…");
    }
    let inos = args
        .iter()
        .map(|a| {
            let a = a.trim_start_matches('<').trim_end_matches('>');
            Ok(u32::try_from(number(a)?)?)
        })
        .collect::<Result<Vec<u32>>>()?;
    outln!("Inode\tPathname");
    for (ino, path) in fs.names_of(&inos)? {
        outln!("{ino}\t{path}");
    }
    Ok(())
}

pub(super) fn blocks(fs: &Filesystem, args: &[String]) -> Result<()> {
    let inode = inode_of(fs, args.first())?;
    let mut line = String::new();
    for (first, n) in fs.inode_blocks(&inode)? {
        for b in first..first + n {
            line.push_str(&format!("{b} "));
        }
    }
    outln!("{line}");
    Ok(())
}

pub(super) fn bmap(fs: &Filesystem, args: &[String]) -> Result<()> {
    let inode = inode_of(fs, args.first())?;
    let Some(l) = args.get(1) else {
        bail!("usage: bmap FILE LBLK")
    };
    let lblk = number(l)?;
    match fs.map_range(&inode, lblk, 1)?.first() {
        Some(r) => outln!("{}{}", r.physical, if r.unwritten { " (uninit)" } else { "" }),
        None => outln!("0"),
    }
    Ok(())
}

/// The extent tree depth-first, one line per entry, as `dump_extents`.
pub(super) fn extents(fs: &Filesystem, args: &[String]) -> Result<()> {
    let inode = inode_of(fs, args.iter().find(|a| !a.starts_with('-')))?;
    if !inode.uses_extents() {
        bail!("inode {} does not use extents", inode.ino);
    }
    let tree = fs.extent_tree(&inode)?;
    let Some((_, root)) = tree.first() else { return Ok(()) };
    let nodes: HashMap<u64, &ExtentNode> = tree.iter().filter_map(|(b, n)| Some(((*b)?, n))).collect();
    let end = inode.size().div_ceil(fs.block_size() as u64).max(1);
    outln!("Level Entries {:>13} {:>13} Length Flags", "Logical", "Physical");
    let max = root.depth;
    walk(&nodes, root, 0, max, end, 0)
}

fn walk(
    nodes: &HashMap<u64, &ExtentNode>,
    node: &ExtentNode,
    level: u16,
    max: u16,
    end: u64,
    guard: u32,
) -> Result<()> {
    if guard > 8 {
        bail!("extent tree deeper than any valid one");
    }
    match &node.entries {
        NodeEntries::Leaf(v) => {
            for (i, e) in v.iter().enumerate() {
                let (l, p, n) = (u64::from(e.logical), e.physical, u64::from(e.len));
                let flag = if e.unwritten { "Uninit" } else { "" };
                outln!(
                    "{level:2}/{max:2} {:3}/{:3} {l:5} - {:5} {p:5} - {:5} {n:6} {flag}",
                    i + 1,
                    v.len(),
                    (l + n).saturating_sub(1),
                    (p + n).saturating_sub(1)
                );
            }
        }
        NodeEntries::Index(v) => {
            for (i, x) in v.iter().enumerate() {
                let next = v.get(i + 1).map_or(end, |y| u64::from(y.logical));
                let l = u64::from(x.logical);
                let len = next.saturating_sub(l);
                outln!(
                    "{level:2}/{max:2} {:3}/{:3} {l:5} - {:5} {:5}{:>8} {len:6}",
                    i + 1,
                    v.len(),
                    (l + len).saturating_sub(1),
                    x.child,
                    ""
                );
                if let Some(child) = nodes.get(&x.child) {
                    walk(nodes, child, level + 1, max, next, guard + 1)?;
                }
            }
        }
    }
    Ok(())
}

pub(super) fn imap(fs: &Filesystem, args: &[String]) -> Result<()> {
    let inode = inode_of(fs, args.first())?;
    let at = fs.inode_record_at(inode.ino)?;
    outln!("Inode {} is part of block group {}", inode.ino, at.group);
    outln!("\tlocated at block {}, offset 0x{:04x}", at.block, at.offset);
    Ok(())
}

pub(super) fn ffb(fs: &Filesystem, args: &[String]) -> Result<()> {
    let count = args.first().map(|a| number(a)).transpose()?.unwrap_or(1);
    let goal = match args.get(1) {
        Some(g) => number(g)?,
        None => fs.geometry().first_data_block.into(),
    };
    let found = fs.first_free_blocks(usize::try_from(count)?, goal)?;
    let list: String = found.iter().map(|b| format!("{b} ")).collect();
    outln!("Free blocks found: {list}");
    Ok(())
}

pub(super) fn ffi(fs: &Filesystem, args: &[String]) -> Result<()> {
    let dir = args.first().map(|a| number(a)).transpose()?.unwrap_or(2);
    match fs.first_free_inode(u32::try_from(dir)?)? {
        Some(ino) => outln!("Free inode found: {ino}"),
        None => bail!("no free inode"),
    }
    Ok(())
}
