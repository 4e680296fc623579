//! The one error type of the format layer: what is wrong, in which structure,
//! at which field and byte offset. The engine adds *where on disk* (block,
//! inode) when it wraps this.

use core::fmt;

/// What went wrong while decoding a structure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum FormatErrorKind {
    /// The buffer is shorter than the structure needs.
    Truncated {
        /// Bytes the structure needs.
        need: usize,
        /// Bytes available.
        have: usize,
    },
    /// A magic number does not match.
    BadMagic {
        /// The value found.
        found: u64,
    },
    /// A field holds a value outside its valid range.
    Invalid {
        /// The value found.
        value: u64,
    },
    /// A stored checksum does not match the computed one.
    Checksum {
        /// Checksum stored on disk.
        stored: u32,
        /// Checksum computed over the bytes.
        computed: u32,
    },
}

/// A decoding failure: `structure`'s `field` at byte `offset` (relative to the
/// start of the structure's buffer) is wrong in the way `kind` says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FormatError {
    /// The on-disk structure, named as in the kernel (`ext4_super_block`…).
    pub structure: &'static str,
    /// The field, named as in the kernel (`s_magic`…), or `""` for the whole.
    pub field: &'static str,
    /// Byte offset of the field within the buffer handed to the parser.
    pub offset: usize,
    /// What is wrong.
    pub kind: FormatErrorKind,
}

impl FormatError {
    /// The buffer holding `structure` is too short.
    pub fn truncated(structure: &'static str, need: usize, have: usize) -> Self {
        Self {
            structure,
            field: "",
            offset: have,
            kind: FormatErrorKind::Truncated { need, have },
        }
    }

    /// `field` does not hold the magic number.
    pub fn bad_magic(structure: &'static str, field: &'static str, offset: usize, found: u64) -> Self {
        Self {
            structure,
            field,
            offset,
            kind: FormatErrorKind::BadMagic { found },
        }
    }

    /// `field` holds `value`, which is out of range.
    pub fn invalid(structure: &'static str, field: &'static str, offset: usize, value: u64) -> Self {
        Self {
            structure,
            field,
            offset,
            kind: FormatErrorKind::Invalid { value },
        }
    }

    /// The checksum in `field` does not match.
    pub fn checksum(structure: &'static str, field: &'static str, offset: usize, stored: u32, computed: u32) -> Self {
        Self {
            structure,
            field,
            offset,
            kind: FormatErrorKind::Checksum { stored, computed },
        }
    }

    /// Shifts the offset by `base`, for a structure found inside a larger buffer.
    #[must_use]
    pub fn at(mut self, base: usize) -> Self {
        self.offset = self.offset.saturating_add(base);
        self
    }

    /// True when this is a checksum mismatch (callers may choose to read anyway).
    pub fn is_checksum(&self) -> bool {
        matches!(self.kind, FormatErrorKind::Checksum { .. })
    }
}

impl fmt::Display for FormatError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = if self.field.is_empty() {
            self.structure.to_string()
        } else {
            format!("{}.{}", self.structure, self.field)
        };
        match self.kind {
            FormatErrorKind::Truncated { need, have } => {
                write!(f, "{what}: truncated, need {need} bytes, have {have}")
            }
            FormatErrorKind::BadMagic { found } => {
                write!(f, "{what} at byte {}: bad magic {found:#x}", self.offset)
            }
            FormatErrorKind::Invalid { value } => {
                write!(f, "{what} at byte {}: invalid value {value} ({value:#x})", self.offset)
            }
            FormatErrorKind::Checksum { stored, computed } => write!(
                f,
                "{what} at byte {}: checksum mismatch (stored {stored:#010x}, computed {computed:#010x})",
                self.offset
            ),
        }
    }
}

impl std::error::Error for FormatError {}

/// Result alias of the format layer.
pub type Result<T> = core::result::Result<T, FormatError>;
