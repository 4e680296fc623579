//! Where a workload runs: an image through the engine on the disk model
//! (made when missing), a directory on any mounted file system, or a
//! kernel ext2/3/4 file system this run makes on a loop device and removes
//! afterwards. Every image ends checked by `e2fsck -fn`.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};
use ext4kit_engine::AllocOptions;
use ext4kit_engine::device::{DiskProfile, FileDevice};
use ext4kit_engine::dir::ReadDirOptions;
use ext4kit_engine::mkfs::{FsType, Media, MkfsOptions, mkfs};

use super::fs::BenchFs;
use super::host::HostFs;
use super::image::{EngineFs, Policy};
use crate::FsckOutcome;
use crate::system::{self, run_ok, tool};

/// What to run on, as the command line names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TargetSpec {
    /// An image file, made when missing.
    Image(PathBuf),
    /// A directory on a mounted file system.
    Dir(PathBuf),
    /// A kernel file system of this type (`ext2`, `ext3`, `ext4`) on a
    /// loop device made for the run, in a scratch directory.
    Kernel(String),
}

/// How a target is opened.
#[derive(Debug, Clone)]
pub struct TargetOptions {
    /// Disk model under an image.
    pub disk: DiskProfile,
    /// Page cache in front of the disk model.
    pub cache_bytes: u64,
    /// Size of an image this run makes.
    pub image_bytes: u64,
    /// Inodes of an image this run makes (0: mkfs's default).
    pub inodes: u64,
    /// `-t` of an image this run makes: `ext2`, `ext3` or `ext4` (the
    /// default), the feature set the `-O` list then edits. A kernel
    /// target takes its type from `--kernel`.
    pub fs_type: Option<String>,
    /// `-O` features of an image this run makes, e.g. `^dir_index`.
    pub features: Vec<String>,
    /// `-b` block size of an image this run makes (`None`: an image by
    /// its size as mke2fs picks, 1 KiB below 512 MiB; a kernel one 4 KiB).
    pub block_size: Option<u32>,
    /// `-G` of an image this run makes: groups per flex group, or `auto`
    /// (ext4kit's mkfs, with the disk model's media); `None`: 16.
    pub flex: Option<String>,
    /// `-E` options of an image this run's mkfs makes, e.g.
    /// `flex_meta=middle` (ext4kit's mkfs only).
    pub extended: Vec<String>,
    /// Where a kernel target's image goes.
    pub scratch: PathBuf,
    /// Allocation policies the engine opens an image with. A directory or
    /// kernel target allocates as its own file system does, so anything
    /// but the default is refused there rather than silently not applied.
    pub alloc: AllocOptions,
    /// The order the engine lists directories in (`-o readdir=`); a
    /// directory or kernel target lists as its file system does.
    pub readdir: ReadDirOptions,
}

impl Default for TargetOptions {
    /// The seed's HP SAS 10K drive, a 64 MiB page cache, a new image as
    /// large as the workload asks with mke2fs's defaults, scratch space in
    /// /var/tmp.
    fn default() -> Self {
        Self {
            disk: DiskProfile::Hdd(ext4kit_engine::device::disk_model::HddProfile::hp_sas_10k()),
            cache_bytes: 64 << 20,
            image_bytes: 0,
            inodes: 0,
            fs_type: None,
            features: Vec::new(),
            block_size: None,
            flex: None,
            extended: Vec::new(),
            scratch: PathBuf::from("/var/tmp"),
            alloc: AllocOptions::default(),
            readdir: ReadDirOptions::default(),
        }
    }
}

/// Offset and value of the superblock's magic number.
const MAGIC_AT: u64 = 1024 + 56;
const EXT_MAGIC: [u8; 2] = 0xEF53u16.to_le_bytes();

impl TargetSpec {
    /// Classifies a `--target PATH`: a directory, an ext2/3/4 image, or a
    /// path where a new image may be made.
    pub fn from_path(path: &Path) -> Result<Self> {
        let expected = "expected an ext2/3/4 image file (made if missing) or a directory";
        match std::fs::metadata(path) {
            Ok(m) if m.is_dir() => Ok(Self::Dir(path.to_path_buf())),
            Ok(m) if m.is_file() => {
                use std::os::unix::fs::FileExt as _;
                let f = std::fs::File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
                let mut magic = [0u8; 2];
                if f.read_exact_at(&mut magic, MAGIC_AT).is_err() || magic != EXT_MAGIC {
                    bail!(
                        "{}: a regular file without an ext2/3/4 superblock; {expected}",
                        path.display()
                    );
                }
                Ok(Self::Image(path.to_path_buf()))
            }
            Ok(_) => bail!("{}: neither a regular file nor a directory; {expected}", path.display()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let parent = path
                    .parent()
                    .filter(|p| !p.as_os_str().is_empty())
                    .unwrap_or(Path::new("."));
                if !parent.is_dir() {
                    bail!(
                        "{}: does not exist and its parent {} is not a directory; {expected}",
                        path.display(),
                        parent.display()
                    );
                }
                Ok(Self::Image(path.to_path_buf()))
            }
            Err(e) => bail!("{}: {e}; {expected}", path.display()),
        }
    }

    /// `ext2`, `ext3` or `ext4`.
    pub fn kernel(kind: &str) -> Result<Self> {
        match kind {
            "ext2" | "ext3" | "ext4" => Ok(Self::Kernel(kind.to_string())),
            _ => bail!("--kernel {kind}: expected ext2, ext3 or ext4"),
        }
    }

    /// A short name for reports.
    pub fn describe(&self) -> String {
        match self {
            Self::Image(p) => p.display().to_string(),
            Self::Dir(p) => p.display().to_string(),
            Self::Kernel(k) => format!("kernel {k} (loop)"),
        }
    }

    /// Fails unless the engine serves this target: `what` (an allocation
    /// policy, a readdir order) means nothing to a directory or kernel
    /// target.
    pub fn engine_only(&self, what: &str) -> Result<()> {
        match self {
            Self::Image(_) => Ok(()),
            Self::Dir(p) => bail!(
                "{what} is the engine's choice; directory {} works as the file system it is on does",
                p.display()
            ),
            Self::Kernel(k) => {
                bail!("{what} is the engine's choice; a kernel {k} target uses the kernel's")
            }
        }
    }

    /// `image`, `directory` or `kernel`, for reports.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Image(_) => "image",
            Self::Dir(_) => "directory",
            Self::Kernel(_) => "kernel",
        }
    }
}

/// An opened target.
pub struct Target(Inner);

enum Inner {
    Image { fs: Box<EngineFs>, made: bool },
    Dir { fs: HostFs, work: tempfile::TempDir },
    Kernel { fs: Option<HostFs>, mount: LoopMount },
}

/// What closing a target found.
pub struct Closed {
    /// `e2fsck -fn` of the image, for image and kernel targets.
    pub fsck: Option<FsckOutcome>,
    /// The image was made by this run.
    pub image_made: bool,
}

impl Target {
    /// Opens `spec` for workload `name`, whose files go into a new
    /// directory named after it.
    pub fn open(spec: &TargetSpec, name: &str, o: &TargetOptions) -> Result<Self> {
        if o.readdir != ReadDirOptions::default() {
            spec.engine_only("a readdir order")?;
        }
        if o.alloc != AllocOptions::default() {
            spec.engine_only("an allocation policy")?;
        }
        match spec {
            TargetSpec::Image(path) => {
                let made = !path.exists();
                if made {
                    make_image(path, o)?;
                }
                let dir = free_name(name, |n| image_has(path, n))?;
                Ok(Self(Inner::Image {
                    fs: Box::new(EngineFs::open(
                        path,
                        &o.disk,
                        o.cache_bytes,
                        Policy {
                            alloc: o.alloc,
                            readdir: o.readdir,
                        },
                        &dir,
                    )?),
                    made,
                }))
            }
            TargetSpec::Dir(dir) => {
                let work = tempfile::Builder::new()
                    .prefix(&format!("{name}."))
                    .tempdir_in(dir)
                    .with_context(|| format!("cannot make a directory in {}", dir.display()))?;
                Ok(Self(Inner::Dir {
                    fs: HostFs::new(work.path())?,
                    work,
                }))
            }
            TargetSpec::Kernel(kind) => {
                let mount = LoopMount::new(kind, o)?;
                let dir = mount.dir.join(name);
                std::fs::create_dir(&dir).with_context(|| format!("mkdir {}", dir.display()))?;
                Ok(Self(Inner::Kernel {
                    fs: Some(HostFs::new(&dir)?),
                    mount,
                }))
            }
        }
    }

    /// The allocators the engine opened an image target with.
    pub fn alloc(&self) -> Option<AllocOptions> {
        match &self.0 {
            Inner::Image { fs, .. } => Some(fs.alloc()),
            Inner::Dir { .. } | Inner::Kernel { .. } => None,
        }
    }

    /// The file system the workload works on.
    pub fn fs(&mut self) -> &mut dyn BenchFs {
        match &mut self.0 {
            Inner::Image { fs, .. } => fs.as_mut(),
            Inner::Dir { fs, .. } => fs,
            Inner::Kernel { fs, .. } => fs.as_mut().expect("a kernel target is open until closed"),
        }
    }

    /// Ends the run: unmounts, removes what the run made in a directory,
    /// and checks images. `inspect` reads an image target's image once it
    /// is unmounted (a kernel one before it is removed); a directory
    /// target has none to give it.
    pub fn close(self, inspect: &mut dyn FnMut(&Path) -> Result<()>) -> Result<Closed> {
        match self.0 {
            Inner::Image { fs, made } => {
                let path = fs.finish()?;
                inspect(&path)?;
                Ok(Closed {
                    fsck: Some(fsck_image(&path, made)?),
                    image_made: made,
                })
            }
            Inner::Dir { fs, work } => {
                drop(fs);
                let at = work.path().display().to_string();
                work.close().with_context(|| format!("cannot remove {at}"))?;
                Ok(Closed {
                    fsck: None,
                    image_made: false,
                })
            }
            Inner::Kernel { mut fs, mut mount } => {
                fs.take();
                mount.unmount()?;
                inspect(&mount.image)?;
                let fsck = mount.close()?;
                Ok(Closed {
                    fsck: Some(fsck),
                    image_made: true,
                })
            }
        }
    }
}

/// `name`, or `name.2`, `name.3`… the first one `taken` says is free.
fn free_name(name: &str, taken: impl Fn(&str) -> Result<bool>) -> Result<String> {
    for k in 1u32..10_000 {
        let n = if k == 1 {
            name.to_string()
        } else {
            format!("{name}.{k}")
        };
        if !taken(&n)? {
            return Ok(n);
        }
    }
    bail!("{name}.1 to {name}.9999 all exist in the target")
}

/// Whether the image's root holds `name` (read-only look, no lock kept).
fn image_has(path: &Path, name: &str) -> Result<bool> {
    let dev = FileDevice::open(path, false).with_context(|| format!("opening {}", path.display()))?;
    let fs = ext4kit_engine::Filesystem::open(Box::new(dev), ext4kit_engine::OpenOptions::default())
        .with_context(|| format!("opening {} with the engine", path.display()))?;
    let root = fs.inode(ext4kit_engine::ROOT_INO)?;
    Ok(fs.lookup(&root, name.as_bytes()).is_ok())
}

/// A sparse image made by the engine's mkfs, with a fixed identity
/// (UUID, hash seed, time) so two runs lay out and hash alike.
fn make_image(path: &Path, o: &TargetOptions) -> Result<()> {
    let f = std::fs::File::create_new(path).with_context(|| format!("cannot create {}", path.display()))?;
    f.set_len(o.image_bytes)
        .with_context(|| format!("cannot size {} to {} bytes", path.display(), o.image_bytes))?;
    drop(f);
    let made = (|| {
        let dev = FileDevice::open(path, true).with_context(|| format!("opening {}", path.display()))?;
        let fs_type = match o.fs_type.as_deref() {
            None | Some("ext4") => FsType::Ext4,
            Some("ext3") => FsType::Ext3,
            Some("ext2") => FsType::Ext2,
            Some(t) => bail!("file-system type {t}: expected ext2, ext3 or ext4"),
        };
        let mut opts = MkfsOptions {
            fs_type,
            inode_count: (o.inodes > 0).then_some(o.inodes),
            block_size: o.block_size,
            uuid: Some(*b"ext4kit-bench-00"),
            hash_seed: Some(*b"bench-suite-seed"),
            timestamp: Some(1_700_000_000),
            device_zeroed: true,
            ..MkfsOptions::default()
        };
        for feature in &o.features {
            opts.add_features(feature);
        }
        for e in &o.extended {
            opts.add_extended(e)?;
        }
        set_flex(&mut opts, o)?;
        mkfs(&dev, &opts).with_context(|| format!("mkfs of {}", path.display()))
    })();
    if made.is_err() {
        let _ = std::fs::remove_file(path);
    }
    made.map(drop)
}

/// `-G` for the engine's mkfs: a number, or `auto` with the media the
/// disk model stands for (a rotating disk or flash; `none` is unknown).
fn set_flex(opts: &mut MkfsOptions, o: &TargetOptions) -> Result<()> {
    match o.flex.as_deref() {
        None => {}
        Some("auto") => {
            opts.flex_auto = true;
            opts.media = match o.disk {
                DiskProfile::Hdd(_) => Some(Media::Hdd),
                DiskProfile::Ssd(_) => Some(Media::Ssd),
                DiskProfile::Untimed => None,
            };
        }
        Some(n) => opts.groups_per_flex = Some(n.parse().with_context(|| format!("flex={n}: a number or auto"))?),
    }
    Ok(())
}

/// A kernel file system on a loop device: made, mounted, and on close (or
/// drop, after an error or Ctrl-C) unmounted and its image removed.
pub struct LoopMount {
    image: PathBuf,
    dir: PathBuf,
    mounted: bool,
    _scratch: tempfile::TempDir,
}

impl LoopMount {
    fn new(kind: &str, o: &TargetOptions) -> Result<Self> {
        if !o.extended.is_empty() {
            bail!(
                "-E {} is for ext4kit's mkfs; a kernel target is made by mke2fs",
                o.extended.join(",")
            );
        }
        if o.flex.as_deref() == Some("auto") {
            bail!("flex=auto is for ext4kit's mkfs; give mke2fs a number");
        }
        if !system::is_root() {
            bail!("--kernel {kind} mounts a loop device, which takes root");
        }
        let scratch = tempfile::Builder::new()
            .prefix("ext4kit-bench.")
            .tempdir_in(&o.scratch)
            .with_context(|| format!("cannot make a directory in {}", o.scratch.display()))?;
        let image = scratch.path().join(format!("{kind}.img"));
        let dir = scratch.path().join("mnt");
        std::fs::create_dir(&dir)?;
        let mut extra: Vec<String> = vec!["-t".into(), kind.into()];
        if let Some(b) = o.block_size {
            extra.extend(["-b".into(), b.to_string()]);
        }
        if o.inodes > 0 {
            extra.extend(["-N".into(), o.inodes.to_string()]);
        }
        if !o.features.is_empty() {
            extra.push("-O".into());
            extra.push(o.features.join(","));
        }
        if let Some(n) = o.flex.as_deref() {
            extra.extend(["-G".into(), n.to_string()]);
        }
        let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
        system::mkfs_with(&image, o.image_bytes, &extra)?;
        run_ok(
            Command::new(tool("mount")?)
                .args(["-t", kind, "-o", "loop"])
                .arg(&image)
                .arg(&dir),
        )?;
        Ok(Self {
            image,
            dir,
            mounted: true,
            _scratch: scratch,
        })
    }

    /// Unmounts (which frees the loop device) and checks the image.
    fn close(&mut self) -> Result<FsckOutcome> {
        self.unmount()?;
        system::e2fsck(&self.image)
    }

    /// Unmounts, retrying for a second while the mount is busy: a process
    /// another thread forks inherits this one's descriptors until it execs,
    /// so a file the workload closed can keep the mount busy for a moment.
    /// Still busy after that, the mount is detached lazily (the kernel
    /// finishes it when the last user goes) and the error returned.
    fn unmount(&mut self) -> Result<()> {
        if !self.mounted {
            return Ok(());
        }
        let umount = tool("umount")?;
        let mut last = None;
        for _ in 0..50 {
            match run_ok(Command::new(&umount).arg(&self.dir)) {
                Ok(_) => {
                    self.mounted = false;
                    return Ok(());
                }
                Err(e) => last = Some(e),
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        run_ok(Command::new(&umount).arg("-l").arg(&self.dir))?;
        self.mounted = false;
        Err(last
            .expect("an attempt failed")
            .context("the mount stayed busy; detached it lazily"))
    }
}

impl Drop for LoopMount {
    fn drop(&mut self) {
        if let Err(e) = self.unmount() {
            eprintln!("bench: could not unmount {}: {e:#}", self.dir.display());
        }
    }
}

/// `e2fsck -fn` of an image this run used. e2fsck refuses the `itree`
/// feature, so an itree image is checked without its itrees, as
/// `ext4kit tune -O ^itree` leaves it: in place when the run made the
/// image, else on a sparse copy beside it.
fn fsck_image(path: &Path, made: bool) -> Result<FsckOutcome> {
    if !has_itree(path)? {
        return system::e2fsck(path);
    }
    let checked = if made {
        path.to_path_buf()
    } else {
        let copy = path.with_extension("itree-fsck");
        run_ok(Command::new("cp").arg("--sparse=always").arg(path).arg(&copy))?;
        copy
    };
    let strip = || -> Result<FsckOutcome> {
        let dev = FileDevice::open(&checked, true)?;
        let fs = ext4kit_engine::Filesystem::open(Box::new(dev), ext4kit_engine::OpenOptions::default())?;
        fs.itree_remove_all()?;
        fs.unmount()?;
        system::e2fsck(&checked)
    };
    let out = strip();
    if !made {
        let _ = std::fs::remove_file(&checked);
    }
    out.with_context(|| format!("checking {} without its itrees", path.display()))
}

fn has_itree(path: &Path) -> Result<bool> {
    use std::os::unix::fs::FileExt as _;
    let f = std::fs::File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    // s_feature_ro_compat: offset 0x64 of the superblock at byte 1024.
    let mut ro = [0u8; 4];
    f.read_exact_at(&mut ro, 1024 + 0x64)?;
    let bit = ext4kit_format::features::RoCompatFeatures::ITREE.0;
    Ok(u32::from_le_bytes(ro) & bit != 0)
}
