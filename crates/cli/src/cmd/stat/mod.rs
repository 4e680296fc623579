//! `ext4kit stat IMAGE PATH`: every inode field, the flags by name, the
//! extent tree or block map, and the extended attributes; `--json` the
//! same as one object (docs/json.md).

pub mod json;

use anyhow::Result;
use ext4kit_engine::{Filesystem, Inode};
use ext4kit_format::extent::NodeEntries;
use ext4kit_format::inode::flags;

use super::dates::{self, TimeStyle};
use super::util::mode_string;
use crate::ImageArgs;
use crate::open::open_ro;

/// Arguments of `stat`.
#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    image: ImageArgs,
    /// Path inside the image, or `<N>` for inode number N.
    path: String,
    /// How times are printed (ls's names; `epoch` is seconds since 1970).
    #[arg(long, value_enum, default_value_t = TimeStyle::FullIso)]
    time_style: TimeStyle,
    /// One JSON object with every field, for programs (docs/json.md).
    #[arg(long)]
    json: bool,
}

const FLAG_NAMES: &[(u32, &str)] = &[
    (0x1, "SECRM"),
    (0x2, "UNRM"),
    (0x4, "COMPR"),
    (0x8, "SYNC"),
    (flags::IMMUTABLE, "IMMUTABLE"),
    (flags::APPEND, "APPEND"),
    (0x40, "NODUMP"),
    (flags::NOATIME, "NOATIME"),
    (flags::ENCRYPT, "ENCRYPT"),
    (flags::INDEX, "INDEX"),
    (0x2000, "IMAGIC"),
    (0x4000, "JOURNAL_DATA"),
    (0x8000, "NOTAIL"),
    (0x10000, "DIRSYNC"),
    (0x20000, "TOPDIR"),
    (flags::HUGE_FILE, "HUGE_FILE"),
    (flags::EXTENTS, "EXTENTS"),
    (flags::VERITY, "VERITY"),
    (flags::EA_INODE, "EA_INODE"),
    (0x2000000, "DAX"),
    (flags::INLINE_DATA, "INLINE_DATA"),
    (0x20000000, "PROJINHERIT"),
    (flags::CASEFOLD, "CASEFOLD"),
];

fn resolve(fs: &Filesystem, p: &str) -> Result<Inode> {
    if let Some(n) = p.strip_prefix('<').and_then(|s| s.strip_suffix('>')) {
        return Ok(fs.inode(n.parse()?)?);
    }
    Ok(fs.resolve(p.as_bytes())?)
}

/// Prints the inode.
pub fn run(a: Args) -> Result<()> {
    let fs = open_ro(&a.image)?;
    let inode = resolve(&fs, &a.path)?;
    let m = fs.metadata(&inode)?;
    let names: Vec<&str> = FLAG_NAMES
        .iter()
        .filter(|(b, _)| m.flags & b != 0)
        .map(|(_, n)| *n)
        .collect();
    if a.json {
        let v = json::object(&fs, &inode, &m, &names)?;
        outln!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    outln!(
        "Inode: {}   Type: {:?}   Mode: {:04o} ({})",
        m.ino,
        m.file_type,
        m.perm,
        mode_string(m.file_type, m.perm)
    );
    outln!(
        "Flags: {:#x} [{}]   Generation: {}",
        m.flags,
        names.join(" "),
        m.generation
    );
    outln!(
        "User: {}   Group: {}   Size: {}   Links: {}   Blockcount: {}",
        m.uid,
        m.gid,
        m.size,
        m.nlink,
        m.blocks
    );
    outln!(
        "File ACL: {}   Extra isize: {}",
        inode.raw.file_acl(),
        inode.raw.i_extra_isize.get()
    );
    let (style, now) = (a.time_style, dates::now());
    outln!(
        " ctime: {}\n atime: {}\n mtime: {}",
        dates::format(m.ctime, style, now),
        dates::format(m.atime, style, now),
        dates::format(m.mtime, style, now)
    );
    if let Some(c) = m.crtime {
        outln!("crtime: {}", dates::format(c, style, now));
    }
    if matches!(
        m.file_type,
        ext4kit_format::inode::FileType::CharDevice | ext4kit_format::inode::FileType::BlockDevice
    ) {
        outln!("Device: {},{}", m.rdev.0, m.rdev.1);
    }
    if m.file_type == ext4kit_format::inode::FileType::Symlink {
        outln!("Link target: {}", String::from_utf8_lossy(&fs.read_link(&inode)?));
    }
    print_body(&fs, &inode)?;
    for x in fs.xattrs(&inode)? {
        outln!(
            "Xattr: {} ({} bytes) = {:?}",
            String::from_utf8_lossy(&x.name),
            x.value.len(),
            String::from_utf8_lossy(&x.value[..x.value.len().min(64)])
        );
    }
    Ok(())
}

fn print_body(fs: &Filesystem, inode: &Inode) -> Result<()> {
    if fs.is_fast_symlink(inode) {
        outln!("Fast symlink: the target is stored in the inode (i_block), no blocks");
        return Ok(());
    }
    if inode.has_inline_data() {
        outln!("Inline data: {} bytes", inode.size());
        return Ok(());
    }
    if inode.uses_extents() {
        let tree = fs.extent_tree(inode)?;
        let depth = tree.first().map_or(0, |(_, n)| n.depth);
        outln!("Extent tree: depth {depth}, {} node(s)", tree.len());
        for (block, node) in &tree {
            let at = block.map_or_else(|| "i_block".to_string(), |b| format!("block {b}"));
            match &node.entries {
                NodeEntries::Index(v) => {
                    outln!("  ({at}) depth {}: {} index entries", node.depth, v.len())
                }
                NodeEntries::Leaf(v) => {
                    outln!("  ({at}) leaf: {} extents", v.len());
                    for e in v.iter().take(32) {
                        outln!(
                            "    {}..{} -> {}..{}{}",
                            e.logical,
                            e.logical + u32::from(e.len) - 1,
                            e.physical,
                            e.physical + u64::from(e.len) - 1,
                            if e.unwritten { " [unwritten]" } else { "" }
                        );
                    }
                    if v.len() > 32 {
                        outln!("    … {} more", v.len() - 32);
                    }
                }
            }
        }
        return Ok(());
    }
    let runs = fs.all_runs(inode)?;
    outln!("Block map: {} run(s)", runs.len());
    for r in runs.iter().take(32) {
        outln!(
            "  {}..{} -> {}..{}",
            r.logical,
            r.end() - 1,
            r.physical,
            r.physical + r.len - 1
        );
    }
    Ok(())
}
