//! Metadata images for bug reports, as e2image writes them (`e2image -r`,
//! `-Q`, `-s`, `-a`): the blocks an ext4 engineer needs to reproduce a
//! problem — superblock, group descriptors, bitmaps, the used part of the
//! inode tables, directory, extent-tree, indirect, xattr, symlink, journal,
//! quota, orphan-file and MMP blocks — each at its own place, file data left
//! out (or in, with `-a`).
//!
//! [`Filesystem::metadata_blocks`] walks the image once, read-only, and
//! returns the block set; [`Filesystem::write_raw_image`] and
//! [`Filesystem::write_qcow2_image`] copy it out ([`Filesystem::write_raw_image_to`]
//! with e2image's destinations: in place with `-c`, at `-O`, to a pipe, a
//! file system moved within its file), scrambling directory
//! names on request ([`scramble`]); [`qcow2_to_raw`] turns a QCOW2 image
//! back into a sparse raw one. Every walk is bounded by the image's own
//! counts and each pointer block is read once per inode, so a corrupt
//! image yields a named warning or error, never a hang.

mod qcow2;
mod raw;
mod scramble;
mod walk;
mod write;

pub use qcow2::{is_qcow2, qcow2_to_raw};
pub use raw::{RawBlock, RawOptions, RawSink, RawStats};

/// What goes into an image beyond the metadata.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ImageOptions {
    /// Copy file data too (`e2image -a`).
    pub all_data: bool,
    /// Replace directory entry names by same-length stand-ins (`e2image -s`).
    pub scramble: bool,
}

/// A directory whose blocks are scrambled: its number and generation (the
/// leaf checksum's seed) and its blocks as `(logical, physical)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirBlocks {
    /// Inode number.
    pub ino: u32,
    /// `i_generation`.
    pub generation: u32,
    /// True when the directory is indexed (`EXT4_INDEX_FL`).
    pub htree: bool,
    /// Blocks in logical order.
    pub blocks: Vec<(u64, u64)>,
}

/// The blocks an image holds, as sorted disjoint `(first, count)` runs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MetadataBlocks {
    /// Sorted, disjoint, non-adjacent runs.
    pub runs: Vec<(u64, u64)>,
    /// Directories to scramble (empty unless asked).
    pub dirs: Vec<DirBlocks>,
    /// Damage passed over on the way, one line each (the inode and why).
    pub warnings: Vec<String>,
}

impl MetadataBlocks {
    /// Blocks in the set.
    pub fn count(&self) -> u64 {
        self.runs.iter().map(|r| r.1).sum()
    }
}

/// What writing an image did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ImageStats {
    /// Blocks in the set.
    pub blocks: u64,
    /// Blocks written (the rest were all zeros).
    pub written: u64,
    /// Names replaced by `-s`.
    pub names_scrambled: u64,
    /// Names `-s` kept: `lost+found` in the root, and names for which no
    /// stand-in of the same length falls in the htree leaf's hash range.
    pub names_kept: u64,
    /// Bytes of the output file.
    pub file_bytes: u64,
}
