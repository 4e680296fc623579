//! Problem codes and findings.
//!
//! Every finding carries the number e2fsck gives the same concept in
//! `e2fsck/problem.h` (`PR_<pass>_*`: the high byte is the pass, 0x01_1000 is
//! pass 1B), so a report can be compared with e2fsck's line by line. The
//! names below are ours; only the numbers are shared with e2fsck.

use serde::Serialize;

/// An e2fsck-compatible problem code with ext4kit's name for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub struct Code {
    /// The number e2fsck uses for this concept.
    pub number: u32,
    /// A stable name (`P1_BAD_I_SIZE`).
    pub name: &'static str,
}

impl Code {
    /// The pass that reports it: 0 to 5 (1B–1D count as 1).
    pub fn pass(self) -> u8 {
        (self.number >> 16) as u8
    }

    /// True when `-p` (preen) may repair it without asking, as e2fsck's
    /// `fix_problem` decides (`e2fsck/problem.c`),
    /// plus ext4kit's rewrite of backup superblocks, which e2fsck does
    /// silently.
    pub fn preen_ok(self) -> bool {
        self == own::P0_BACKUP_SB_DIFFERS || PREEN_OK.binary_search(&self.number).is_ok()
    }
}

/// e2fsck's problems that `-p` repairs without stopping, sorted (numbers
/// from `e2fsck/problem.h`): those flagged `PR_PREEN_OK` and not
/// `PR_PREEN_NO`, and those with no prompt that are not fatal.
const PREEN_OK: [u32; 215] = [
    0x000004, 0x000007, 0x000008, 0x000009, 0x00000A, 0x00000B, 0x00000F, 0x000015, 0x000016, 0x000017, 0x000018,
    0x00001A, 0x000020, 0x000021, 0x000022, 0x000023, 0x000024, 0x000028, 0x000029, 0x00002A, 0x00002C, 0x00002D,
    0x000031, 0x000032, 0x000033, 0x000034, 0x000035, 0x000036, 0x000038, 0x000039, 0x00003A, 0x00003B, 0x00003C,
    0x00003D, 0x00003E, 0x00003F, 0x000040, 0x000041, 0x000042, 0x000043, 0x000044, 0x000045, 0x000046, 0x000047,
    0x000048, 0x00004A, 0x00004B, 0x000050, 0x000052, 0x000053, 0x000054, 0x000055, 0x010000, 0x010002, 0x010003,
    0x010004, 0x010005, 0x010006, 0x01000C, 0x01000D, 0x010014, 0x010017, 0x010019, 0x01001A, 0x01001B, 0x01001C,
    0x01001D, 0x01001E, 0x01001F, 0x010020, 0x010021, 0x010023, 0x010032, 0x010033, 0x010034, 0x010035, 0x010047,
    0x010048, 0x010049, 0x01004A, 0x01004B, 0x01004C, 0x01004F, 0x010050, 0x010051, 0x010052, 0x010053, 0x010054,
    0x01005C, 0x010062, 0x010063, 0x010064, 0x010068, 0x01006F, 0x010071, 0x010073, 0x010074, 0x010082, 0x010083,
    0x010085, 0x010086, 0x010087, 0x01008D, 0x01008E, 0x01008F, 0x010090, 0x010092, 0x011000, 0x011001, 0x011002,
    0x011003, 0x011006, 0x011007, 0x011008, 0x012000, 0x013000, 0x013001, 0x013002, 0x013003, 0x013004, 0x013005,
    0x013008, 0x014000, 0x014001, 0x014002, 0x014003, 0x014004, 0x020000, 0x020003, 0x020022, 0x020027, 0x020029,
    0x020033, 0x020034, 0x020035, 0x020036, 0x020037, 0x020039, 0x02003C, 0x02003D, 0x02003E, 0x02003F, 0x020040,
    0x020043, 0x020046, 0x020047, 0x020048, 0x020049, 0x02004A, 0x02004C, 0x02004D, 0x030000, 0x030004, 0x030006,
    0x030007, 0x030008, 0x030009, 0x03000A, 0x03000B, 0x03000C, 0x03000D, 0x03000E, 0x03000F, 0x030010, 0x030013,
    0x03001A, 0x031000, 0x031001, 0x031002, 0x031003, 0x031004, 0x031005, 0x040000, 0x040001, 0x040003, 0x040004,
    0x040005, 0x040007, 0x040008, 0x050000, 0x050001, 0x050002, 0x050003, 0x050004, 0x050005, 0x050006, 0x050007,
    0x050008, 0x050009, 0x05000A, 0x05000B, 0x05000C, 0x05000D, 0x05000E, 0x05000F, 0x050014, 0x050015, 0x050016,
    0x050017, 0x050018, 0x050019, 0x05001A, 0x05001B, 0x060001, 0x060002, 0x060007, 0x060008, 0x060009, 0x06000A,
    0x06000B, 0x06000C, 0x06000D, 0x06000E, 0x06000F, 0x060010,
];

macro_rules! codes {
    ($($name:ident = $num:expr;)*) => {
        $(#[allow(missing_docs)] pub const $name: Code = Code { number: $num, name: stringify!($name) };)*
    };
}

codes! {
    P0_BB_NOT_GROUP = 0x000001;
    P0_IB_NOT_GROUP = 0x000002;
    P0_ITABLE_NOT_GROUP = 0x000003;
    P0_SB_CORRUPT = 0x000004;
    P0_FS_SIZE_WRONG = 0x000005;
    P0_INODE_COUNT_WRONG = 0x00000D;
    P0_JOURNAL_BAD_INODE = 0x00000F;
    P0_JOURNAL_UNSUPP_SUPER = 0x000014;
    P0_JOURNAL_HAS_JOURNAL = 0x000016;
    P0_JOURNAL_BAD_SUPER = 0x000015;
    P0_JOURNAL_RECOVER_SET = 0x000017;
    P0_JOURNAL_RECOVERY_CLEAR = 0x000018;
    P0_FS_REV_LEVEL = 0x00001A;
    P0_ORPHAN_CLEAR_INODE = 0x000020;
    P0_ORPHAN_ILLEGAL_HEAD_INODE = 0x000023;
    P0_ORPHAN_ILLEGAL_INODE = 0x000024;
    P0_JOURNAL_UNSUPP_INCOMPAT = 0x000026;
    P0_NONZERO_RESERVED_GDT_BLOCKS = 0x00002E;
    P0_CLEAR_RESIZE_INODE = 0x00002F;
    P0_RESIZE_INODE_INVALID = 0x000030;
    P0_GDT_CSUM = 0x000035;
    P0_GDT_UNINIT = 0x000036;
    P0_GDT_ITABLE_UNUSED = 0x000038;
    P0_BB_UNINIT_LAST = 0x000039;
    P0_FREE_INODE_COUNT = 0x00003F;
    P0_FREE_BLOCK_COUNT = 0x000040;
    P0_META_AND_GDT_CSUM_SET = 0x000046;
    P0_64BIT_WITHOUT_EXTENTS = 0x000048;
    P0_FIRST_META_BG_TOO_BIG = 0x000049;
    P0_CSUM_SEED_WITHOUT_META_CSUM = 0x00004B;
    P0_BAD_MIN_EXTRA_ISIZE = 0x00004D;
    P0_BAD_WANT_EXTRA_ISIZE = 0x00004E;
    P0_INVALID_QUOTA_INO = 0x00004F;
    P0_ADD_UUID = 0x000009;
    P0_JOURNAL_RESET_JOURNAL = 0x000019;
    P0_CLEAR_V2_JOURNAL = 0x00002A;
    P0_DISABLE_RESIZE_INODE = 0x000051;

    P1_ROOT_NO_DIR = 0x010001;
    P1_ROOT_DTIME = 0x010002;
    P1_RESERVED_BAD_MODE = 0x010003;
    P1_ZERO_DTIME = 0x010004;
    P1_SET_DTIME = 0x010005;
    P1_ZERO_LENGTH_DIR = 0x010006;
    P1_BB_CONFLICT = 0x010007;
    P1_IB_CONFLICT = 0x010008;
    P1_ITABLE_CONFLICT = 0x010009;
    P1_BAD_I_SIZE = 0x01000C;
    P1_BAD_I_BLOCKS = 0x01000D;
    P1_ILLEGAL_BLOCK_NUM = 0x01000E;
    P1_SET_IMAGIC = 0x01002F;
    P1_SET_IMMUTABLE = 0x010030;
    P1_SET_NONZSIZE = 0x010032;
    P1_JOURNAL_INODE_NOT_CLEAR = 0x010034;
    P1_JOURNAL_BAD_MODE = 0x010035;
    P1_LOW_DTIME = 0x010036;
    P1_READ_EA_BLOCK = 0x010039;
    P1_BAD_EA_BLOCK = 0x01003A;
    P1_EXTATTR_REFCOUNT = 0x01003C;
    P1_EA_MULTI_BLOCK = 0x01003E;
    P1_HTREE_SET = 0x010047;
    P1_HTREE_NODIR = 0x010048;
    P1_HTREE_BADROOT = 0x010049;
    P1_HTREE_HASHV = 0x01004A;
    P1_HTREE_INCOMPAT = 0x01004B;
    P1_HTREE_DEPTH = 0x01004C;
    P1_EXTRA_ISIZE = 0x01004F;
    P1_ATTR_NAME_LEN = 0x010050;
    P1_ATTR_VALUE_OFFSET = 0x010051;
    P1_ATTR_VALUE_BLOCK = 0x010052;
    P1_ATTR_VALUE_SIZE = 0x010053;
    P1_ATTR_HASH = 0x010054;
    P1_READ_EXTENT = 0x010056;
    P1_EXTENT_BAD_START_BLK = 0x010058;
    P1_EXTENT_ENDS_BEYOND = 0x010059;
    P1_EXTENTS_SET = 0x01005A;
    P1_UNSET_EXTENT_FL = 0x01005C;
    P1_FAST_SYMLINK_EXTENT_FL = 0x01005D;
    P1_OUT_OF_ORDER_EXTENTS = 0x01005E;
    P1_EXTENT_HEADER_INVALID = 0x01005F;
    P1_EXTENT_LENGTH_ZERO = 0x010066;
    P1_INODE_ONLY_CSUM_INVALID = 0x010068;
    P1_EXTENT_ONLY_CSUM_INVALID = 0x01006A;
    P1_EA_BLOCK_ONLY_CSUM_INVALID = 0x01006C;
    P1_EXTENT_INDEX_START_INVALID = 0x01006D;
    P1_EXTENT_END_OUT_OF_BOUNDS = 0x01006E;
    P1_INLINE_DATA_FEATURE = 0x01006F;
    P1_INLINE_DATA_NO_ATTR = 0x010075;
    P1_SPECIAL_EXTENTS_IDATA = 0x010076;
    P1_MISSING_EXTENT_HEADER = 0x010081;
    P1_ATTR_VALUE_EA_INODE = 0x010083;
    P1_ATTR_SET_EA_INODE_FL = 0x010086;
    P1_CASEFOLD_NONDIR = 0x010088;
    P1_CASEFOLD_FEATURE = 0x010089;
    P1_HTREE_NEEDS_SIPHASH = 0x01008D;
    P1_HTREE_CANNOT_SIPHASH = 0x01008E;
    P1_TOO_MANY_BAD_BLOCKS = 0x010011;
    P1_INLINE_DATA_SET = 0x010070;
    P1_FS_REV_LEVEL = 0x010033;
    P1_BB_ILLEGAL_BLOCK_NUM = 0x010012;
    P1_BBINODE_BAD_METABLOCK = 0x010015;
    P1_BB_FS_BLOCK = 0x01004D;
    P1_BAD_PRIMARY_SUPERBLOCK = 0x010019;
    P1_BAD_PRIMARY_GROUP_DESCRIPTOR = 0x01001A;
    P1_BAD_SUPERBLOCK = 0x01001B;
    P1_BAD_GROUP_DESCRIPTORS = 0x01001C;
    P1_INVALID_BAD_INODE = 0x010065;
    P1_BADBLOCKS_IN_BADBLOCKS = 0x01007B;
    P1_EA_INODE_NONREG = 0x010091;
    P1_EXTENT_FEATURE = 0x01005B;
    P1_RELOC_BLOCK_ALLOCATE = 0x01001E;
    P1_BB_BAD_BLOCK = 0x01000A;
    P1_IB_BAD_BLOCK = 0x01000B;
    P1_EA_ALLOC_COLLISION = 0x010040;
    P1_EA_BAD_NAME = 0x010041;
    P1_EA_BAD_VALUE = 0x010042;
    P1_INODE_EA_ALLOC_COLLISION = 0x010069;
    P1_ATTR_NO_EA_INODE_FL = 0x010085;
    P1_EA_INODE_FEATURE = 0x010092;
    P1_CLEAR_INLINE_DATA_FOR_EXTENT = 0x010077;
    P1_CLEAR_EXTENT_FOR_INLINE_DATA = 0x010078;
    P1_CLEAR_EXTENT_INLINE_DATA_FLAGS = 0x010079;
    P1_CLEAR_EXTENT_INLINE_DATA_INODE = 0x01007A;
    P1_TOOBIG_DIR = 0x010044;
    P1_MISSING_ENCRYPTION_XATTR = 0x01008A;
    P1_CORRUPT_ENCRYPTION_XATTR = 0x01008B;
    P1_TREAT_AS_DIRECTORY = 0x010055;
    P1_UNINIT_DBLOCK = 0x010073;

    P1B_DUP_BLOCK = 0x011002;
    P1D_DUP_FILE = 0x013001;
    P1D_SHARE_METADATA = 0x013003;
    P1D_CLONE_QUESTION = 0x013006;
    P1D_DELETE_QUESTION = 0x013007;

    P2_BAD_INODE_DOT = 0x020001;
    P2_BAD_INO = 0x020002;
    P2_BB_INODE = 0x020005;
    P2_UNUSED_INODE = 0x020003;
    P2_LINK_DOT = 0x020004;
    P2_LINK_DIR = 0x020006;
    P2_LINK_ROOT = 0x020007;
    P2_BAD_NAME = 0x020008;
    P2_MISSING_DOT = 0x020009;
    P2_MISSING_DOT_DOT = 0x02000A;
    P2_1ST_NOT_DOT = 0x02000B;
    P2_2ND_NOT_DOT_DOT = 0x02000C;
    P2_FADDR_ZERO = 0x02000D;
    P2_FILE_ACL_ZERO = 0x02000E;
    P2_BAD_MODE = 0x020012;
    P2_DIR_CORRUPTED = 0x020013;
    P2_DIRECTORY_HOLE = 0x020015;
    P2_DOT_NULL_TERM = 0x020016;
    P2_DOT_DOT_NULL_TERM = 0x020017;
    P2_BAD_CHAR_DEV = 0x020018;
    P2_BAD_BLOCK_DEV = 0x020019;
    P2_DUP_DOT = 0x02001A;
    P2_DUP_DOT_DOT = 0x02001B;
    P2_FINAL_RECLEN = 0x02001D;
    P2_READ_DIRBLOCK = 0x020020;
    P2_BAD_FIFO = 0x020025;
    P2_BAD_SOCKET = 0x020026;
    P2_SET_FILETYPE = 0x020027;
    P2_FILE_ACL_BAD = 0x020032;
    P2_BAD_FILETYPE = 0x020028;
    P2_CLEAR_FILETYPE = 0x020029;
    P2_NULL_NAME = 0x020030;
    P2_DUPLICATE_DIRENT = 0x020041;
    P2_NON_UNIQUE_FILE = 0x020042;
    P2_BLOCKS_HI_ZERO = 0x020044;
    P2_I_FILE_ACL_HI_ZERO = 0x020048;
    P2_INVALID_SYMLINK = 0x020031;
    P2_HTREE_NOTREF = 0x020034;
    P2_HTREE_DUPREF = 0x020035;
    P2_HTREE_MIN_HASH = 0x020036;
    P2_HTREE_MAX_HASH = 0x020037;
    P2_HTREE_BADBLK = 0x02003A;
    P2_HTREE_BAD_ROOT = 0x02003C;
    P2_HTREE_BAD_LIMIT = 0x02003D;
    P2_HTREE_BAD_COUNT = 0x02003E;
    P2_HTREE_HASH_ORDER = 0x02003F;
    P2_HTREE_BAD_DEPTH = 0x020040;
    P2_INOREF_BG_INO_UNINIT = 0x020046;
    P2_INOREF_IN_UNUSED = 0x020047;
    P2_HTREE_ROOT_CSUM_INVALID = 0x020049;
    P2_HTREE_NODE_CSUM_INVALID = 0x02004A;
    P2_LEAF_NODE_MISSING_CSUM = 0x02004C;
    P2_LEAF_NODE_ONLY_CSUM_INVALID = 0x02004D;
    P2_BAD_INLINE_DIR_SIZE = 0x02004E;
    P2_SPLIT_DOT = 0x020024;
    P2_FEATURE_LARGE_FILES = 0x020033;
    P2_BAD_ENCRYPTED_NAME = 0x020050;
    P2_UNENCRYPTED_FILE = 0x020051;
    P2_INCONSISTENT_ENCRYPTION_POLICY = 0x020052;
    P2_BAD_ENCODED_NAME = 0x020053;

    P3_NO_ROOT_INODE = 0x030001;
    P3_UNCONNECTED_DIR = 0x030003;
    P3_NO_LF_DIR = 0x030004;
    P3_BAD_DOT_DOT = 0x030005;
    P3_LPF_NOTDIR = 0x030017;
    P3_NO_LPF = 0x030006;
    P3_CANT_RECONNECT = 0x030008;
    P3_FIX_PARENT_NOFIND = 0x030010;
    P3_LOOPED_DIR = 0x03001D;
    P3_LPF_NO_SPACE = 0x030019;
    P3_NO_SPACE_TO_RECOVER = 0x03001A;
    P3A_OPTIMIZE_DIR = 0x031004;

    P4_ZERO_LEN_INODE = 0x040001;
    P4_UNATTACHED_INODE = 0x040002;
    P4_BAD_REF_COUNT = 0x040003;
    P4_DIR_NLINK_FEATURE = 0x040006;
    P4_DIR_OVERFLOW_REF_COUNT = 0x040007;
    P4_EA_INODE_REF_COUNT = 0x040005;
    P4_EA_INODE_SPURIOUS_FLAG = 0x040008;

    P5_INODE_BMAP_PADDING = 0x050001;
    P5_BLOCK_BMAP_PADDING = 0x050002;
    P5_BLOCK_UNUSED = 0x050004;
    P5_BLOCK_USED = 0x050005;
    P5_INODE_UNUSED = 0x050008;
    P5_INODE_USED = 0x050009;
    P5_FREE_INODE_COUNT_GROUP = 0x05000B;
    P5_FREE_DIR_COUNT_GROUP = 0x05000C;
    P5_FREE_INODE_COUNT = 0x05000D;
    P5_FREE_BLOCK_COUNT_GROUP = 0x05000E;
    P5_FREE_BLOCK_COUNT = 0x05000F;
    P5_BLOCK_RANGE_UNUSED = 0x050014;
    P5_BLOCK_RANGE_USED = 0x050015;
    P5_INODE_RANGE_UNUSED = 0x050016;
    P5_INODE_RANGE_USED = 0x050017;
    P5_INODE_BITMAP_CSUM_INVALID = 0x05001A;
    P5_BLOCK_BITMAP_CSUM_INVALID = 0x05001B;

    P6_UPDATE_QUOTAS = 0x060002;
    P6_RECREATE_JOURNAL = 0x060001;
}

/// ext4kit's own problems, for concepts e2fsck has no number for (the itree
/// index, backups that disagree with the primary superblock). Numbers from
/// 0x80_0000 up, with the pass in the next byte, so they never collide.
pub mod own {
    use super::Code;
    codes! {
        P0_BACKUP_SB_DIFFERS = 0x800001;
        P2_ITREE_FLAG_WITHOUT_FEATURE = 0x820001;
        P2_ITREE_BAD = 0x820002;
        P0_PRIMARY_FROM_BACKUP = 0x800002;
    }
}

/// How bad a finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// The file system is inconsistent: e2fsck would ask to fix it.
    Error,
    /// Worth saying, but e2fsck leaves the exit status clean for it.
    Warning,
}

/// One problem found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Finding {
    /// What kind of problem.
    pub code: Code,
    /// The pass that reports it (see [`Code::pass`]).
    pub pass: u8,
    /// Error or warning.
    pub severity: Severity,
    /// The inode concerned, if any.
    pub inode: Option<u32>,
    /// The block concerned, if any.
    pub block: Option<u64>,
    /// The group concerned, if any.
    pub group: Option<u32>,
    /// What was found, in words.
    pub message: String,
    /// What a repair does about it.
    pub would: &'static str,
    /// The repair was made (`-p`/`-y`); false in a check-only run or where
    /// no repair exists yet for this finding.
    pub fixed: bool,
}

impl Finding {
    /// An error finding with no location yet.
    pub fn new(code: Code, message: impl Into<String>, would: &'static str) -> Self {
        Self {
            code,
            pass: if code.number >= 0x80_0000 {
                ((code.number >> 16) & 0xF) as u8
            } else {
                code.pass()
            },
            severity: Severity::Error,
            inode: None,
            block: None,
            group: None,
            message: message.into(),
            would,
            fixed: false,
        }
    }
    /// Sets the inode.
    pub fn ino(mut self, ino: u32) -> Self {
        self.inode = Some(ino);
        self
    }
    /// Sets the block.
    pub fn blk(mut self, blk: u64) -> Self {
        self.block = Some(blk);
        self
    }
    /// Sets the group.
    pub fn grp(mut self, g: u32) -> Self {
        self.group = Some(g);
        self
    }
    /// Makes it a warning.
    pub fn warning(mut self) -> Self {
        self.severity = Severity::Warning;
        self
    }
}
