//! The engine's error type: the format layer says *what* is wrong, the engine
//! adds *where* ([`Location`]); [`Error::errno`] is the single mapping to
//! POSIX error numbers used by every front end.

use std::fmt;
use std::io;

use ext4kit_format::FormatError;

/// Where on disk a problem was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Location {
    /// The primary superblock.
    Superblock,
    /// A group descriptor.
    Group(u32),
    /// An inode record.
    Inode(u32),
    /// A metadata block, with the inode it belongs to when known.
    Block {
        /// Physical block number.
        block: u64,
        /// Owning inode, 0 when not known.
        inode: u32,
    },
    /// The journal.
    Journal {
        /// Block within the journal.
        block: u64,
    },
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::Superblock => write!(f, "superblock"),
            Self::Group(g) => write!(f, "group descriptor {g}"),
            Self::Inode(i) => write!(f, "inode {i}"),
            Self::Block { block, inode: 0 } => write!(f, "block {block}"),
            Self::Block { block, inode } => write!(f, "block {block} (inode {inode})"),
            Self::Journal { block } => write!(f, "journal block {block}"),
        }
    }
}

/// What is corrupt and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Corruption {
    /// The decoding failure, or a description of a cross-structure problem.
    pub what: CorruptKind,
    /// Where it was found.
    pub at: Location,
}

/// The two sources of corruption reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CorruptKind {
    /// A structure failed to decode.
    Format(FormatError),
    /// Structures decode but contradict each other or the geometry.
    Inconsistent(String),
}

impl fmt::Display for Corruption {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.what {
            CorruptKind::Format(e) => write!(f, "{}: {e}", self.at),
            CorruptKind::Inconsistent(s) => write!(f, "{}: {s}", self.at),
        }
    }
}

/// Every failure the engine reports.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The device failed.
    #[error("I/O error at byte {offset}")]
    Io {
        /// Byte offset of the failed access.
        offset: u64,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// On-disk data is corrupt.
    #[error("corrupt file system: {0}")]
    Corrupt(Box<Corruption>),
    /// A checksum does not match (open with `verify_checksums = false` to read anyway).
    #[error("checksum mismatch at {at}: {detail}")]
    BadChecksum {
        /// Where.
        at: Location,
        /// The mismatch.
        detail: FormatError,
    },
    /// The image holds no ext2/3/4 superblock (another format, zeros, or a
    /// superblock damaged past recognition).
    #[error("not an ext2/ext3/ext4 file system: {0}")]
    NotExt4(String),
    /// The image uses something this engine cannot handle.
    #[error("unsupported: {0}")]
    Unsupported(String),
    /// The journal holds transactions that were never checkpointed.
    #[error(
        "the journal needs recovery (the image was not unmounted cleanly); replay it with e2fsck, or open with the journal ignored to read the possibly stale on-disk state"
    )]
    NeedsRecovery,
    /// A path component does not exist.
    #[error("no such file or directory: {0}")]
    NotFound(String),
    /// A path component that must be a directory is not one.
    #[error("not a directory: {0}")]
    NotDir(String),
    /// A directory was given where a file is needed.
    #[error("is a directory: {0}")]
    IsDir(String),
    /// Too many symbolic links while resolving a path.
    #[error("too many levels of symbolic links: {0}")]
    SymlinkLoop(String),
    /// A name longer than 255 bytes.
    #[error("file name too long: {0}")]
    NameTooLong(String),
    /// An argument is invalid.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// The attribute does not exist.
    #[error("no such attribute: {0}")]
    NoAttribute(String),
    /// Another host or program holds the file system through multi-mount
    /// protection (its MMP block is alive, or e2fsck runs): `EBUSY`.
    #[error("file system in use elsewhere: {0}")]
    InUseElsewhere(String),
    /// The file system is read-only.
    #[error("read-only file system")]
    ReadOnly,
    /// No free blocks or inodes are left.
    #[error("no space left on the file system")]
    NoSpace,
    /// A hashed directory's index is full at the deepest level the file
    /// system allows (two index levels, three with `large_dir`), so no leaf
    /// can split: `ENOSPC`, as the kernel's `ext4_dx_add_entry` ("index
    /// full, reach max htree level"). Free blocks may remain.
    #[error("directory index full: {0}")]
    DirIndexFull(String),
    /// A directory would grow past the largest size the format allows
    /// (2 GiB without `large_dir`, which e2fsck checks; 2^32 blocks with
    /// it): `ENOSPC`, the kernel's answer when a directory may not grow.
    #[error("directory too large: {0}")]
    DirTooBig(String),
    /// The name exists already.
    #[error("file exists: {0}")]
    Exists(String),
    /// The file would exceed the largest size the format allows.
    #[error("file too large")]
    FileTooBig,
    /// The link count would exceed its limit.
    #[error("too many links: {0}")]
    TooManyLinks(String),
    /// The operation is refused for this kind of inode (`EACCES`).
    #[error("permission denied: {0}")]
    AccessDenied(String),
    /// The directory is not empty.
    #[error("directory not empty: {0}")]
    NotEmpty(String),
    /// `SEEK_DATA`/`SEEK_HOLE` from an offset at or past the end of the
    /// file, or `SEEK_DATA` with no data after it (lseek(2)'s `ENXIO`).
    #[error("no data or hole at or after byte {offset}")]
    NoSuchOffset {
        /// The offset asked for.
        offset: u64,
    },
    /// The inode's flags forbid the change (immutable, append-only) or it
    /// needs a privilege the caller lacks.
    #[error("operation not permitted: {0}")]
    NotPermitted(String),
    /// A quota limit refuses the change (`EDQUOT`).
    #[error("disk quota exceeded: {0}")]
    QuotaExceeded(String),
    /// A link or rename into a PROJINHERIT directory of another project
    /// (`EXDEV`, as the kernel: usage cannot follow).
    #[error("cross-project link or rename: {0}")]
    CrossProject(String),
    /// A verity file's data or Merkle tree block does not hash to what
    /// the level above (or the root hash) says: `EIO`, as fs-verity.
    #[error("fs-verity verification failed: {0}")]
    VerityMismatch(String),
    /// An encrypted directory's names or a file's contents without the
    /// master key given (`ENOKEY`, as fscrypt).
    #[error("required key not available: {0}")]
    NoKey(String),
    /// A link or rename into an encrypted directory of something not under
    /// the same policy (`EXDEV`, as `fscrypt_has_permitted_context`).
    #[error("encryption policy mismatch: {0}")]
    PolicyMismatch(String),
}

/// Result alias of the engine.
pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    /// A decoding failure found at `at`.
    pub fn format(at: Location, e: FormatError) -> Self {
        if e.is_checksum() {
            return Self::BadChecksum { at, detail: e };
        }
        Self::Corrupt(Box::new(Corruption {
            what: CorruptKind::Format(e),
            at,
        }))
    }

    /// A cross-structure inconsistency found at `at`.
    pub fn inconsistent(at: Location, what: impl Into<String>) -> Self {
        Self::Corrupt(Box::new(Corruption {
            what: CorruptKind::Inconsistent(what.into()),
            at,
        }))
    }

    /// The POSIX error number for this error (`EUCLEAN` for corruption and
    /// `EBADMSG` for checksums, as the kernel's `EFSCORRUPTED`/`EFSBADCRC`).
    pub fn errno(&self) -> i32 {
        match self {
            Self::Io { source, .. } => source.raw_os_error().unwrap_or(libc::EIO),
            Self::Corrupt(_) => libc::EUCLEAN,
            Self::BadChecksum { .. } => libc::EBADMSG,
            Self::Unsupported(_) => libc::EOPNOTSUPP,
            Self::NotExt4(_) => libc::EINVAL,
            Self::NeedsRecovery => libc::EUCLEAN,
            Self::NotFound(_) => libc::ENOENT,
            Self::NotDir(_) => libc::ENOTDIR,
            Self::IsDir(_) => libc::EISDIR,
            Self::SymlinkLoop(_) => libc::ELOOP,
            Self::NameTooLong(_) => libc::ENAMETOOLONG,
            Self::InvalidArgument(_) => libc::EINVAL,
            Self::NoAttribute(_) => libc::ENODATA,
            Self::InUseElsewhere(_) => libc::EBUSY,
            Self::ReadOnly => libc::EROFS,
            Self::NoSpace | Self::DirIndexFull(_) | Self::DirTooBig(_) => libc::ENOSPC,
            Self::Exists(_) => libc::EEXIST,
            Self::NotEmpty(_) => libc::ENOTEMPTY,
            Self::AccessDenied(_) => libc::EACCES,
            Self::FileTooBig => libc::EFBIG,
            Self::TooManyLinks(_) => libc::EMLINK,
            Self::NoSuchOffset { .. } => libc::ENXIO,
            Self::NotPermitted(_) => libc::EPERM,
            Self::QuotaExceeded(_) => libc::EDQUOT,
            Self::CrossProject(_) => libc::EXDEV,
            Self::VerityMismatch(_) => libc::EIO,
            Self::NoKey(_) => libc::ENOKEY,
            Self::PolicyMismatch(_) => libc::EXDEV,
        }
    }
}

impl From<Error> for io::Error {
    fn from(e: Error) -> Self {
        match e {
            Error::Io { source, .. } => source,
            other => io::Error::new(io::Error::from_raw_os_error(other.errno()).kind(), other),
        }
    }
}
