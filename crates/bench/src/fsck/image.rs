//! The image `bench fsck` checks: a fresh sparse `mkfs.ext4` image (4 KiB
//! blocks, the default features, so `metadata_csum` and its group flags)
//! filled through the engine in one batch, and the copy of it whose groups
//! no longer say which inodes were never used.

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use anyhow::{Context, Result, ensure};
use ext4kit_engine::device::FileDevice;
use ext4kit_engine::{Attr, Batch, Filesystem, NodeKind, OpenOptions, ROOT_INO};

use crate::system::{self, run_ok, tool};

/// Files per directory: each directory takes an htree of a few blocks.
pub const PER_DIR: u64 = 1000;

const FILE: Attr = Attr {
    perm: 0o644,
    uid: 1000,
    gid: 1000,
};
const DIR: Attr = Attr {
    perm: 0o755,
    uid: 1000,
    gid: 1000,
};

/// What the image holds.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct Built {
    /// Regular files made.
    pub files: u64,
    /// Fast symlinks made.
    pub symlinks: u64,
    /// Directories made (besides the root).
    pub dirs: u64,
    /// Second names given to files.
    pub hard_links: u64,
    /// Bytes of file data written.
    pub data_bytes: u64,
    /// Inodes the image has room for (`s_inodes_count`).
    pub inodes_count: u32,
    /// Seconds the build took.
    pub build_seconds: f64,
}

/// Makes `image` (`bytes` long, sparse) and fills it with `files` names:
/// regular files of 0, 1, 4 or 12 KiB, every 100th a fast symlink, every
/// 500th file also linked under a second name.
pub fn build(image: &Path, files: u64, bytes: u64) -> Result<Built> {
    let started = Instant::now();
    system::mkfs_with(image, bytes, &[])?;
    let dev = FileDevice::open(image, true).with_context(|| format!("opening {}", image.display()))?;
    let opts = OpenOptions {
        use_journal: false,
        count_mount: false,
        ..OpenOptions::default()
    };
    let fs = Filesystem::open(Box::new(dev), opts).context("opening the new image with the engine")?;
    let mut built = Built {
        files: 0,
        symlinks: 0,
        dirs: 0,
        hard_links: 0,
        data_bytes: 0,
        inodes_count: fs.geometry().inodes_count,
        build_seconds: 0.0,
    };
    let mut batch = fs.batch()?;
    let data = vec![0x5a_u8; 12 << 10];
    let mut dir = ROOT_INO;
    for i in 0..files {
        if i % PER_DIR == 0 {
            let name = format!("d{:05}", i / PER_DIR);
            dir = batch.create(ROOT_INO, name.as_bytes(), NodeKind::Directory, DIR)?.ino;
            built.dirs += 1;
        }
        fill_one(&mut batch, dir, i, &data, &mut built)?;
    }
    batch.finish()?;
    fs.unmount()?;
    built.build_seconds = started.elapsed().as_secs_f64();
    Ok(built)
}

/// Name `i` of directory `dir`: a symlink, or a file with data and maybe a
/// second name.
fn fill_one(batch: &mut Batch<'_>, dir: u32, i: u64, data: &[u8], built: &mut Built) -> Result<()> {
    let name = format!("f{i:07}");
    if i % 100 == 99 {
        let target = format!("../d{:05}/f{:07}", i / PER_DIR, i - 1).into_bytes();
        batch.create(dir, name.as_bytes(), NodeKind::Symlink(target), FILE)?;
        built.symlinks += 1;
        return Ok(());
    }
    let ino = batch.create(dir, name.as_bytes(), NodeKind::Regular, FILE)?.ino;
    built.files += 1;
    let len = [0usize, 1 << 10, 4 << 10, 12 << 10][(i % 4) as usize];
    if len > 0 {
        batch.write(ino, 0, &data[..len])?;
        built.data_bytes += len as u64;
    }
    if i % 500 == 7 {
        batch.link(ino, dir, format!("{name}.link").as_bytes())?;
        built.hard_links += 1;
    }
    Ok(())
}

/// Copies `src` to `dst` (sparse) and clears, with `debugfs -w`,
/// `EXT4_BG_INODE_UNINIT` and `bg_itable_unused` in every group that has
/// them, recomputing each descriptor's checksum: the same tree, but a
/// checker must read every inode table. Returns how many groups changed.
pub fn clear_group_flags(src: &Path, dst: &Path) -> Result<u64> {
    run_ok(Command::new("cp").arg("--sparse=always").arg(src).arg(dst))?;
    let (groups, inodes) = group_flags(dst)?;
    // Marking and freeing an unused inode first makes debugfs load every
    // inode bitmap while the flags still hold (an uninit group's is all
    // zero) and write them all back at close, each with its checksum in
    // the descriptor: a group's bitmap is only written, and its checksum
    // only set, while it is not INODE_UNINIT.
    let mut script = format!("seti <{inodes}>\nfreei <{inodes}>\n");
    let mut changed = 0;
    for g in &groups {
        if g.flags & INODE_UNINIT == 0 && g.unused == 0 {
            continue;
        }
        changed += 1;
        script.push_str(&format!(
            "set_bg {n} itable_unused 0\nset_bg {n} flags {f}\nset_bg {n} checksum calc\n",
            n = g.number,
            f = g.flags & !INODE_UNINIT
        ));
    }
    let file = tempfile::NamedTempFile::new()?;
    std::fs::write(file.path(), script)?;
    run_ok(
        Command::new(tool("debugfs")?)
            .arg("-w")
            .arg("-f")
            .arg(file.path())
            .arg(dst),
    )?;
    let left = group_flags(dst)?
        .0
        .iter()
        .filter(|g| g.flags & INODE_UNINIT != 0 || g.unused != 0)
        .count();
    ensure!(
        left == 0,
        "{left} groups still have INODE_UNINIT or unused inodes after debugfs"
    );
    Ok(changed)
}

/// `EXT4_BG_INODE_UNINIT` in `bg_flags`.
const INODE_UNINIT: u16 = 0x1;

/// A group's flags and `bg_itable_unused`, as dumpe2fs prints them.
struct GroupFlags {
    number: u64,
    flags: u16,
    unused: u64,
}

/// Reads every group's flags and unused-inode count, and the inode count,
/// from `dumpe2fs`.
fn group_flags(image: &Path) -> Result<(Vec<GroupFlags>, u64)> {
    let out = run_ok(Command::new(tool("dumpe2fs")?).arg(image))?;
    let inodes = out
        .lines()
        .find_map(|l| l.strip_prefix("Inode count:"))
        .and_then(|v| v.trim().parse().ok())
        .context("dumpe2fs printed no inode count")?;
    let mut groups: Vec<GroupFlags> = Vec::new();
    for line in out.lines() {
        let group = line
            .strip_prefix("Group ")
            .and_then(|rest| Some((rest.split(':').next()?.trim().parse::<u64>().ok()?, rest)));
        if let Some((number, rest)) = group {
            let inside = rest
                .split_once('[')
                .and_then(|(_, r)| r.split_once(']'))
                .map_or("", |(f, _)| f);
            let flags = inside.split(',').map(str::trim).fold(0u16, |acc, f| {
                acc | match f {
                    "INODE_UNINIT" => 0x1,
                    "BLOCK_UNINIT" => 0x2,
                    "ITABLE_ZEROED" => 0x4,
                    _ => 0,
                }
            });
            groups.push(GroupFlags {
                number,
                flags,
                unused: 0,
            });
        } else if let Some(unused) = line.trim().strip_suffix(" unused inodes") {
            let n = unused.rsplit(", ").next().unwrap_or("").trim().parse().unwrap_or(0);
            if let Some(g) = groups.last_mut() {
                g.unused = n;
            }
        }
    }
    ensure!(!groups.is_empty(), "dumpe2fs listed no groups for {}", image.display());
    Ok((groups, inodes))
}
