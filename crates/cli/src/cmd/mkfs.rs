//! `ext4kit mkfs IMAGE [SIZE]`: a new, empty file system, with mke2fs's flags.

use std::fs::OpenOptions;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use ext4kit_engine::BlockDevice;
use ext4kit_engine::device::FileDevice;
use ext4kit_engine::mkfs::{Media, MkfsOptions, Plan, mkfs, parse_size, parse_uuid};
use ext4kit_format::superblock::{EXT4_SUPER_MAGIC, RawSuperblock};

mod journal_dev;

pub(crate) use journal_dev::journal_options;

/// Arguments of `mkfs`.
#[derive(clap::Args)]
pub struct Args {
    /// The image file (created sparse when absent) or block device.
    image: PathBuf,
    /// File-system size (e.g. 64M, 1G, 16T); a bare number counts KiB, or
    /// blocks of `-b` when given, as mke2fs reads it; default: the whole image.
    size: Option<String>,
    /// File-system type: ext2, ext3 or ext4.
    #[arg(short = 't', default_value = "ext4")]
    fs_type: String,
    /// Block size in bytes.
    #[arg(short = 'b')]
    block_size: Option<u32>,
    /// Cluster size in bytes with `-O bigalloc` (e.g. 16K, 64K; default
    /// 16 blocks): the unit of block allocation.
    #[arg(short = 'C', long = "cluster-size")]
    cluster_size: Option<String>,
    /// Inode size in bytes.
    #[arg(short = 'I')]
    inode_size: Option<u16>,
    /// Bytes per inode.
    #[arg(short = 'i')]
    bytes_per_inode: Option<u64>,
    /// Number of inodes.
    #[arg(short = 'N')]
    inodes: Option<u64>,
    /// Percentage of blocks reserved for root.
    #[arg(short = 'm')]
    reserved_percent: Option<f64>,
    /// Features: feat,^feat,…
    #[arg(short = 'O')]
    features: Vec<String>,
    /// Groups per flex group (a power of two), or `auto`: chosen from the
    /// size, the media (rotational or flash, from /sys or -E media=) and
    /// the RAID stripe; default 16, as mke2fs.
    #[arg(short = 'G')]
    flex: Option<String>,
    /// Extended options: stride=, stripe_width=, lazy_itable_init=, root_owner=uid:gid, hash_seed=,
    /// flex_meta=start|middle (where a flex group's bitmaps and inode tables go), media=hdd|ssd,
    /// quotatype=usrquota:grpquota:prjquota (the quota files made with -O quota).
    #[arg(short = 'E')]
    extended: Vec<String>,
    /// Volume label.
    #[arg(short = 'L')]
    label: Option<String>,
    /// File-system UUID.
    #[arg(short = 'U')]
    uuid: Option<String>,
    /// Overwrite an existing file system.
    #[arg(short = 'F')]
    force: bool,
    /// Quiet: print nothing.
    #[arg(short = 'q')]
    quiet: bool,
    /// Populate from a directory (copies the tree in, like `ext4kit import`).
    #[arg(short = 'd')]
    root_dir: Option<PathBuf>,
    /// Journal options, as mke2fs: `size=MiB` and `fast_commit_size=KiB`
    /// (with `-O fast_commit`) size the internal journal (1024 to 10240000
    /// blocks, at most half the free space) and turn has_journal on;
    /// `device=PATH` keeps the journal on that journal device (made with
    /// `-O journal_dev`).
    #[arg(short = 'J')]
    journal: Vec<String>,
    /// Save the blocks mkfs overwrites in FILE first (a new file, or the undo
    /// file of the commands before it to continue), which
    /// `ext4kit undo FILE IMAGE` or e2fsprogs' `e2undo` replays; the image
    /// is then written over in place rather than truncated.
    #[arg(short = 'z', value_name = "FILE")]
    undo: Option<PathBuf>,
    /// When the undo file is synced.
    #[arg(long, value_enum, default_value_t, requires = "undo")]
    undo_sync: crate::open::UndoSyncArg,
}

/// Builds the options, prepares the image and lays out the file system.
/// A failure removes the image file if this command created it (never one
/// that existed before).
pub fn run(a: Args) -> Result<()> {
    let existed = a.image.exists();
    let r = make(&a);
    if r.is_err() && !existed {
        let _ = std::fs::remove_file(&a.image);
    }
    r
}

fn make(a: &Args) -> Result<()> {
    if a.features
        .iter()
        .flat_map(|f| f.split(','))
        .any(|f| f.trim() == "journal_dev")
    {
        if a.undo.is_some() {
            bail!("-z with -O journal_dev is not supported");
        }
        return journal_dev::make(a);
    }
    let (jdev, jsize) = journal_dev::journal_options(&a.journal)?;
    if jdev.is_some() && a.undo.is_some() {
        bail!("-z with -J device= is not supported: the journal device is written outside the undo file");
    }
    let mut opts = options(a)?;
    opts.journal = jsize;
    if let Some(j) = &jdev {
        journal_dev::prepare_fs(&mut opts, j)?;
    }
    if let Some(src) = &a.root_dir
        && !src.is_dir()
    {
        bail!("-d {}: not a directory", src.display());
    }
    let size = a.size.as_deref().map(|s| fs_size(s, a.block_size)).transpose()?;
    opts.size_bytes = size;
    // Sizes and counts mkfs cannot lay out are refused before an
    // existing image is touched.
    let mut block_size = opts.block_size.unwrap_or(4096);
    if let Some(bytes) = size.or_else(|| {
        std::fs::metadata(&a.image)
            .ok()
            .filter(|m| m.is_file())
            .map(|m| m.len())
    }) {
        block_size = Plan::new(&opts, bytes)
            .with_context(|| format!("{}", a.image.display()))?
            .block_size;
    }
    let (dev, zeroed) = prepare(&a.image, size, a.force, a.undo.is_none())?;
    opts.device_zeroed = zeroed;
    let sync = a.undo_sync.into();
    let r = crate::open::with_undo_synced(dev, a.undo.as_deref(), sync, &a.image, block_size, |dev| {
        let r = mkfs(dev.as_ref(), &opts).with_context(|| format!("{}", a.image.display()))?;
        let quota = opts.quota_files(&r.plan.features);
        if jdev.is_none() && (a.root_dir.is_some() || !quota.is_empty()) {
            populate(dev, &a.image, a.root_dir.as_deref(), &quota)?;
        }
        Ok(r)
    })?;
    if let (Some(why), false) = (&r.plan.flex_reason, a.quiet) {
        let media = opts.media.map_or("unknown".to_string(), |m| m.to_string());
        outln!("-G auto: {why}; media {media}");
    }
    if let Some(j) = &jdev {
        journal_dev::attach(&a.image, j)?;
        let quota = opts.quota_files(&r.plan.features);
        if a.root_dir.is_some() || !quota.is_empty() {
            let dev = FileDevice::open(&a.image, true)?;
            populate(Box::new(dev), &a.image, a.root_dir.as_deref(), &quota)?;
        }
    }
    if !a.quiet {
        let p = &r.plan;
        let cluster = if p.cluster_bits > 0 {
            format!(" in clusters of {} bytes", p.block_size << p.cluster_bits)
        } else {
            String::new()
        };
        outln!(
            "{}: {} blocks of {} bytes{cluster}, {} inodes, {} groups, {} free blocks, journal {} blocks",
            a.image.display(),
            p.blocks_count,
            p.block_size,
            r.inodes_count,
            p.group_count,
            r.free_blocks,
            r.journal_blocks
        );
    }
    Ok(())
}

/// The media under `image` for `-G auto`: its device's, or for an image
/// not made yet its directory's.
fn detect_media(image: &Path) -> Option<Media> {
    let at = if image.exists() {
        image
    } else {
        image
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."))
    };
    ext4kit_engine::mkfs::media::detect_media(at)
}

fn options(a: &Args) -> Result<MkfsOptions> {
    let mut o = MkfsOptions {
        fs_type: a.fs_type.parse()?,
        ..MkfsOptions::default()
    };
    o.block_size = a.block_size;
    o.cluster_size = a
        .cluster_size
        .as_deref()
        .map(|c| {
            let n = parse_size(c)?;
            u32::try_from(n)
                .map_err(|_| ext4kit_engine::Error::InvalidArgument(format!("cluster size {c} is too large")))
        })
        .transpose()?;
    o.inode_size = a.inode_size;
    o.bytes_per_inode = a.bytes_per_inode;
    o.inode_count = a.inodes;
    if let Some(m) = a.reserved_percent {
        o.reserved_percent = m;
    }
    for f in &a.features {
        o.add_features(f);
    }
    for e in &a.extended {
        o.add_extended(e)?;
    }
    match a.flex.as_deref() {
        Some("auto") => {
            o.flex_auto = true;
            if o.media.is_none() {
                o.media = detect_media(&a.image);
            }
        }
        Some(n) => o.groups_per_flex = Some(n.parse().with_context(|| format!("-G {n}: a number or auto"))?),
        None => {}
    }
    o.label = a.label.clone().unwrap_or_default();
    if o.label.len() > 16 {
        bail!("volume label {:?} is longer than 16 bytes", o.label);
    }
    o.uuid = a.uuid.as_deref().map(parse_uuid).transpose()?;
    Ok(o)
}

/// Opens (or creates) the image, claiming it before anything is changed
/// (refused while it is mounted or written elsewhere). A regular file is
/// truncated to zero and extended sparse, so it reads as zeros, which
/// mkfs is told; unless `truncate` is false (`-z`: the old contents are
/// saved as they are overwritten), when it is only extended as needed.
fn prepare(path: &Path, size: Option<u64>, force: bool, truncate: bool) -> Result<(Box<dyn BlockDevice>, bool)> {
    if let Some(uri) = path.to_str().filter(|s| ext4kit_engine::device::nbd::is_nbd_uri(s)) {
        return prepare_nbd(uri, size, force);
    }
    if path.is_dir() {
        bail!(
            "{} is a directory: mkfs makes a file system in an image file or on a block device",
            path.display()
        );
    }
    let exists = path.exists();
    if exists
        && !force
        && let Some(kind) = existing_fs(path)
    {
        bail!(
            "{} contains a {kind} file system; use -F to overwrite it",
            path.display()
        );
    }
    let meta = exists.then(|| std::fs::metadata(path)).transpose()?;
    let regular = meta.as_ref().is_none_or(|m| m.is_file());
    let len = match (regular, size, &meta) {
        (false, ..) => 0,
        (true, Some(s), _) => s,
        (true, None, Some(m)) if m.len() > 0 => m.len(),
        _ => bail!("{}: give a SIZE to create the image", path.display()),
    };
    if !exists {
        OpenOptions::new()
            .create_new(true)
            .write(true)
            .open(path)
            .with_context(|| format!("cannot create {}", path.display()))?;
    }
    let mut dev = FileDevice::open(path, true)?;
    let old = meta.as_ref().map_or(0, |m| m.len());
    if regular && truncate {
        dev.set_len(0)
            .and_then(|()| dev.set_len(old.max(len)))
            .with_context(|| format!("cannot size {}", path.display()))?;
    } else if regular && len > old {
        dev.set_len(len)
            .with_context(|| format!("cannot size {}", path.display()))?;
    }
    Ok((Box::new(dev), regular && truncate))
}

/// An NBD export keeps its size; its old contents are not known to read
/// as zeros.
fn prepare_nbd(uri: &str, size: Option<u64>, force: bool) -> Result<(Box<dyn BlockDevice>, bool)> {
    let dev = crate::open::open_export(uri, true).with_context(|| "cannot open the export")?;
    if let Some(s) = size.filter(|&s| s > dev.len()) {
        bail!("{uri}: {s} bytes asked, but the export holds {}", dev.len());
    }
    let mut buf = [0u8; 1024];
    if !force
        && dev.read_at(1024, &mut buf).is_ok()
        && let Some(kind) = fs_kind(&buf)
    {
        bail!("{uri} contains a {kind} file system; use -F to overwrite it");
    }
    Ok((dev, false))
}

/// "ext2/ext3/ext4" when the image already holds one.
fn existing_fs(path: &Path) -> Option<&'static str> {
    use std::io::{Read, Seek, SeekFrom};
    let mut f = std::fs::File::open(path).ok()?;
    let mut buf = [0u8; 1024];
    f.seek(SeekFrom::Start(1024)).ok()?;
    f.read_exact(&mut buf).ok()?;
    fs_kind(&buf)
}

/// "ext2/ext3/ext4" when `buf` is a superblock.
fn fs_kind(buf: &[u8; 1024]) -> Option<&'static str> {
    let sb = RawSuperblock::parse(buf).ok()?;
    if sb.s_magic.get() != EXT4_SUPER_MAGIC {
        return None;
    }
    let f = sb.features();
    Some(if f.incompat.0 & !0x16 != 0 || f.ro_compat.0 & !0x3 != 0 {
        "ext4"
    } else if f.compat.0 & 0x4 != 0 {
        "ext3"
    } else {
        "ext2"
    })
}

/// `-d`: opens the new file system and copies `src` in, root metadata included.
/// The steps mke2fs takes after the layout, in its order: the quota files
/// (`create_quota_inodes`), then the copy of `src` (charged to the quota
/// files as it is written).
fn populate(
    dev: Box<dyn BlockDevice>,
    image: &Path,
    src: Option<&Path>,
    quota: &[ext4kit_format::quota::QuotaType],
) -> Result<()> {
    use ext4kit_engine::{Filesystem, OpenOptions};
    // Building the image is not a mount: no mount count, no mount time,
    // and no journal (as with mke2fs -d).
    let opts = OpenOptions {
        count_mount: false,
        use_journal: false,
        inline: ext4kit_engine::InlinePolicy::Mke2fs,
        ..OpenOptions::default()
    };
    let fs = Filesystem::open(dev, opts).with_context(|| format!("{}", image.display()))?;
    if !quota.is_empty() {
        fs.create_quota_files(quota).context("creating the quota files")?;
    }
    if let Some(src) = src {
        super::import::import(&fs, src, "/", true).with_context(|| format!("populating from {}", src.display()))?;
    }
    fs.unmount().with_context(|| format!("closing {}", image.display()))
}

/// mke2fs's `fs-size`: with a unit suffix, bytes; a bare number counts
/// blocks of `-b`, or KiB when no block size is given.
fn fs_size(s: &str, block_size: Option<u32>) -> ext4kit_engine::Result<u64> {
    let t = s.trim();
    if !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()) {
        let unit = u64::from(block_size.unwrap_or(1024));
        return parse_size(t)?
            .checked_mul(unit)
            .ok_or_else(|| ext4kit_engine::Error::InvalidArgument(format!("size {s} is too large")));
    }
    parse_size(t)
}
