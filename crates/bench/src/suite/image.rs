//! An image through the engine's library API, on `PageCache` over
//! `DiskModel` over the image file: modeled time, the same figures on any
//! machine. The workload's directory is made in the image's root; the
//! image is checked with `e2fsck -fn` once the run is over.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result, anyhow, ensure};
use ext4kit_engine::device::{DiskModel, DiskProfile, FileDevice, PageCache};
use ext4kit_engine::dir::{ReadDirOptions, ReadDirOrder};
use ext4kit_engine::{AllocOptions, Attr, Filesystem, NodeKind, OpenOptions, RenameFlags};
use parking_lot::RwLock;

use super::fs::{BenchFs, Cold, Entry, Extent, FileRef, Open, Sample, Stat, split_parent};

type Disk = Arc<DiskModel<FileDevice>>;
type Cache = Arc<PageCache<Disk>>;

const FILE: Attr = Attr {
    perm: 0o644,
    uid: 0,
    gid: 0,
};
const DIR: Attr = Attr {
    perm: 0o755,
    uid: 0,
    gid: 0,
};

/// An image through the engine, on the page cache and the disk model.
pub struct EngineFs {
    path: PathBuf,
    disk: Disk,
    cache: Cache,
    /// `None` only while caches are being dropped.
    fs: RwLock<Option<Filesystem>>,
    /// Absolute path of the workload's directory in the image.
    root: String,
    block_size: u64,
    /// What every open of the run uses, the reopen that drops caches too.
    opts: OpenOptions,
}

impl EngineFs {
    /// Opens `path` on the disk model `profile` with `cache_bytes` of page
    /// cache and the allocators `alloc`, and makes the workload's
    /// directory `dir` in its root.
    pub fn open(path: &Path, profile: &DiskProfile, cache_bytes: u64, policy: Policy, dir: &str) -> Result<Self> {
        let Policy { alloc, readdir } = policy;
        let file = FileDevice::open(path, true).with_context(|| format!("opening {}", path.display()))?;
        let disk: Disk = Arc::new(DiskModel::new(file, profile)?);
        let page = crate::modeled::image_block_size(path)?;
        let cache: Cache = Arc::new(PageCache::with_page_size(disk.clone(), cache_bytes, page));
        let opts = OpenOptions {
            alloc: AllocOptions {
                delalloc_bytes: held_limit(cache_bytes, alloc.delalloc_bytes),
                ..alloc
            },
            readdir,
            ..OpenOptions::default()
        };
        let fs = open_fs(&cache, path, &opts)?;
        let block_size = fs.block_size() as u64;
        let me = Self {
            path: path.to_path_buf(),
            disk,
            cache,
            fs: RwLock::new(Some(fs)),
            root: format!("/{dir}"),
            block_size,
            opts,
        };
        me.with(|fs| {
            fs.create(ext4kit_engine::ROOT_INO, dir.as_bytes(), NodeKind::Directory, DIR)
                .with_context(|| format!("mkdir {dir} in {}", path.display()))?;
            Ok(fs.sync()?)
        })?;
        Ok(me)
    }

    fn with<T>(&self, f: impl FnOnce(&Filesystem) -> Result<T>) -> Result<T> {
        let g = self.fs.read();
        f(g.as_ref()
            .ok_or_else(|| anyhow!("the file system was lost while dropping caches"))?)
    }

    fn full(&self, path: &str) -> String {
        if path.is_empty() {
            self.root.clone()
        } else {
            format!("{}/{path}", self.root)
        }
    }

    fn ino_of(&self, fs: &Filesystem, path: &str) -> Result<u32> {
        Ok(fs
            .resolve(self.full(path).as_bytes())
            .with_context(|| format!("resolve {path}"))?
            .ino)
    }

    /// The parent directory's inode and the last name of `path`.
    fn parent_of<'p>(&self, fs: &Filesystem, path: &'p str) -> Result<(u32, &'p str)> {
        let (parent, name) = split_parent(path);
        Ok((self.ino_of(fs, parent)?, name))
    }

    fn create_kind(&self, path: &str, kind: NodeKind, attr: Attr) -> Result<u32> {
        self.with(|fs| {
            let (parent, name) = self.parent_of(fs, path)?;
            Ok(fs
                .create(parent, name.as_bytes(), kind, attr)
                .with_context(|| format!("create {path}"))?
                .ino)
        })
    }

    /// The allocators the engine opened the image with.
    pub fn alloc(&self) -> AllocOptions {
        self.opts.alloc
    }

    /// The order this image's directories are listed in.
    pub fn readdir(&self) -> ReadDirOrder {
        self.opts.readdir.order
    }

    /// Unmounts and releases the image; the caller then checks it.
    pub fn finish(self) -> Result<PathBuf> {
        let fs = self
            .fs
            .into_inner()
            .ok_or_else(|| anyhow!("no file system to unmount"))?;
        fs.unmount()
            .with_context(|| format!("unmounting {}", self.path.display()))?;
        drop(self.cache);
        ensure!(
            Arc::strong_count(&self.disk) == 1,
            "the disk model is still shared after unmount"
        );
        Ok(self.path)
    }
}

/// Most file data delayed allocation may hold on a run with a page cache
/// of `cache_bytes`: the kernel's delayed pages are page-cache pages, and
/// it writes them back once they reach `vm.dirty_ratio` (20 %) of it. Held
/// data beyond that would be a second, unmodeled cache.
fn held_limit(cache_bytes: u64, default: usize) -> usize {
    usize::try_from(cache_bytes / 5)
        .unwrap_or(usize::MAX)
        .clamp(1 << 20, default.max(1 << 20))
}

fn open_fs(cache: &Cache, path: &Path, opts: &OpenOptions) -> Result<Filesystem> {
    Filesystem::open(Box::new(cache.clone()), opts.clone())
        .with_context(|| format!("opening {} with the engine", path.display()))
}

fn ino(f: &FileRef) -> u32 {
    match f.0 {
        Open::Engine(ino) => ino,
        Open::Host(_) => unreachable!("a host file given to the engine target"),
    }
}

impl BenchFs for EngineFs {
    fn mkdir(&self, path: &str) -> Result<()> {
        self.create_kind(path, NodeKind::Directory, DIR).map(drop)
    }

    fn create(&self, path: &str) -> Result<FileRef> {
        let ino = self.create_kind(path, NodeKind::Regular, FILE)?;
        self.with(|fs| Ok(fs.open_file(ino)?))?;
        Ok(FileRef(Open::Engine(ino)))
    }

    /// `Filesystem::create_new`: no lookup of the name; a linear
    /// directory's insert starts at the block that last had room.
    fn create_new_name(&self, path: &str) -> Result<FileRef> {
        self.with(|fs| {
            let (parent, name) = self.parent_of(fs, path)?;
            let ino = fs
                .create_new(parent, name.as_bytes(), NodeKind::Regular, FILE)
                .with_context(|| format!("create {path}"))?
                .ino;
            fs.open_file(ino)?;
            Ok(FileRef(Open::Engine(ino)))
        })
    }

    fn open(&self, path: &str, _write: bool) -> Result<FileRef> {
        self.with(|fs| {
            let ino = self.ino_of(fs, path)?;
            fs.open_file(ino)?;
            Ok(FileRef(Open::Engine(ino)))
        })
    }

    fn write_at(&self, f: &FileRef, offset: u64, data: &[u8]) -> Result<()> {
        self.with(|fs| {
            let mut done = 0;
            while done < data.len() {
                done += fs.write(ino(f), offset + done as u64, &data[done..])?;
            }
            Ok(())
        })
    }

    fn read_at(&self, f: &FileRef, offset: u64, buf: &mut [u8]) -> Result<usize> {
        self.with(|fs| Ok(fs.read_file_at(ino(f), offset, buf)?))
    }

    fn file_size(&self, f: &FileRef) -> Result<u64> {
        self.with(|fs| Ok(fs.inode(ino(f))?.size()))
    }

    fn fallocate(&self, f: &FileRef, offset: u64, len: u64) -> Result<()> {
        let mode = ext4kit_engine::FallocMode::Allocate { keep_size: false };
        self.with(|fs| Ok(fs.fallocate(ino(f), offset, len, mode)?))
    }

    fn fsync(&self, f: &FileRef) -> Result<()> {
        self.with(|fs| Ok(fs.sync_inode(ino(f))?))
    }

    fn close(&self, f: FileRef) -> Result<()> {
        self.with(|fs| Ok(fs.release_file(ino(&f))?))
    }

    fn stat(&self, path: &str) -> Result<Stat> {
        self.with(|fs| {
            let inode = fs
                .resolve(self.full(path).as_bytes())
                .with_context(|| format!("stat {path}"))?;
            let m = fs.metadata(&inode)?;
            Ok(Stat {
                ino: u64::from(inode.ino),
                size: m.size,
                is_dir: inode.is_dir(),
                blocks: m.blocks,
            })
        })
    }

    fn read_dir(&self, path: &str) -> Result<Vec<Entry>> {
        self.with(|fs| {
            let dir = fs
                .resolve(self.full(path).as_bytes())
                .with_context(|| format!("resolve {path}"))?;
            // The stream a mount's getdents reads: the kernel's hash order,
            // an itree's inode order, or the snapshot `readdir=inode` asks for.
            let mut stream = fs.dir_stream(&dir)?;
            let mut out = Vec::new();
            fs.read_dir_from(&dir, &mut stream, 0, |e, _| {
                if e.name != b"." && e.name != b".." {
                    out.push(Entry {
                        name: String::from_utf8_lossy(&e.name).into_owned(),
                        ino: u64::from(e.ino),
                    });
                }
                Ok(true)
            })
            .with_context(|| format!("readdir {path}"))?;
            Ok(out)
        })
    }

    fn unlink(&self, path: &str) -> Result<()> {
        self.with(|fs| {
            let (parent, name) = self.parent_of(fs, path)?;
            fs.unlink(parent, name.as_bytes())
                .with_context(|| format!("unlink {path}"))
        })
    }

    fn rmdir(&self, path: &str) -> Result<()> {
        self.with(|fs| {
            let (parent, name) = self.parent_of(fs, path)?;
            fs.rmdir(parent, name.as_bytes())
                .with_context(|| format!("rmdir {path}"))
        })
    }

    fn rename(&self, from: &str, to: &str) -> Result<()> {
        self.with(|fs| {
            let (p0, n0) = self.parent_of(fs, from)?;
            let (p1, n1) = self.parent_of(fs, to)?;
            fs.rename(p0, n0.as_bytes(), p1, n1.as_bytes(), RenameFlags::default())
                .with_context(|| format!("rename {from} {to}"))?;
            Ok(())
        })
    }

    fn sync(&self) -> Result<()> {
        self.with(|fs| Ok(fs.sync()?))
    }

    /// Unmounts, drops the page cache and the drive's cache, and opens the
    /// image again: the engine keeps metadata in memory, which only an
    /// unmount forgets.
    fn drop_caches(&mut self) -> Result<Cold> {
        let fs = self.fs.get_mut().take().ok_or_else(|| anyhow!("no file system"))?;
        fs.unmount()
            .with_context(|| format!("unmounting {}", self.path.display()))?;
        self.cache.drop_all().context("dropping the page cache")?;
        self.disk.drop_cache();
        *self.fs.get_mut() = Some(open_fs(&self.cache, &self.path, &self.opts)?);
        Ok(Cold::Yes)
    }

    fn extent_map(&self, path: &str) -> Result<Vec<Extent>> {
        self.with(|fs| {
            let inode = fs.resolve(self.full(path).as_bytes())?;
            let runs = fs.all_runs(&inode)?;
            let map = runs.iter().map(|r| Extent {
                logical: r.logical,
                physical: r.physical,
                len: r.len,
            });
            Ok(map.collect())
        })
    }

    fn extents(&self, path: &str) -> Result<u64> {
        self.with(|fs| {
            let inode = fs.resolve(self.full(path).as_bytes())?;
            let runs = fs.all_runs(&inode)?;
            let joined = runs
                .windows(2)
                .filter(|w| w[0].physical + w[0].len == w[1].physical)
                .count();
            Ok((runs.len() - joined) as u64)
        })
    }

    fn sample(&self) -> Sample {
        Sample {
            wall: std::time::Instant::now(),
            disk: Some(self.disk.stats()),
            cache: Some(self.cache.stats()),
        }
    }

    fn block_size(&self) -> u64 {
        self.block_size
    }

    fn cache_capacity(&self) -> Option<u64> {
        Some(self.cache.capacity_bytes())
    }
}

/// The engine's policies a run opens an image with.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Policy {
    /// Block and inode allocators, delayed allocation.
    pub alloc: AllocOptions,
    /// `readdir` order and snapshot limit (`-o readdir=`, `readdir_snapshot=`).
    pub readdir: ReadDirOptions,
}
