//! The five operations `hugedir` times, on the engine's library API or
//! through system calls on a mounted directory (the FUSE mount or the
//! kernel's loop mount). Nothing here keeps per-entry state: a listing is
//! counted as it streams, so the harness adds nothing to the peak RSS that
//! grows with the directory.

use std::fs::File;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, ensure};
use ext4kit_engine::device::FileDevice;
use ext4kit_engine::{Attr, Filesystem, Inode, NodeKind, OpenOptions, ROOT_INO};

/// Attributes of every entry the library target makes.
const FILE: Attr = Attr {
    perm: 0o644,
    uid: 0,
    gid: 0,
};

/// One directory of one target.
pub trait HugeOps {
    /// Creates the empty regular file `name` (fails if it exists).
    fn create(&mut self, name: &str) -> Result<()>;
    /// Looks `name` up and reads its inode (`lstat`); returns its number.
    fn lookup(&mut self, name: &str) -> Result<u64>;
    /// Lists the directory, reading each entry's inode too when `stat`;
    /// returns how many names other than `.` and `..` it holds.
    fn list(&mut self, stat: bool) -> Result<u64>;
    /// Removes `name`.
    fn unlink(&mut self, name: &str) -> Result<()>;
    /// Makes everything durable.
    fn sync(&mut self) -> Result<()>;
    /// Lets go of the file system (the library unmounts its engine).
    fn finish(self: Box<Self>) -> Result<()> {
        Ok(())
    }
}

/// The engine on an image file, through its library API.
pub struct LibraryOps {
    fs: Option<Filesystem>,
    dir: u32,
    /// The directory's inode as last read: lookups and listings reuse it
    /// until a create or an unlink changes it.
    inode: Option<Inode>,
}

impl LibraryOps {
    /// Opens `image` read-write with a metadata cache of `cache_bytes`
    /// (or the engine's default) and makes (or, `fresh` false, finds) the
    /// directory `name` in its root.
    pub fn open(image: &Path, name: &str, fresh: bool, cache_bytes: Option<usize>) -> Result<Self> {
        let dev = FileDevice::open(image, true).with_context(|| format!("opening {}", image.display()))?;
        let mut opts = OpenOptions::default();
        if let Some(bytes) = cache_bytes {
            opts.cache_bytes = bytes;
        }
        let fs = Filesystem::open(Box::new(dev), opts)
            .with_context(|| format!("opening {} with the engine", image.display()))?;
        let dir = if fresh {
            let attr = Attr { perm: 0o755, ..FILE };
            fs.create(ROOT_INO, name.as_bytes(), NodeKind::Directory, attr)?.ino
        } else {
            let root = fs.inode(ROOT_INO)?;
            fs.lookup(&root, name.as_bytes())?
        };
        Ok(Self {
            fs: Some(fs),
            dir,
            inode: None,
        })
    }

    fn fs(&self) -> &Filesystem {
        self.fs.as_ref().expect("open until closed")
    }

    fn dir_inode(&mut self) -> Result<Inode> {
        if self.inode.is_none() {
            self.inode = Some(self.fs().inode(self.dir)?);
        }
        Ok(self.inode.clone().expect("just read"))
    }
}

impl HugeOps for LibraryOps {
    fn create(&mut self, name: &str) -> Result<()> {
        self.inode = None;
        self.fs().create(self.dir, name.as_bytes(), NodeKind::Regular, FILE)?;
        Ok(())
    }

    fn lookup(&mut self, name: &str) -> Result<u64> {
        let dir = self.dir_inode()?;
        let ino = self.fs().lookup(&dir, name.as_bytes())?;
        Ok(u64::from(self.fs().inode(ino)?.ino))
    }

    fn list(&mut self, stat: bool) -> Result<u64> {
        let dir = self.dir_inode()?;
        let fs = self.fs();
        let mut names = 0u64;
        fs.read_dir_each(&dir, |e| {
            if e.name != b"." && e.name != b".." {
                names += 1;
                if stat {
                    fs.inode(e.ino)?;
                }
            }
            Ok(true)
        })?;
        Ok(names)
    }

    fn unlink(&mut self, name: &str) -> Result<()> {
        self.inode = None;
        Ok(self.fs().unlink(self.dir, name.as_bytes())?)
    }

    fn sync(&mut self) -> Result<()> {
        Ok(self.fs().sync()?)
    }

    /// Unmounts: everything written, the image lock released.
    fn finish(mut self: Box<Self>) -> Result<()> {
        match self.fs.take() {
            Some(fs) => Ok(fs.unmount()?),
            None => Ok(()),
        }
    }
}

/// A directory on a mounted file system, through system calls.
pub struct HostOps {
    dir: PathBuf,
    path: PathBuf,
}

impl HostOps {
    /// Works in `dir`, which exists.
    pub fn new(dir: &Path) -> Self {
        Self {
            dir: dir.to_path_buf(),
            path: dir.to_path_buf(),
        }
    }

    /// `dir/name`, reusing one buffer.
    fn at(&mut self, name: &str) -> &Path {
        self.path.clone_from(&self.dir);
        self.path.push(name);
        &self.path
    }
}

impl HugeOps for HostOps {
    fn create(&mut self, name: &str) -> Result<()> {
        let p = self.at(name);
        File::options()
            .write(true)
            .create_new(true)
            .open(p)
            .with_context(|| format!("create {}", p.display()))?;
        Ok(())
    }

    fn lookup(&mut self, name: &str) -> Result<u64> {
        let p = self.at(name);
        Ok(std::fs::symlink_metadata(p)
            .with_context(|| format!("lstat {}", p.display()))?
            .ino())
    }

    fn list(&mut self, stat: bool) -> Result<u64> {
        let mut names = 0u64;
        for e in std::fs::read_dir(&self.dir).with_context(|| format!("opendir {}", self.dir.display()))? {
            let e = e.with_context(|| format!("readdir {}", self.dir.display()))?;
            names += 1;
            if stat {
                e.metadata().with_context(|| format!("lstat {:?}", e.file_name()))?;
            }
        }
        Ok(names)
    }

    fn unlink(&mut self, name: &str) -> Result<()> {
        let p = self.at(name);
        std::fs::remove_file(p).with_context(|| format!("unlink {}", p.display()))
    }

    fn sync(&mut self) -> Result<()> {
        crate::system::syncfs(&self.dir)
    }
}

/// The directory `name`'s size in bytes and htree index levels, read from
/// the unmounted `image` by the engine (the same meter for every target).
pub fn inspect(image: &Path, name: &str) -> Result<(u64, Option<u8>)> {
    let dev = FileDevice::open(image, false).with_context(|| format!("opening {}", image.display()))?;
    let fs = Filesystem::open(Box::new(dev), OpenOptions::default())
        .with_context(|| format!("opening {} with the engine", image.display()))?;
    let root = fs.inode(ROOT_INO)?;
    let dir = fs.inode(fs.lookup(&root, name.as_bytes())?)?;
    ensure!(dir.is_dir(), "{name} is not a directory in {}", image.display());
    Ok((dir.size(), fs.dir_index_depth(&dir)?))
}
