//! Opening an image from command-line arguments.
//!
//! Editing commands open the image for writing, which claims it (the
//! device layer's image lock, and no kernel mount: see
//! `ext4kit_engine::device::inuse`) before anything is read or replayed,
//! and are refused while another process has it. Reading commands take no
//! lock: when the image is mounted or being written elsewhere they say so
//! on stderr and read what is on disk (the journal replayed in memory),
//! which may be out of date.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use anyhow::{Context, Result};
use ext4kit_engine::BlockDevice;
use ext4kit_engine::device::nbd::{NbdUri, is_nbd_uri, open_image};
use ext4kit_engine::device::{FileDevice, InUse, UndoDevice, UndoSync};
use ext4kit_engine::journal::JournalDevice;
use ext4kit_engine::{DirtyJournal, Filesystem, OpenOptions, SuperblockAt, backup_sb};
use ext4kit_format::superblock::{EXT4_SUPER_MAGIC, RawSuperblock};

use crate::ImageArgs;

/// `-z FILE` and `--undo-sync` of the commands that open an image through
/// [`ImageArgs`].
#[derive(clap::Args, Clone, Debug, Default)]
pub struct UndoArgs {
    /// Save the blocks the command overwrites in FILE first (a new file,
    /// or this image's undo file from the commands before), which
    /// `ext4kit undo FILE IMAGE` or e2fsprogs' `e2undo` replays; only for
    /// commands that write.
    #[arg(id = "undo", short = 'z', long = "undo", value_name = "FILE")]
    pub file: Option<PathBuf>,
    /// When the undo file is synced.
    #[arg(long, value_enum, default_value_t, requires = "undo")]
    pub undo_sync: UndoSyncArg,
}

/// `--undo-sync`: when a `-z` undo file reaches the disk.
#[derive(clap::ValueEnum, Clone, Copy, Debug, Default)]
pub enum UndoSyncArg {
    /// Before every image write that saves new blocks: after a crash the
    /// undo file still covers what reached the image.
    #[default]
    EveryWrite,
    /// Only when the command ends, as e2fsprogs does: faster, but a crash
    /// can leave the undo file short of what the image lost.
    Close,
}

impl From<UndoSyncArg> for UndoSync {
    fn from(a: UndoSyncArg) -> Self {
        match a {
            UndoSyncArg::EveryWrite => Self::EveryWrite,
            UndoSyncArg::Close => Self::AtClose,
        }
    }
}

/// How a command opens its image (see [`open_device`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Read-only, no lock; who else uses the image is reported.
    Read,
    /// Read-only under a shared lock (a read-only mount).
    ReadShared,
    /// Read-write, claiming the image.
    Write,
}

/// Opens the image a command names: a file or block device, or an NBD
/// export (`nbd://host[:port]/export`, `nbd+unix:///export?socket=PATH`)
/// behind a block cache (`?cache=SIZE`, `cache=0` for none).
/// An export has no lock to take and no local holder to find: the
/// server's own locking (qemu-nbd locks its file) and multi-mount
/// protection (`mmp`) guard it. The second value says who else uses a
/// file opened read-only.
///
/// # Errors
/// The device's open error (a malformed URI, no server, a busy image).
pub fn open_device(image: &Path, access: Access) -> std::io::Result<(Box<dyn BlockDevice>, Option<InUse>)> {
    if let Some(uri) = export_uri(image) {
        return Ok((open_export(uri, access == Access::Write)?, None));
    }
    let dev = match access {
        Access::Read => FileDevice::open(image, false)?,
        Access::ReadShared => FileDevice::open_shared(image)?,
        Access::Write => FileDevice::open(image, true)?,
    };
    let who = dev.in_use().cloned();
    Ok((Box::new(dev), who))
}

/// The NBD URI `image` is, if it is one (`nbd://`, `nbds://`, `+unix`).
pub fn export_uri(image: &Path) -> Option<&str> {
    image.to_str().filter(|s| is_nbd_uri(s))
}

/// Opens an NBD export behind its block cache (`cache=` in the URI), warning loudly when TLS is asked for without
/// checking who answers (`tls-verify-peer=false`).
///
/// # Errors
/// A malformed URI, no server, a refused handshake (named).
pub fn open_export(uri: &str, writable: bool) -> std::io::Result<Box<dyn BlockDevice>> {
    let parsed = NbdUri::parse(uri)?;
    if parsed.tls_unverified() {
        log::warn!(
            "ext4kit: WARNING: {parsed}: tls-verify-peer=false: the server's certificate is not checked; \
             the traffic is encrypted, but anyone on the path can pose as the server"
        );
    }
    open_image(uri, writable)
}

/// Refuses an NBD export for a command that needs a local image file,
/// saying why and what to do instead.
pub fn refuse_export(image: &Path, command: &str, why: &str) -> Result<()> {
    if export_uri(image).is_some() {
        anyhow::bail!(
            "{}: `ext4kit {command}` cannot work on an NBD export: {why}",
            image.display()
        );
    }
    Ok(())
}

/// Opens the image read-only with the options the arguments ask for.
pub fn open_ro(a: &ImageArgs) -> Result<Filesystem> {
    open(a, false)
}

/// Opens the image for writing; refuses images that can only be read.
pub fn open_rw(a: &ImageArgs) -> Result<Filesystem> {
    let fs = open(a, true)?;
    if let Some(why) = fs.read_only_reason() {
        anyhow::bail!("{}: cannot be written: {why}", a.image.display());
    }
    Ok(fs)
}

/// Opens the image for raw edits (`debug -w`): written like [`open_rw`],
/// but not counted as a mount, as debugfs's writes are not.
pub fn open_rw_uncounted(a: &ImageArgs) -> Result<Filesystem> {
    let fs = open_with(a, true, false)?;
    if let Some(why) = fs.read_only_reason() {
        anyhow::bail!("{}: cannot be written: {why}", a.image.display());
    }
    Ok(fs)
}

fn open(a: &ImageArgs, writable: bool) -> Result<Filesystem> {
    open_with(a, writable, true)
}

fn open_with(a: &ImageArgs, writable: bool, count_mount: bool) -> Result<Filesystem> {
    let superblock = a.superblock.map(|block| SuperblockAt::Block {
        block,
        block_size: a.block_size,
    });
    if let Some(z) = &a.undo.file
        && (!writable || superblock.is_some())
    {
        anyhow::bail!(
            "-z {}: this command does not write the image: there is nothing to undo",
            z.display()
        );
    }
    // From a backup the engine writes nothing: no need to claim the image.
    let access = if writable && superblock.is_none() {
        Access::Write
    } else {
        Access::Read
    };
    let (dev, who) = open_device(&a.image, access).with_context(|| "cannot open the image")?;
    if let Some(who) = who {
        log::warn!(
            "ext4kit: {} is {who}: reading what is on disk, which may be out of date",
            a.image.display()
        );
    }
    let dev = match &a.undo.file {
        Some(z) => start_undo(dev, z, a.undo.undo_sync.into(), &a.image)?,
        None => dev,
    };
    let opts = OpenOptions {
        verify_checksums: !a.ignore_checksums,
        dirty_journal: if a.ignore_journal {
            DirtyJournal::ReadStale
        } else {
            DirtyJournal::Replay
        },
        superblock,
        count_mount,
        journal_device: external_journal(&a.image, a.journal.as_deref(), writable && superblock.is_none())?,
        ..OpenOptions::default()
    };
    let fs = Filesystem::open(dev, opts).map_err(|e| {
        let hint = superblock.is_none().then(|| {
            backup_hint(&a.image, &e, |b| {
                format!("read with -b {} -B {}", b.block, b.block_size)
            })
        });
        match hint.flatten() {
            Some(hint) => anyhow::anyhow!("{}: {e}{hint}", a.image.display()),
            None => anyhow::Error::new(e).context(format!("{}", a.image.display())),
        }
    })?;
    crate::keys::add_keys(&fs, &a.keys)?;
    if superblock.is_some() && !writable {
        log::warn!(
            "ext4kit: {}: {}",
            a.image.display(),
            fs.read_only_reason().unwrap_or_default()
        );
    }
    log_recovery(&fs);
    Ok(fs)
}

/// Opens an external journal device (`--journal`, `-o journal_path=`),
/// claimed for writing as the image is.
pub fn journal_device(path: &std::path::Path, writable: bool) -> Result<JournalDevice> {
    let dev = FileDevice::open(path, writable)
        .with_context(|| format!("cannot open the journal device {}", path.display()))?;
    Ok(JournalDevice(std::sync::Arc::new(dev)))
}

/// The external journal of `image`: the one `given`, else, when the
/// superblock names one (`s_journal_uuid`), the device found by its number
/// or UUID (`ext4kit_engine::journal::external::find_device`), said on
/// stderr either way; `None` for an internal journal or none found.
pub fn external_journal(
    image: &std::path::Path,
    given: Option<&std::path::Path>,
    writable: bool,
) -> Result<Option<JournalDevice>> {
    use ext4kit_format::features::CompatFeatures;
    if let Some(p) = given {
        return journal_device(p, writable).map(Some);
    }
    let mut buf = [0u8; 1024];
    let sb = std::fs::File::open(image)
        .and_then(|f| std::os::unix::fs::FileExt::read_exact_at(&f, &mut buf, 1024))
        .ok()
        .and_then(|()| ext4kit_format::superblock::RawSuperblock::parse(&buf).ok());
    let Some(sb) = sb.filter(|sb| {
        sb.features().compat.contains(CompatFeatures::HAS_JOURNAL)
            && sb.s_journal_inum.get() == 0
            && sb.s_journal_uuid != [0; 16]
    }) else {
        return Ok(None);
    };
    match ext4kit_engine::journal::external::find_device(&sb) {
        Ok(p) => {
            log::warn!(
                "ext4kit: {}: using the journal device with UUID {} found at {}",
                image.display(),
                ext4kit_engine::journal::external::uuid(&sb.s_journal_uuid),
                p.display()
            );
            journal_device(&p, writable).map(Some)
        }
        Err(why) => {
            log::warn!("ext4kit: {}: {why}", image.display());
            Ok(None)
        }
    }
}

/// `-B`: a block size ext2/3/4 can have.
pub fn parse_block_size(s: &str) -> std::result::Result<u32, String> {
    match s.parse::<u32>() {
        Ok(n) if n.is_power_of_two() && (1024..=65536).contains(&n) => Ok(n),
        _ => Err(format!("`{s}`: a block size is a power of two from 1024 to 65536")),
    }
}

/// When `e` says the primary superblock or descriptors are damaged, names
/// the intact backups ("; the primary superblock is damaged: intact backup
/// superblocks at block 32768 (4096-byte blocks), 98304: read with -b
/// 32768 -B 4096, or repair with ext4kit fsck -fy"); `use_it` says how
/// the command at hand reads the first one.
pub fn backup_hint(
    image: &std::path::Path,
    e: &ext4kit_engine::Error,
    use_it: impl Fn(&backup_sb::Backup) -> String,
) -> Option<String> {
    let damaged = backup_sb::primary_damaged(e)?;
    let (dev, _) = open_device(image, Access::Read).ok()?;
    let found = backup_sb::find_backups(dev.as_ref());
    let named = backup_sb::describe_backups(&found)?;
    Some(format!(
        "; {damaged} damaged: {named}: {}, or repair with ext4kit fsck -fy",
        use_it(&found[0])
    ))
}

/// Says at info level what the journal replay at open did, if it ran.
pub fn log_recovery(fs: &Filesystem) {
    if let Some(r) = &fs.journal_info().recovered {
        let place = if r.in_memory {
            " (in memory: the image is read-only)"
        } else {
            ""
        };
        log::info!(
            "recovering journal: {} transactions from {}, {} blocks written, {} revoked{place}",
            r.transactions,
            r.from_sequence,
            r.blocks_written,
            r.blocks_revoked
        );
    }
}

/// `-z FILE` of the editing commands: runs `op` on `dev`, wrapped when an
/// undo file is asked for so that everything `op` overwrites is saved in
/// it first (e2fsprogs' format: `e2undo` or `ext4kit undo` replays it).
/// The file is marked finished only when `op` succeeds; `block_size` is
/// the file system's (its keys count in it).
pub fn with_undo<T>(
    dev: Box<dyn BlockDevice>,
    undo: Option<&Path>,
    image: &Path,
    block_size: u32,
    op: impl FnOnce(Box<dyn BlockDevice>) -> Result<T>,
) -> Result<T> {
    with_undo_synced(dev, undo, UndoSync::default(), image, block_size, op)
}

/// [`with_undo`] with the undo file synced as `sync` says (`--undo-sync`).
pub fn with_undo_synced<T>(
    dev: Box<dyn BlockDevice>,
    undo: Option<&Path>,
    sync: UndoSync,
    image: &Path,
    block_size: u32,
    op: impl FnOnce(Box<dyn BlockDevice>) -> Result<T>,
) -> Result<T> {
    with_undo_judged(dev, undo, sync, image, block_size, op, Result::is_ok)?
}

/// [`with_undo_synced`] for an `op` whose outcome `succeeded` judges (the
/// undo file is finished only then); errors are the undo file's own.
pub fn with_undo_judged<T>(
    dev: Box<dyn BlockDevice>,
    undo: Option<&Path>,
    sync: UndoSync,
    image: &Path,
    block_size: u32,
    op: impl FnOnce(Box<dyn BlockDevice>) -> T,
    succeeded: impl FnOnce(&T) -> bool,
) -> Result<T> {
    let Some(undo) = undo else {
        return Ok(op(dev));
    };
    if same_file(undo, image) {
        anyhow::bail!("-z {}: the undo file cannot be the image itself", undo.display());
    }
    let wrapped = Arc::new(
        UndoDevice::create(dev, undo, block_size)
            .with_context(|| format!("cannot create the undo file {}", undo.display()))?
            .with_sync(sync),
    );
    eprintln!(
        "Overwriting existing filesystem; this can be undone using the command:\n    ext4kit undo {} {}\n",
        undo.display(),
        image.display()
    );
    let r = op(Box::new(wrapped.clone()));
    if !succeeded(&r) {
        // Nothing overwritten: an undo file would only get in the way
        // (e2undo replays even an empty one, marking the image unclean).
        if wrapped.holds_nothing() {
            drop(wrapped);
            let _ = std::fs::remove_file(undo);
        }
        return Ok(r);
    }
    wrapped
        .finish()
        .with_context(|| format!("finishing the undo file {}", undo.display()))?;
    Ok(r)
}

/// The undo file of `-z` on a command that opens its image through
/// [`open_rw`]: held here, past the `Filesystem` the command drops when it
/// returns, so that [`end_undo`] finishes it once the image is closed
/// (its superblock copy then is the one the image is left with).
static PENDING_UNDO: Mutex<Option<(Arc<UndoDevice>, PathBuf)>> = Mutex::new(None);

/// Wraps `dev` so that what the command overwrites is saved in `undo`
/// first (see [`with_undo`]); [`end_undo`] ends it.
fn start_undo(dev: Box<dyn BlockDevice>, undo: &Path, sync: UndoSync, image: &Path) -> Result<Box<dyn BlockDevice>> {
    if same_file(undo, image) {
        anyhow::bail!("-z {}: the undo file cannot be the image itself", undo.display());
    }
    let mut pending = PENDING_UNDO.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if pending.is_some() {
        anyhow::bail!("-z {}: one undo file per command", undo.display());
    }
    let bs = fs_block_size(dev.as_ref());
    let wrapped = Arc::new(
        UndoDevice::create(dev, undo, bs)
            .with_context(|| format!("cannot create the undo file {}", undo.display()))?
            .with_sync(sync),
    );
    eprintln!(
        "Overwriting existing filesystem; this can be undone using the command:\n    ext4kit undo {} {}\n",
        undo.display(),
        image.display()
    );
    *pending = Some((wrapped.clone(), undo.to_path_buf()));
    Ok(Box::new(wrapped))
}

/// Ends the undo file a command's `-z` started, given how the command
/// ended (it has dropped its `Filesystem` by then): marked finished when
/// it succeeded; removed when it failed before overwriting anything (an
/// empty undo file would only get in the way); else left unfinished, to
/// be replayed with a warning.
pub fn end_undo(r: Result<()>) -> Result<()> {
    let pending = PENDING_UNDO
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .take();
    let Some((dev, path)) = pending else {
        return r;
    };
    match r {
        Ok(()) => dev
            .finish()
            .with_context(|| format!("finishing the undo file {}", path.display())),
        Err(e) => {
            if dev.holds_nothing() {
                drop(dev);
                let _ = std::fs::remove_file(&path);
            }
            Err(e)
        }
    }
}

/// The block size the superblock at byte 1024 of `dev` records, or 4096
/// when it holds none (the undo file's unit only: any size is correct).
pub fn fs_block_size(dev: &dyn BlockDevice) -> u32 {
    let mut buf = [0u8; 1024];
    match dev
        .read_at(1024, &mut buf)
        .ok()
        .and_then(|()| RawSuperblock::parse(&buf).ok())
    {
        Some(sb) if sb.s_magic.get() == EXT4_SUPER_MAGIC => 1024 << sb.s_log_block_size.get().min(6),
        _ => 4096,
    }
}

fn same_file(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(x), Ok(y)) => x.dev() == y.dev() && x.ino() == y.ino(),
        _ => false,
    }
}
