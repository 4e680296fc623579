//! Building ext2/3/4 images with mke2fs, populated either by `mke2fs -d` or
//! by the kernel (loop mount + `cp -a`), each checked with `e2fsck -fn`.

use std::ffi::OsString;
use std::fmt;
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};

use crate::fixture::{self, FragmentOptions, FragmentedFile};
use crate::mount::LoopMount;
use crate::tools;

/// Which mke2fs front end builds the image.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FsType {
    /// `mkfs.ext2`.
    Ext2,
    /// `mkfs.ext3`.
    Ext3,
    /// `mkfs.ext4`.
    Ext4,
}

impl FsType {
    /// The mke2fs program for this type (`mkfs.ext4`, …).
    pub fn mkfs_program(self) -> &'static str {
        match self {
            FsType::Ext2 => "mkfs.ext2",
            FsType::Ext3 => "mkfs.ext3",
            FsType::Ext4 => "mkfs.ext4",
        }
    }

    /// The name (`ext2`, `ext3`, `ext4`).
    pub fn name(self) -> &'static str {
        match self {
            FsType::Ext2 => "ext2",
            FsType::Ext3 => "ext3",
            FsType::Ext4 => "ext4",
        }
    }
}

impl fmt::Display for FsType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// How to make one image: `mkfs.<fs_type> -F -q [extra_args] IMG SIZE`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageSpec {
    /// A short name, used for the image file name and in reports.
    pub label: String,
    /// Which mkfs front end.
    pub fs_type: FsType,
    /// Image size in bytes (the file is sparse).
    pub size: u64,
    /// Extra mke2fs arguments (e.g. `-b`, `1024`, `-O`, `^metadata_csum`).
    pub extra_args: Vec<String>,
}

impl ImageSpec {
    /// A spec from string arguments.
    pub fn new(label: &str, fs_type: FsType, size: u64, extra_args: &[&str]) -> Self {
        ImageSpec {
            label: label.to_string(),
            fs_type,
            size,
            extra_args: extra_args.iter().map(|s| s.to_string()).collect(),
        }
    }

    /// Appends mke2fs arguments.
    pub fn with_args(mut self, args: &[&str]) -> Self {
        self.extra_args.extend(args.iter().map(|s| s.to_string()));
        self
    }

    /// Replaces the size.
    pub fn with_size(mut self, size: u64) -> Self {
        self.size = size;
        self
    }

    /// Asks for at least `n` inodes (`-N n`), e.g. for the 50,000-entry
    /// directory on a small image.
    pub fn with_inodes(self, n: u64) -> Self {
        let n = n.to_string();
        self.with_args(&["-N", &n])
    }

    /// The block size given with `-b`, if any.
    pub fn block_size(&self) -> Option<u64> {
        self.arg_after("-b").and_then(|v| v.parse().ok())
    }

    /// The inode size given with `-I`, if any.
    pub fn inode_size(&self) -> Option<u64> {
        self.arg_after("-I").and_then(|v| v.parse().ok())
    }

    fn arg_after(&self, flag: &str) -> Option<&str> {
        let i = self.extra_args.iter().rposition(|a| a == flag)?;
        self.extra_args.get(i + 1).map(String::as_str)
    }

    /// Whether inodes keep nanosecond timestamps: false with 128-byte inodes
    /// (`-I 128`), which have no room for the extra time fields.
    pub fn nanosecond_timestamps(&self) -> bool {
        self.inode_size().is_none_or(|s| s > 128)
    }

    /// Whether the file system maps files with extents (ext4 unless
    /// `-O ^extent`/`^extents`).
    pub fn uses_extents(&self) -> bool {
        self.fs_type == FsType::Ext4
            && !self
                .extra_args
                .iter()
                .any(|a| a.split(',').any(|f| f == "^extent" || f == "^extents"))
    }
}

/// The standard image matrix, each of `size` bytes. Block sizes are explicit
/// (`-b 4096` for the "default" ones) because mke2fs would pick 1 KiB blocks
/// for images under 512 MiB:
///
/// `ext2`, `ext3`, `ext4`, `ext4-1k` (`-b 1024`), `ext4-nocsum`
/// (`-O ^metadata_csum`), `ext4-64bit-metabg` (`-O 64bit,meta_bg,^resize_inode`),
/// `ext4-inline` (`-O inline_data`), `ext4-i128` (`-I 128`),
/// `ext4-orphanfile-csumseed` (`-O orphan_file,metadata_csum_seed`),
/// `ext4-64k` (`-b 65536`; kernels with 4 KiB pages refuse to mount it).
pub fn matrix(size: u64) -> Vec<ImageSpec> {
    use FsType::*;
    vec![
        ImageSpec::new("ext2", Ext2, size, &["-b", "4096"]),
        ImageSpec::new("ext3", Ext3, size, &["-b", "4096"]),
        ImageSpec::new("ext4", Ext4, size, &["-b", "4096"]),
        ImageSpec::new("ext4-1k", Ext4, size, &["-b", "1024"]),
        ImageSpec::new("ext4-nocsum", Ext4, size, &["-b", "4096", "-O", "^metadata_csum"]),
        ImageSpec::new(
            "ext4-64bit-metabg",
            Ext4,
            size,
            &["-b", "4096", "-O", "64bit,meta_bg,^resize_inode"],
        ),
        ImageSpec::new("ext4-inline", Ext4, size, &["-b", "4096", "-O", "inline_data"]),
        ImageSpec::new("ext4-i128", Ext4, size, &["-b", "4096", "-I", "128"]),
        ImageSpec::new(
            "ext4-orphanfile-csumseed",
            Ext4,
            size,
            &["-b", "4096", "-O", "orphan_file,metadata_csum_seed"],
        ),
        ImageSpec::new("ext4-64k", Ext4, size, &["-b", "65536"]),
    ]
}

/// Options for [`Image::kernel`].
#[derive(Debug, Clone)]
pub struct KernelPopulate {
    /// Also write the depth-2 fragmented files (see
    /// [`fixture::fragment_through_kernel`]).
    pub fragment: Option<FragmentOptions>,
    /// Fail unless every guaranteed-deep fragmented file reaches extent
    /// depth >= 2 (checked with debugfs; only on extent file systems).
    pub require_depth2: bool,
    /// Extra mount options for the read-write mount.
    pub mount_options: Vec<String>,
}

impl Default for KernelPopulate {
    fn default() -> Self {
        KernelPopulate {
            fragment: Some(FragmentOptions::default()),
            require_depth2: true,
            mount_options: Vec::new(),
        }
    }
}

/// A built image file (kept until the caller deletes `dir`).
#[derive(Debug, Clone)]
pub struct Image {
    /// What it was built from.
    pub spec: ImageSpec,
    /// The image file.
    pub path: PathBuf,
    /// Files written by [`fixture::fragment_through_kernel`], if any, relative
    /// to the image's root.
    pub fragmented: Vec<FragmentedFile>,
    /// Extent depth of each fragmented file, as debugfs reports it (`None`
    /// for block-mapped files).
    pub fragmented_depths: Vec<Option<u32>>,
}

fn mkfs(spec: &ImageSpec, dir: &Path, extra: &[OsString]) -> io::Result<PathBuf> {
    tools::require_tool(spec.fs_type.mkfs_program()).map_err(io::Error::other)?;
    let path = dir.join(format!("{}.img", spec.label));
    let f = File::create(&path)?;
    f.set_len(spec.size)?;
    drop(f);
    let mut args: Vec<OsString> = vec!["-F".into(), "-q".into()];
    args.extend(spec.extra_args.iter().map(OsString::from));
    args.extend_from_slice(extra);
    args.push(path.clone().into());
    tools::run_ok(spec.fs_type.mkfs_program(), &args)?;
    Ok(path)
}

/// Sets `to`'s atime and mtime (with nanoseconds) to `from`'s.
fn copy_times(from: &Path, to: &Path) -> io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::symlink_metadata(from)?;
    let ts = |s: i64, ns: i64| rustix::fs::Timespec {
        tv_sec: s,
        tv_nsec: ns as _,
    };
    let times = rustix::fs::Timestamps {
        last_access: ts(m.atime(), m.atime_nsec()),
        last_modification: ts(m.mtime(), m.mtime_nsec()),
    };
    rustix::fs::utimensat(rustix::fs::CWD, to, &times, rustix::fs::AtFlags::SYMLINK_NOFOLLOW)?;
    Ok(())
}

impl Image {
    /// Makes an empty image in `dir` (`<label>.img`) and checks it with
    /// `e2fsck -fn`.
    pub fn empty(spec: &ImageSpec, dir: &Path) -> io::Result<Image> {
        let path = mkfs(spec, dir, &[])?;
        tools::assert_fsck_clean(&path)?;
        Ok(Image {
            spec: spec.clone(),
            path,
            fragmented: Vec::new(),
            fragmented_depths: Vec::new(),
        })
    }

    /// Makes an image populated by `mke2fs -d SRC` and checks it with
    /// `e2fsck -fn`. No mount or root needed (mke2fs 1.47 drops timestamp
    /// nanoseconds: compare whole seconds).
    pub fn mkfs_d(spec: &ImageSpec, src: &Path, dir: &Path) -> io::Result<Image> {
        let path = mkfs(spec, dir, &["-d".into(), src.into()])?;
        tools::assert_fsck_clean(&path)?;
        Ok(Image {
            spec: spec.clone(),
            path,
            fragmented: Vec::new(),
            fragmented_depths: Vec::new(),
        })
    }

    /// Makes an empty image, loop-mounts it read-write, copies `src` in with
    /// `cp -a --preserve=all SRC/. MNT/` (when given), writes the fragmented
    /// files (when asked; the root's times are then restored from `src`),
    /// unmounts, checks it with `e2fsck -fn` and, when
    /// asked, that the fragmented files reached extent depth 2.
    pub fn kernel(spec: &ImageSpec, src: Option<&Path>, dir: &Path, how: &KernelPopulate) -> io::Result<Image> {
        let path = mkfs(spec, dir, &[])?;
        let mut fragmented = Vec::new();
        {
            let opts: Vec<&str> = how.mount_options.iter().map(String::as_str).collect();
            let mnt = LoopMount::rw(&path, &opts)?;
            if let Some(src) = src {
                let mut from = src.as_os_str().to_owned();
                from.push("/.");
                let args: Vec<OsString> = vec![
                    "-a".into(),
                    "--preserve=all".into(),
                    from,
                    mnt.path().as_os_str().to_owned(),
                ];
                tools::run_ok("cp", &args)?;
            }
            if let Some(f) = &how.fragment {
                fragmented = fixture::fragment_through_kernel(mnt.path(), f)?;
                if let Some(src) = src {
                    // Creating the fragment directory touched the root: give
                    // it back the source root's times, as `cp -a` had set them.
                    copy_times(src, mnt.path())?;
                }
            }
            mnt.unmount()?;
        }
        tools::assert_fsck_clean(&path)?;
        let mut depths = Vec::new();
        for f in &fragmented {
            let in_fs = format!("/{}", f.rel_path.display());
            let depth = tools::extent_depth(&path, &in_fs)?;
            if how.require_depth2 && spec.uses_extents() && f.guaranteed_deep && depth.unwrap_or(0) < 2 {
                return Err(io::Error::other(format!(
                    "{}: {in_fs} has extent depth {depth:?}, wanted >= 2",
                    spec.label
                )));
            }
            depths.push(depth);
        }
        Ok(Image {
            spec: spec.clone(),
            path,
            fragmented,
            fragmented_depths: depths,
        })
    }

    /// `e2fsck -fn` on the image.
    pub fn fsck(&self) -> io::Result<tools::FsckResult> {
        tools::e2fsck_fn(&self.path)
    }

    /// Loop-mounts the image read-only.
    pub fn mount_ro(&self) -> io::Result<LoopMount> {
        LoopMount::ro(&self.path)
    }

    /// Tries a read-only kernel mount and unmounts again: `Err` carries the
    /// kernel's refusal (e.g. 64 KiB blocks on a 4 KiB-page machine).
    pub fn kernel_can_mount(&self) -> Result<(), String> {
        let m = self.mount_ro().map_err(|e| e.to_string())?;
        m.unmount().map_err(|e| e.to_string())
    }
}

/// One row of [`probe_matrix`].
#[derive(Debug, Clone)]
pub struct ProbeResult {
    /// The spec probed.
    pub spec: ImageSpec,
    /// mkfs and `e2fsck -fn` of the empty image (`Err` carries the output).
    pub built: Result<(), String>,
    /// Whether the kernel mounts it read-only (`Err` carries why not).
    pub mounts: Result<(), String>,
}

/// Makes every spec empty in `dir`, checks it with `e2fsck -fn` and tries a
/// read-only kernel mount, returning one row per spec (images are deleted).
/// Use it to report which entries this kernel cannot mount.
pub fn probe_matrix(specs: &[ImageSpec], dir: &Path) -> Vec<ProbeResult> {
    specs
        .iter()
        .map(|spec| match Image::empty(spec, dir) {
            Err(e) => ProbeResult {
                spec: spec.clone(),
                built: Err(e.to_string()),
                mounts: Err("not built".into()),
            },
            Ok(img) => {
                let mounts = img.kernel_can_mount();
                let _ = std::fs::remove_file(&img.path);
                ProbeResult {
                    spec: spec.clone(),
                    built: Ok(()),
                    mounts,
                }
            }
        })
        .collect()
}
