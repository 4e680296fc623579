//! [`MkfsOptions`]: what `mke2fs` takes on its command line, parsed from the
//! same strings (`-t ext4`, `-O ^resize_inode,meta_bg`, `-E stride=16`,
//! sizes like `64M`), and the defaults of `/etc/mke2fs.conf`.

use ext4kit_format::features::{CompatFeatures, Features, IncompatFeatures, RoCompatFeatures};

use ext4kit_format::quota::QuotaType;

use super::flexsize::Media;
use super::journal::JournalSize;
use crate::error::{Error, Result};

/// Where mkfs puts each flex group's bitmaps and inode tables
/// (`-E flex_meta=`). flex_bg lets a group's metadata lie anywhere
/// (`Documentation/filesystems/ext4/overview.rst`, "Flexible Block
/// Groups"); mke2fs packs it at the start of the flex group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FlexMeta {
    /// At the start of the flex group, as mke2fs does.
    #[default]
    Start,
    /// From the first block of the flex group's middle group (seed 001
    /// §4.5: "placement of meta-data in the center of the virtual group
    /// instead of the beginning to reduce the worst case seek"): no data
    /// block of the flex group is more than half of it away.
    Middle,
}

impl std::str::FromStr for FlexMeta {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "start" => Ok(Self::Start),
            "middle" => Ok(Self::Middle),
            _ => Err(Error::InvalidArgument(format!(
                "flex_meta={s:?}: expected start or middle"
            ))),
        }
    }
}

/// The `-t` file-system type: selects the default feature set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FsType {
    /// `ext2`: the base features only.
    Ext2,
    /// `ext3`: base + `has_journal`.
    Ext3,
    /// `ext4`: base + journal, extents, flex_bg, metadata_csum, 64bit…
    #[default]
    Ext4,
}

impl std::str::FromStr for FsType {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "ext2" => Ok(Self::Ext2),
            "ext3" => Ok(Self::Ext3),
            "ext4" => Ok(Self::Ext4),
            _ => Err(Error::InvalidArgument(format!(
                "unknown file-system type {s:?} (ext2, ext3 or ext4)"
            ))),
        }
    }
}

impl FsType {
    /// The features `mke2fs.conf` gives this type: `base_features` plus the
    /// type's own list.
    pub fn default_features(self) -> Features {
        let mut f = Features {
            compat: CompatFeatures::RESIZE_INODE | CompatFeatures::DIR_INDEX | CompatFeatures::EXT_ATTR,
            incompat: IncompatFeatures::FILETYPE,
            ro_compat: RoCompatFeatures::SPARSE_SUPER | RoCompatFeatures::LARGE_FILE,
        };
        if self != Self::Ext2 {
            f.compat = f.compat | CompatFeatures::HAS_JOURNAL;
        }
        if self == Self::Ext4 {
            f.incompat = f.incompat | IncompatFeatures::EXTENTS | IncompatFeatures::FLEX_BG | IncompatFeatures::BIT64;
            f.ro_compat = f.ro_compat
                | RoCompatFeatures::HUGE_FILE
                | RoCompatFeatures::METADATA_CSUM
                | RoCompatFeatures::DIR_NLINK
                | RoCompatFeatures::EXTRA_ISIZE;
        }
        f
    }
}

/// Everything `mkfs` needs to lay out a file system. `Default` is
/// `mke2fs -t ext4` with every size taken from the device.
#[derive(Debug, Clone)]
pub struct MkfsOptions {
    /// `-t`: default feature set.
    pub fs_type: FsType,
    /// File-system size in bytes; `None` uses the whole device.
    pub size_bytes: Option<u64>,
    /// `-b`: block size (1024–65536); `None` picks it from the size like mke2fs.
    pub block_size: Option<u32>,
    /// `-C`: cluster size in bytes with `bigalloc` (a power of two from the
    /// block size up); `None` is 16 blocks, as mke2fs.conf's default.
    pub cluster_size: Option<u32>,
    /// `-I`: inode record size (128–block size, a power of two); default 256.
    pub inode_size: Option<u16>,
    /// `-i`: bytes per inode; `None` picks it from the size like mke2fs.
    pub bytes_per_inode: Option<u64>,
    /// `-N`: minimum number of inodes (overrides `-i`).
    pub inode_count: Option<u64>,
    /// `-m`: percentage of blocks reserved for root (default 5).
    pub reserved_percent: f64,
    /// `-O` edits applied in order over the type's defaults: (name, on).
    pub feature_edits: Vec<(String, bool)>,
    /// `-G`: groups per flex group (power of two, default 16).
    pub groups_per_flex: Option<u32>,
    /// `-G auto`: groups per flex group chosen from the size, the media
    /// and the RAID stripe ([`super::flexsize`]); `groups_per_flex`, when
    /// given, wins.
    pub flex_auto: bool,
    /// `-E media=hdd|ssd`: the media type `-G auto` uses. `None`: the
    /// caller detects it ([`super::media::detect_media`]) or it is unknown.
    pub media: Option<Media>,
    /// `-E flex_meta=start|middle`: where a flex group's bitmaps and inode
    /// tables go ([`FlexMeta`]).
    pub flex_meta: FlexMeta,
    /// `-E stride=`: RAID stride in blocks.
    pub stride: u32,
    /// `-E stripe_width=`: RAID stripe width in blocks.
    pub stripe_width: u32,
    /// `-E lazy_itable_init=` (default true): leave inode tables the kernel
    /// can zero lazily unwritten.
    pub lazy_itable_init: bool,
    /// `-E root_owner=uid:gid` (default 0:0).
    pub root_owner: (u32, u32),
    /// `-E encoding_flags=` (`strict`, `nostrict`): `s_encoding_flags` of
    /// a casefold image; `None` keeps utf8's default (0).
    pub encoding_flags: Option<u16>,
    /// `-E hash_seed=`; `None` draws a random one.
    pub hash_seed: Option<[u8; 16]>,
    /// `-U`; `None` draws a random (version 4) UUID.
    pub uuid: Option<[u8; 16]>,
    /// `-L`: volume label (at most 16 bytes).
    pub label: String,
    /// Every time stamp written; `None` uses `SOURCE_DATE_EPOCH` when set,
    /// else the current time.
    pub timestamp: Option<u32>,
    /// `-E mmp_update_interval=`: seconds between updates of the MMP block
    /// (`s_mmp_update_interval`); with `-O mmp`, `None` or 0 means 5 and
    /// more than 300 is refused, as `ext2fs_mmp_init` does.
    pub mmp_update_interval: Option<u16>,
    /// The caller guarantees the device reads as zeros (a freshly created or
    /// truncated image file): inode tables and the journal are then not
    /// written and groups are marked `ITABLE_ZEROED`, as mke2fs does after a
    /// discard that zeroes.
    pub device_zeroed: bool,
    /// `-E quotatype=usrquota:grpquota:prjquota`: the quota files made with
    /// `-O quota`; `None` is user and group, as mke2fs. Project quota also
    /// turns on the `project` feature, and `project` adds project quota.
    pub quota_types: Option<Vec<QuotaType>>,
    /// `-J size=,fast_commit_size=`: `Some` turns has_journal on whatever
    /// `-t` and `-O` said, as any `-J` does in mke2fs.
    pub journal: Option<JournalSize>,
}

impl Default for MkfsOptions {
    fn default() -> Self {
        Self {
            fs_type: FsType::Ext4,
            size_bytes: None,
            block_size: None,
            cluster_size: None,
            inode_size: None,
            bytes_per_inode: None,
            inode_count: None,
            reserved_percent: 5.0,
            feature_edits: Vec::new(),
            groups_per_flex: None,
            flex_auto: false,
            media: None,
            flex_meta: FlexMeta::Start,
            stride: 0,
            stripe_width: 0,
            lazy_itable_init: true,
            root_owner: (0, 0),
            encoding_flags: None,
            hash_seed: None,
            uuid: None,
            label: String::new(),
            timestamp: None,
            mmp_update_interval: None,
            device_zeroed: false,
            quota_types: None,
            journal: None,
        }
    }
}

impl MkfsOptions {
    /// Adds the edits of an `-O` list (`feat,^feat,…`). Names are checked
    /// when the layout is planned.
    pub fn add_features(&mut self, list: &str) {
        for item in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            match item.strip_prefix('^') {
                Some(name) => self.feature_edits.push((name.to_string(), false)),
                None => self.feature_edits.push((item.to_string(), true)),
            }
        }
    }

    /// Applies an `-E` list: `stride=`, `stripe_width=` (or `stripe-width=`),
    /// `lazy_itable_init=`, `root_owner=uid:gid`, `hash_seed=UUID`,
    /// `mmp_update_interval=`, `encoding=utf8`, `encoding_flags=`, and ext4kit's `flex_meta=start|middle` and
    /// `media=hdd|ssd`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] naming an unknown option or a bad value.
    pub fn add_extended(&mut self, list: &str) -> Result<()> {
        for item in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let (key, value) = item.split_once('=').unwrap_or((item, ""));
            let bad = || Error::InvalidArgument(format!("bad value in extended option {item:?}"));
            match key {
                "stride" => self.stride = value.parse().map_err(|_| bad())?,
                "stripe_width" | "stripe-width" => self.stripe_width = value.parse().map_err(|_| bad())?,
                "lazy_itable_init" => {
                    self.lazy_itable_init = value.is_empty() || value.parse::<u32>().map_err(|_| bad())? != 0
                }
                "root_owner" => {
                    let (u, g) = value.split_once(':').ok_or_else(bad)?;
                    self.root_owner = (u.parse().map_err(|_| bad())?, g.parse().map_err(|_| bad())?);
                }
                "hash_seed" => self.hash_seed = Some(parse_uuid(value)?),
                "mmp_update_interval" => self.mmp_update_interval = Some(value.parse().map_err(|_| bad())?),
                "flex_meta" => self.flex_meta = value.parse()?,
                "media" => self.media = Some(value.parse()?),
                "quotatype" => self.quota_types = Some(parse_quota_types(value)?),
                // mke2fs: naming the encoding turns casefold on.
                "encoding" if ext4kit_format::casefold::encoding_from_name(value).is_some() => {
                    self.feature_edits.push(("casefold".into(), true))
                }
                "encoding" => return Err(bad()),
                "encoding_flags" => {
                    self.encoding_flags = Some(ext4kit_format::casefold::parse_encoding_flags(value).ok_or_else(bad)?)
                }
                _ => return Err(Error::InvalidArgument(format!("unknown extended option {key:?}"))),
            }
        }
        Ok(())
    }
}

/// mke2fs's `parse_quota_types`: names (`usr`/`usrquota`, `grp`/`grpquota`,
/// `prj`/`prjquota`) separated by `:` or `,`.
fn parse_quota_types(value: &str) -> Result<Vec<QuotaType>> {
    let mut out = Vec::new();
    for name in value.split([':', ',']).filter(|s| !s.is_empty()) {
        let t = match name {
            "usr" | "usrquota" => QuotaType::User,
            "grp" | "grpquota" => QuotaType::Group,
            "prj" | "prjquota" => QuotaType::Project,
            _ => return Err(Error::InvalidArgument(format!("unknown quota type {name:?}"))),
        };
        if !out.contains(&t) {
            out.push(t);
        }
    }
    out.sort_unstable_by_key(|&t| t as usize);
    Ok(out)
}

impl MkfsOptions {
    /// The quota files to make on a file system of features `f`: none
    /// without `quota`; else `-E quotatype` (default user and group), with
    /// project added when `project` is on.
    pub fn quota_files(&self, f: &Features) -> Vec<QuotaType> {
        if !f.ro_compat.contains(RoCompatFeatures::QUOTA) {
            return Vec::new();
        }
        let mut v = self
            .quota_types
            .clone()
            .unwrap_or_else(|| vec![QuotaType::User, QuotaType::Group]);
        if f.ro_compat.contains(RoCompatFeatures::PROJECT) && !v.contains(&QuotaType::Project) {
            v.push(QuotaType::Project);
        }
        v
    }
}

/// Parses `xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx` into its 16 bytes.
///
/// # Errors
/// [`Error::InvalidArgument`] unless 32 hex digits (dashes ignored).
pub fn parse_uuid(s: &str) -> Result<[u8; 16]> {
    let hex: Vec<u8> = s.bytes().filter(|&b| b != b'-').collect();
    let bad = || Error::InvalidArgument(format!("invalid UUID {s:?}"));
    if hex.len() != 32 {
        return Err(bad());
    }
    let mut out = [0u8; 16];
    for (i, pair) in hex.chunks(2).enumerate() {
        let text = std::str::from_utf8(pair).map_err(|_| bad())?;
        out[i] = u8::from_str_radix(text, 16).map_err(|_| bad())?;
    }
    Ok(out)
}

/// Parses a size like `64M`, `1G`, `16T`, `512K` or a plain byte count
/// (binary units, as mke2fs and truncate read them).
///
/// # Errors
/// [`Error::InvalidArgument`] for anything else or an overflow.
pub fn parse_size(s: &str) -> Result<u64> {
    let bad = || Error::InvalidArgument(format!("invalid size {s:?}"));
    let t = s.trim();
    let (digits, shift) = match t.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let shift = match c.to_ascii_uppercase() {
                'K' => 10,
                'M' => 20,
                'G' => 30,
                'T' => 40,
                'P' => 50,
                _ => return Err(bad()),
            };
            (&t[..i], shift)
        }
        _ => (t, 0),
    };
    let n: u64 = digits.parse().map_err(|_| bad())?;
    n.checked_mul(1u64 << shift).ok_or_else(bad)
}

/// The final feature set: the type's defaults with the `-O` edits applied.
///
/// # Errors
/// [`Error::InvalidArgument`] for an unknown name; [`Error::Unsupported`]
/// naming every feature this mkfs cannot lay out (compression, …).
pub(crate) fn resolve_features(opts: &MkfsOptions) -> Result<Features> {
    let mut f = opts.fs_type.default_features();
    for (name, on) in &opts.feature_edits {
        let name = name.as_str();
        let flip = |bits: &mut u32, bit: u32| if *on { *bits |= bit } else { *bits &= !bit };
        if let Some(b) = CompatFeatures::from_name(name) {
            flip(&mut f.compat.0, b.0);
        } else if let Some(b) = IncompatFeatures::from_name(name) {
            flip(&mut f.incompat.0, b.0);
        } else if let Some(b) = RoCompatFeatures::from_name(name) {
            flip(&mut f.ro_compat.0, b.0);
        } else if name == "extents" {
            flip(&mut f.incompat.0, IncompatFeatures::EXTENTS.0);
        } else {
            return Err(Error::InvalidArgument(format!("unknown feature {name:?}")));
        }
    }
    if opts.journal.is_some() {
        f.compat.0 |= CompatFeatures::HAS_JOURNAL.0;
    }
    if opts
        .quota_types
        .as_ref()
        .is_some_and(|v| v.contains(&QuotaType::Project))
    {
        f.ro_compat.0 |= RoCompatFeatures::PROJECT.0;
    }
    if f.ro_compat.contains(RoCompatFeatures::PROJECT) && opts.inode_size == Some(128) {
        return Err(Error::InvalidArgument(
            "128-byte inodes are too small for project quota (no i_projid)".into(),
        ));
    }
    if opts.encoding_flags.is_some() && !f.incompat.contains(IncompatFeatures::CASEFOLD) {
        return Err(Error::InvalidArgument(
            "an encoding must be explicitly specified when passing encoding_flags".into(),
        ));
    }
    let unsupported = Features {
        compat: CompatFeatures(f.compat.0 & !SUPPORTED.compat.0),
        incompat: IncompatFeatures(f.incompat.0 & !SUPPORTED.incompat.0),
        ro_compat: RoCompatFeatures(f.ro_compat.0 & !SUPPORTED.ro_compat.0),
    };
    if unsupported != Features::default() {
        return Err(Error::Unsupported(format!(
            "mkfs cannot create these features yet: {}",
            unsupported.names().join(", ")
        )));
    }
    Ok(f)
}

/// The features this mkfs lays out.
const SUPPORTED: Features = Features {
    compat: CompatFeatures(
        CompatFeatures::HAS_JOURNAL.0
            | CompatFeatures::EXT_ATTR.0
            | CompatFeatures::RESIZE_INODE.0
            | CompatFeatures::DIR_INDEX.0
            | CompatFeatures::ORPHAN_FILE.0
            | CompatFeatures::SPARSE_SUPER2.0
            | CompatFeatures::STABLE_INODES.0
            | CompatFeatures::FAST_COMMIT.0,
    ),
    incompat: IncompatFeatures(
        IncompatFeatures::FILETYPE.0
            | IncompatFeatures::META_BG.0
            | IncompatFeatures::MMP.0
            | IncompatFeatures::EXTENTS.0
            | IncompatFeatures::BIT64.0
            | IncompatFeatures::FLEX_BG.0
            | IncompatFeatures::CSUM_SEED.0
            | IncompatFeatures::LARGEDIR.0
            | IncompatFeatures::INLINE_DATA.0
            | IncompatFeatures::EA_INODE.0
            | IncompatFeatures::ENCRYPT.0
            | IncompatFeatures::CASEFOLD.0,
    ),
    ro_compat: RoCompatFeatures(
        RoCompatFeatures::SPARSE_SUPER.0
            | RoCompatFeatures::LARGE_FILE.0
            | RoCompatFeatures::HUGE_FILE.0
            | RoCompatFeatures::GDT_CSUM.0
            | RoCompatFeatures::DIR_NLINK.0
            | RoCompatFeatures::EXTRA_ISIZE.0
            | RoCompatFeatures::METADATA_CSUM.0
            | RoCompatFeatures::BIGALLOC.0
            | RoCompatFeatures::ITREE.0
            | RoCompatFeatures::QUOTA.0
            | RoCompatFeatures::PROJECT.0
            | RoCompatFeatures::VERITY.0,
    ),
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_lists_parse_like_mke2fs() {
        assert_eq!(parse_size("64M").unwrap(), 64 << 20);
        assert_eq!(parse_size("16T").unwrap(), 16 << 40);
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert!(parse_size("12Q").is_err());
        let mut o = MkfsOptions::default();
        o.add_features("^resize_inode,meta_bg");
        o.add_extended("stride=4,root_owner=1000:100,hash_seed=66666666-7777-8888-9999-aaaaaaaaaaaa")
            .unwrap();
        let f = resolve_features(&o).unwrap();
        assert!(f.incompat.contains(IncompatFeatures::META_BG));
        assert!(!f.compat.contains(CompatFeatures::RESIZE_INODE));
        assert_eq!(o.root_owner, (1000, 100));
        assert_eq!(o.hash_seed.unwrap()[0], 0x66);
        o.add_extended("flex_meta=middle,media=ssd").unwrap();
        assert_eq!((o.flex_meta, o.media), (FlexMeta::Middle, Some(Media::Ssd)));
        assert!(o.add_extended("flex_meta=end").is_err());
        assert!(o.add_extended("media=tape").is_err());
        o.add_features("encrypt,compression");
        let e = resolve_features(&o).unwrap_err().to_string();
        assert!(e.contains("compression") && !e.contains("encrypt"), "{e}");
    }

    #[test]
    fn quota_types_as_mke2fs_reads_them() {
        let mut o = MkfsOptions::default();
        o.add_features("quota");
        let f = resolve_features(&o).unwrap();
        assert_eq!(o.quota_files(&f), [QuotaType::User, QuotaType::Group]);
        o.add_extended("quotatype=prjquota:usr").unwrap();
        let f = resolve_features(&o).unwrap();
        assert!(
            f.ro_compat.contains(RoCompatFeatures::PROJECT),
            "prjquota turns project on"
        );
        assert_eq!(o.quota_files(&f), [QuotaType::User, QuotaType::Project]);
        assert!(o.add_extended("quotatype=foo").is_err());
        o.inode_size = Some(128);
        assert!(resolve_features(&o).is_err(), "no room for i_projid");
    }
}
