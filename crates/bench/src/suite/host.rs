//! A directory on any mounted file system, through the host's calls: the
//! kernel's ext2/3/4, xfs, tmpfs, fuse2fs, an `ext4kit mount`. Wall time
//! only; caches are dropped for real only as root.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

use super::fs::{BenchFs, Cold, Entry, Extent, FileRef, Open, Sample, Stat};
use crate::system;

/// A directory through the host's system calls.
pub struct HostFs {
    root: PathBuf,
    block_size: u64,
}

impl HostFs {
    /// Works in `root`, an existing directory.
    pub fn new(root: &Path) -> Result<Self> {
        let st = nix::sys::statvfs::statvfs(root).with_context(|| format!("statvfs {}", root.display()))?;
        Ok(Self {
            root: root.to_path_buf(),
            block_size: st.fragment_size().max(512) as u64,
        })
    }

    fn at(&self, path: &str) -> PathBuf {
        self.root.join(path)
    }
}

fn host(f: &FileRef) -> &File {
    match &f.0 {
        Open::Host(f) => f,
        Open::Engine(_) => unreachable!("an engine file given to the host target"),
    }
}

impl BenchFs for HostFs {
    fn mkdir(&self, path: &str) -> Result<()> {
        std::fs::create_dir(self.at(path)).with_context(|| format!("mkdir {path}"))
    }

    fn create(&self, path: &str) -> Result<FileRef> {
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(self.at(path))
            .with_context(|| format!("create {path}"))?;
        Ok(FileRef(Open::Host(f)))
    }

    /// The host has no create without the lookup: a plain create.
    fn create_new_name(&self, path: &str) -> Result<FileRef> {
        self.create(path)
    }

    fn open(&self, path: &str, write: bool) -> Result<FileRef> {
        let f = OpenOptions::new()
            .read(true)
            .write(write)
            .open(self.at(path))
            .with_context(|| format!("open {path}"))?;
        Ok(FileRef(Open::Host(f)))
    }

    fn write_at(&self, f: &FileRef, offset: u64, data: &[u8]) -> Result<()> {
        Ok(host(f).write_all_at(data, offset)?)
    }

    fn read_at(&self, f: &FileRef, offset: u64, buf: &mut [u8]) -> Result<usize> {
        let mut done = 0;
        while done < buf.len() {
            match host(f).read_at(&mut buf[done..], offset + done as u64)? {
                0 => break,
                n => done += n,
            }
        }
        Ok(done)
    }

    fn file_size(&self, f: &FileRef) -> Result<u64> {
        Ok(host(f).metadata()?.len())
    }

    fn fallocate(&self, f: &FileRef, offset: u64, len: u64) -> Result<()> {
        use nix::fcntl::{FallocateFlags, fallocate};
        let (off, n) = (i64::try_from(offset)?, i64::try_from(len)?);
        fallocate(host(f), FallocateFlags::empty(), off, n).context("fallocate")?;
        Ok(())
    }

    fn fsync(&self, f: &FileRef) -> Result<()> {
        Ok(host(f).sync_all()?)
    }

    fn close(&self, f: FileRef) -> Result<()> {
        drop(f);
        Ok(())
    }

    fn stat(&self, path: &str) -> Result<Stat> {
        let m = std::fs::symlink_metadata(self.at(path)).with_context(|| format!("stat {path}"))?;
        Ok(Stat {
            ino: m.ino(),
            size: m.len(),
            is_dir: m.is_dir(),
            blocks: m.blocks(),
        })
    }

    fn read_dir(&self, path: &str) -> Result<Vec<Entry>> {
        use std::os::unix::fs::DirEntryExt;
        let mut v = Vec::new();
        for e in std::fs::read_dir(self.at(path)).with_context(|| format!("readdir {path}"))? {
            let e = e?;
            v.push(Entry {
                name: e.file_name().to_string_lossy().into_owned(),
                ino: e.ino(),
            });
        }
        Ok(v)
    }

    fn unlink(&self, path: &str) -> Result<()> {
        std::fs::remove_file(self.at(path)).with_context(|| format!("unlink {path}"))
    }

    fn rmdir(&self, path: &str) -> Result<()> {
        std::fs::remove_dir(self.at(path)).with_context(|| format!("rmdir {path}"))
    }

    fn rename(&self, from: &str, to: &str) -> Result<()> {
        std::fs::rename(self.at(from), self.at(to)).with_context(|| format!("rename {from} {to}"))
    }

    fn sync(&self) -> Result<()> {
        system::syncfs(&self.root)
    }

    fn drop_caches(&mut self) -> Result<Cold> {
        self.sync()?;
        if !system::is_root() {
            return Ok(Cold::No);
        }
        system::drop_caches()?;
        Ok(Cold::Yes)
    }

    fn extents(&self, path: &str) -> Result<u64> {
        let p = self.at(path);
        let out = Command::new(system::tool("filefrag")?)
            .arg(&p)
            .output()
            .context("running filefrag")?;
        let text = String::from_utf8_lossy(&out.stdout);
        // "PATH: N extents found" (or "1 extent found").
        let count = text
            .rsplit(": ")
            .next()
            .and_then(|t| t.split_whitespace().next())
            .and_then(|n| n.parse().ok());
        match count {
            Some(n) if out.status.success() => Ok(n),
            _ => bail!(
                "filefrag {}: {}{}",
                p.display(),
                text.trim(),
                String::from_utf8_lossy(&out.stderr).trim()
            ),
        }
    }

    /// From `filefrag -v`, whose rows read
    /// `ext: logical..end: physical..end: length: …` in file-system blocks.
    fn extent_map(&self, path: &str) -> Result<Vec<Extent>> {
        let p = self.at(path);
        let out = Command::new(system::tool("filefrag")?)
            .arg("-v")
            .arg(&p)
            .output()
            .context("running filefrag")?;
        if !out.status.success() {
            bail!(
                "filefrag -v {}: {}",
                p.display(),
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(filefrag_row)
            .collect())
    }

    fn sample(&self) -> Sample {
        Sample::wall_only()
    }

    fn block_size(&self) -> u64 {
        self.block_size
    }
}

/// One extent row of `filefrag -v`: `   0:        0..    2047:      34816..     36863:   2048: …`.
fn filefrag_row(line: &str) -> Option<Extent> {
    let mut fields = line.split(':').map(str::trim);
    fields.next()?.parse::<u64>().ok()?;
    let range = |f: &str| -> Option<(u64, u64)> {
        let (a, b) = f.split_once("..")?;
        Some((a.trim().parse().ok()?, b.trim().parse().ok()?))
    };
    let (logical, _) = range(fields.next()?)?;
    let (physical, _) = range(fields.next()?)?;
    let len = fields.next()?.parse().ok()?;
    Some(Extent { logical, physical, len })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filefrag_rows_parse_and_headers_do_not() {
        let row = "   1:     2048..    4095:      40960..     43007:   2048:      36864: last,eof";
        assert_eq!(
            filefrag_row(row),
            Some(Extent {
                logical: 2048,
                physical: 40960,
                len: 2048
            })
        );
        assert_eq!(
            filefrag_row(" ext:     logical_offset:        physical_offset: length:   expected: flags:"),
            None
        );
        assert_eq!(filefrag_row("f: 2 extents found"), None);
    }
}
