//! The three feature sets of the superblock (`s_feature_compat`,
//! `s_feature_incompat`, `s_feature_ro_compat`), their names as e2fsprogs
//! prints them, and the rule deciding whether an image may be opened:
//! an unknown incompat bit forbids opening, an unknown ro_compat bit forbids
//! writing, an unknown compat bit changes nothing.

macro_rules! feature_set {
    ($(#[$doc:meta])* $name:ident { $($(#[$fdoc:meta])* $flag:ident = $bit:expr, $text:expr;)* }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
        pub struct $name(pub u32);

        impl $name {
            $($(#[$fdoc])* pub const $flag: Self = Self($bit);)*
            /// Every bit this crate knows the meaning of.
            pub const KNOWN: Self = Self(0 $(| $bit)*);
            const NAMES: &'static [(u32, &'static str)] = &[$(($bit, $text)),*];

            /// True when every bit of `other` is set.
            pub fn contains(self, other: Self) -> bool {
                self.0 & other.0 == other.0
            }

            /// The bits set here that this crate does not know.
            pub fn unknown(self) -> Self {
                Self(self.0 & !Self::KNOWN.0)
            }

            /// The names of the set bits, as e2fsprogs prints them; unknown
            /// bits come out as `FEATURE_X<bit>` like `dumpe2fs` does.
            pub fn names(self) -> Vec<String> {
                (0..32)
                    .map(|b| 1u32 << b)
                    .filter(|bit| self.0 & bit != 0)
                    .map(|bit| {
                        Self::NAMES
                            .iter()
                            .find(|(b, _)| *b == bit)
                            .map(|(_, n)| (*n).to_string())
                            .unwrap_or_else(|| format!("{}{}", Self::UNKNOWN_PREFIX, bit.trailing_zeros()))
                    })
                    .collect()
            }

            /// Parses one feature name as e2fsprogs spells it.
            pub fn from_name(name: &str) -> Option<Self> {
                Self::NAMES.iter().find(|(_, n)| *n == name).map(|(b, _)| Self(*b))
            }
        }

        impl core::ops::BitOr for $name {
            type Output = Self;
            fn bitor(self, rhs: Self) -> Self {
                Self(self.0 | rhs.0)
            }
        }
    };
}

feature_set! {
    /// `s_feature_compat`: features an implementation may ignore.
    CompatFeatures {
        /// Directory preallocation.
        DIR_PREALLOC = 0x1, "dir_prealloc";
        /// "imagic inodes" (AFS).
        IMAGIC_INODES = 0x2, "imagic_inodes";
        /// Has a journal (jbd2).
        HAS_JOURNAL = 0x4, "has_journal";
        /// Extended attributes.
        EXT_ATTR = 0x8, "ext_attr";
        /// Reserved GDT blocks for online growth (resize inode 7).
        RESIZE_INODE = 0x10, "resize_inode";
        /// Hashed directory indexes (htree).
        DIR_INDEX = 0x20, "dir_index";
        /// Lazy block groups (unused).
        LAZY_BG = 0x40, "lazy_bg";
        /// Exclude inode (unused).
        EXCLUDE_INODE = 0x80, "snapshot_exclude";
        /// Exclude bitmap (unused).
        EXCLUDE_BITMAP = 0x100, "snapshot_bitmap";
        /// Only the two groups in `s_backup_bgs` hold backup superblocks.
        SPARSE_SUPER2 = 0x200, "sparse_super2";
        /// Fast commits in the journal.
        FAST_COMMIT = 0x400, "fast_commit";
        /// Inode numbers never change (no shrinking).
        STABLE_INODES = 0x800, "stable_inodes";
        /// Orphan file (`s_orphan_file_inum`) instead of the orphan list.
        ORPHAN_FILE = 0x1000, "orphan_file";
    }
}

feature_set! {
    /// `s_feature_incompat`: features an implementation must understand to
    /// open the image at all.
    IncompatFeatures {
        /// Compression (never implemented).
        COMPRESSION = 0x1, "compression";
        /// Directory entries record the file type.
        FILETYPE = 0x2, "filetype";
        /// The journal needs recovery.
        RECOVER = 0x4, "needs_recovery";
        /// This is an external journal device.
        JOURNAL_DEV = 0x8, "journal_dev";
        /// Meta block groups.
        META_BG = 0x10, "meta_bg";
        /// Files use extent trees.
        EXTENTS = 0x40, "extent";
        /// 64-bit block numbers, 64-byte group descriptors.
        BIT64 = 0x80, "64bit";
        /// Multiple mount protection.
        MMP = 0x100, "mmp";
        /// Flexible block groups.
        FLEX_BG = 0x200, "flex_bg";
        /// Large xattr values in inodes.
        EA_INODE = 0x400, "ea_inode";
        /// Data in directory entries.
        DIRDATA = 0x1000, "dirdata";
        /// Checksum seed stored in `s_checksum_seed`.
        CSUM_SEED = 0x2000, "metadata_csum_seed";
        /// Directories larger than 2 GiB, 3-level htree.
        LARGEDIR = 0x4000, "large_dir";
        /// Data in the inode body.
        INLINE_DATA = 0x8000, "inline_data";
        /// Encrypted inodes.
        ENCRYPT = 0x10000, "encrypt";
        /// Case-folded directory names.
        CASEFOLD = 0x20000, "casefold";
    }
}

feature_set! {
    /// `s_feature_ro_compat`: features an implementation must understand to
    /// write; without them it may still read.
    RoCompatFeatures {
        /// Backup superblocks only in groups 0, 1 and powers of 3, 5, 7.
        SPARSE_SUPER = 0x1, "sparse_super";
        /// Files larger than 2 GiB.
        LARGE_FILE = 0x2, "large_file";
        /// `i_blocks` in file-system blocks, files larger than 2 TiB.
        HUGE_FILE = 0x8, "huge_file";
        /// Group descriptor crc16 checksums (uninit_bg).
        GDT_CSUM = 0x10, "uninit_bg";
        /// More than 65,000 subdirectories.
        DIR_NLINK = 0x20, "dir_nlink";
        /// Large inodes carry `i_extra_isize` bytes.
        EXTRA_ISIZE = 0x40, "extra_isize";
        /// Snapshot (unused).
        HAS_SNAPSHOT = 0x80, "snapshot";
        /// Quota inodes.
        QUOTA = 0x100, "quota";
        /// Cluster allocation.
        BIGALLOC = 0x200, "bigalloc";
        /// crc32c metadata checksums.
        METADATA_CSUM = 0x400, "metadata_csum";
        /// Replicas (unused).
        REPLICA = 0x800, "replica";
        /// Read-only file system image.
        READONLY = 0x1000, "read-only";
        /// Project quotas.
        PROJECT = 0x2000, "project";
        /// Shared blocks.
        SHARED_BLOCKS = 0x4000, "shared_blocks";
        /// fs-verity files.
        VERITY = 0x8000, "verity";
        /// The orphan file holds entries.
        ORPHAN_PRESENT = 0x10000, "orphan_present";
        /// Inode-ordered auxiliary directory trees ([`crate::itree`]);
        /// ext4kit's own bit.
        ITREE = 0x8000_0000, "itree";
    }
}

impl CompatFeatures {
    const UNKNOWN_PREFIX: &'static str = "FEATURE_C";
}
impl IncompatFeatures {
    const UNKNOWN_PREFIX: &'static str = "FEATURE_I";
}
impl RoCompatFeatures {
    const UNKNOWN_PREFIX: &'static str = "FEATURE_R";
}

/// The complete feature set of an image.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Features {
    /// `s_feature_compat`.
    pub compat: CompatFeatures,
    /// `s_feature_incompat`.
    pub incompat: IncompatFeatures,
    /// `s_feature_ro_compat`.
    pub ro_compat: RoCompatFeatures,
}

impl Features {
    /// All feature names, compat then incompat then ro_compat.
    pub fn names(&self) -> Vec<String> {
        let mut v = self.compat.names();
        v.extend(self.incompat.names());
        v.extend(self.ro_compat.names());
        v
    }

    /// True when either checksum scheme (`metadata_csum` or `uninit_bg`)
    /// protects group descriptors.
    pub fn has_group_csum(&self) -> bool {
        self.ro_compat.contains(RoCompatFeatures::METADATA_CSUM) || self.ro_compat.contains(RoCompatFeatures::GDT_CSUM)
    }

    /// True with `metadata_csum`.
    pub fn metadata_csum(&self) -> bool {
        self.ro_compat.contains(RoCompatFeatures::METADATA_CSUM)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_unknown_bits_are_named() {
        let f = IncompatFeatures::EXTENTS | IncompatFeatures::BIT64 | IncompatFeatures(1 << 30);
        assert_eq!(f.names(), vec!["extent", "64bit", "FEATURE_I30"]);
        assert_eq!(f.unknown(), IncompatFeatures(1 << 30));
        assert_eq!(IncompatFeatures::from_name("flex_bg"), Some(IncompatFeatures::FLEX_BG));
        assert_eq!(RoCompatFeatures::from_name("nope"), None);
    }
}
