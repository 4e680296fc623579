//! The superblock fields `tune` sets (`-L`, `-U`, `-e`, `-c`, `-i`, `-E
//! hash_seed=`), and staging the primary superblock and its backups into
//! the rewrite. Backups receive the same tunable fields (the primary's
//! features without `needs_recovery`), each keeping its own other fields
//! such as `s_block_group_nr`, as e2fsprogs writes them.

use ext4kit_format::checksum::fs_csum_seed;
use ext4kit_format::features::{IncompatFeatures, RoCompatFeatures};
use ext4kit_format::superblock::RawSuperblock;

use super::rewrite::Rewrite;
use super::{Plan, TuneRequest, UuidChange};
use crate::error::{Error, Location, Result};
use crate::fs::Filesystem;

/// Sets the simple fields and plans what a new UUID implies.
pub(crate) fn plan_fields(fs: &Filesystem, p: &mut Plan, req: &TuneRequest) -> Result<()> {
    if let Some(label) = &req.label {
        let bytes = label.as_bytes();
        if bytes.len() > 16 {
            p.notes
                .push(format!("label {label:?} is longer than 16 bytes: truncated"));
        }
        p.new.s_volume_name = [0; 16];
        let n = bytes.len().min(16);
        p.new.s_volume_name[..n].copy_from_slice(&bytes[..n]);
    }
    if let Some(e) = req.errors {
        p.new.s_errors.set(e as u16);
    }
    if let Some(c) = req.max_mount_count {
        if !(-16000..=16000).contains(&c) {
            return Err(Error::InvalidArgument(format!("bad mount count {c}")));
        }
        p.new.s_max_mnt_count.set(if c == 0 { -1i16 as u16 } else { c as u16 });
    }
    if let Some(i) = req.check_interval {
        p.new.s_checkinterval.set(i);
    }
    if let Some(seed) = &req.hash_seed {
        check_hash_seed_change(fs, p)?;
        set_hash_seed(&mut p.new, seed);
    }
    if let Some(u) = req.uuid {
        set_uuid(p, u);
    }
    Ok(())
}

/// The htree of every indexed directory is ordered by hashes of the old
/// seed: a new seed makes lookups miss names and e2fsck report the index
/// as corrupt. tune2fs has no such option (it is mke2fs's); here it is
/// allowed only while no directory is indexed, or when the same request
/// turns `dir_index` off (which drops every index).
fn check_hash_seed_change(fs: &Filesystem, p: &Plan) -> Result<()> {
    if p.clear_index {
        return Ok(());
    }
    if let Some(ino) = super::csum::first_indexed_dir(fs)? {
        return Err(Error::InvalidArgument(format!(
            "cannot change the hash seed: directory inode {ino} is indexed (htree) by hashes of the \
             current seed; turn dir_index off in the same request (-O ^dir_index) to drop the indexes"
        )));
    }
    Ok(())
}

/// Stores a 16-byte UUID as `s_hash_seed` (four little-endian words).
pub(crate) fn set_hash_seed(sb: &mut RawSuperblock, seed: &[u8; 16]) {
    for (i, c) in seed.chunks(4).enumerate() {
        sb.s_hash_seed[i].set(u32::from_le_bytes([c[0], c[1], c[2], c[3]]));
    }
}

/// A new UUID. With `metadata_csum` every checksum is seeded from the
/// UUID; rather than rewriting them all, the old seed is kept in the
/// superblock with `metadata_csum_seed` (kernel 4.4+, e2fsprogs 1.43+),
/// which tune2fs suggests too. With `uninit_bg` the group descriptor
/// checksums (crc16 over the UUID) are rewritten.
fn set_uuid(p: &mut Plan, u: UuidChange) {
    let uuid = match u {
        UuidChange::Clear => [0; 16],
        UuidChange::Random => crate::mkfs::random_uuid(),
        UuidChange::Time => time_uuid(),
        UuidChange::Set(x) => x,
    };
    let f = p.new.features();
    let seed_from_uuid = !f.incompat.contains(IncompatFeatures::CSUM_SEED);
    if f.metadata_csum() && seed_from_uuid && !p.csum && fs_csum_seed(&uuid) != p.new.csum_seed() {
        let seed = p.new.csum_seed();
        let v = p.new.s_feature_incompat.get() | IncompatFeatures::CSUM_SEED.0;
        p.new.s_feature_incompat.set(v);
        p.new.s_checksum_seed.set(seed);
        p.notes
            .push("metadata_csum_seed turned on: the checksum seed stays that of the old UUID".into());
    }
    if f.ro_compat.contains(RoCompatFeatures::GDT_CSUM) && !f.metadata_csum() {
        p.groups = true;
    }
    p.new.s_uuid = uuid;
}

/// A version-1 UUID from the clock (100 ns intervals since 1582-10-15)
/// and a random node, as `uuid_generate_time` without a MAC address.
pub fn time_uuid() -> [u8; 16] {
    let since_unix = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() / 100)
        .unwrap_or(0) as u64;
    let t = since_unix.wrapping_add(0x01B2_1DD2_1381_4000);
    let mut u = crate::mkfs::random_uuid();
    u[0..4].copy_from_slice(&((t & 0xFFFF_FFFF) as u32).to_be_bytes());
    u[4..6].copy_from_slice(&(((t >> 32) & 0xFFFF) as u16).to_be_bytes());
    u[6..8].copy_from_slice(&((((t >> 48) & 0x0FFF) as u16) | 0x1000).to_be_bytes());
    u[8] = (u[8] & 0x3f) | 0x80;
    u[10] |= 0x01; // multicast bit: a random node, not a MAC address
    u
}

/// `-i` as tune2fs reads it: a number of days, or with a suffix `s`, `d`,
/// `w` (weeks) or `m` (30-day months); below 2³² seconds.
///
/// # Errors
/// [`Error::InvalidArgument`] for anything else.
pub fn parse_interval(s: &str) -> Result<u32> {
    let bad = || Error::InvalidArgument(format!("bad interval {s:?}"));
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: u64 = num.parse().map_err(|_| bad())?;
    let mult: u64 = match unit {
        "s" | "S" => 1,
        "" | "d" | "D" => 86_400,
        "w" | "W" => 86_400 * 7,
        "m" | "M" => 86_400 * 30,
        _ => return Err(bad()),
    };
    let secs = n.checked_mul(mult).ok_or_else(bad)?;
    u32::try_from(secs).map_err(|_| Error::InvalidArgument(format!("interval between checks is too big ({secs})")))
}

/// Copies the fields `tune` changes from the new primary into a backup.
fn carry_tunables(from: &RawSuperblock, to: &mut RawSuperblock) {
    to.s_feature_compat = from.s_feature_compat;
    let incompat = from.s_feature_incompat.get() & !IncompatFeatures::RECOVER.0;
    to.s_feature_incompat.set(incompat);
    to.s_feature_ro_compat = from.s_feature_ro_compat;
    to.s_uuid = from.s_uuid;
    to.s_volume_name = from.s_volume_name;
    to.s_errors = from.s_errors;
    to.s_max_mnt_count = from.s_max_mnt_count;
    to.s_checkinterval = from.s_checkinterval;
    to.s_hash_seed = from.s_hash_seed;
    to.s_def_hash_version = from.s_def_hash_version;
    to.s_checksum_type = from.s_checksum_type;
    to.s_checksum_seed = from.s_checksum_seed;
    to.s_encoding = from.s_encoding;
    to.s_encoding_flags = from.s_encoding_flags;
    to.set_checksum();
}

/// Stages the primary superblock (with `needs_recovery`, as the logged
/// copy of a mounted file system has it; the final write clears it) and
/// every backup.
pub(crate) fn stage(rw: &mut Rewrite<'_>, p: &Plan) -> Result<()> {
    let fs = rw.fs;
    let mut primary = p.new;
    let v = primary.s_feature_incompat.get() | IncompatFeatures::RECOVER.0;
    primary.s_feature_incompat.set(v);
    primary.set_checksum();
    let bs = u64::from(fs.geo.block_size);
    let (home, at) = if bs == 1024 { (1, 0) } else { (0, 1024) };
    rw.block(home)?[at..at + 1024].copy_from_slice(&primary.encode());
    for g in 1..fs.geo.group_count {
        if !fs.group_has_super(g) {
            continue;
        }
        let b = fs.geo.group_first_block(g);
        let buf = rw.block(b)?;
        let mut sb = RawSuperblock::parse(&buf[..1024]).map_err(|e| Error::format(Location::Group(g), e))?;
        if sb.s_magic.get() != ext4kit_format::superblock::EXT4_SUPER_MAGIC {
            return Err(Error::inconsistent(
                Location::Block { block: b, inode: 0 },
                format!("backup superblock of group {g} has a bad magic number"),
            ));
        }
        carry_tunables(&p.new, &mut sb);
        buf[..1024].copy_from_slice(&sb.encode());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intervals_read_as_tune2fs_reads_them() {
        assert_eq!(parse_interval("3").unwrap(), 3 * 86_400);
        assert_eq!(parse_interval("2w").unwrap(), 14 * 86_400);
        assert_eq!(parse_interval("1m").unwrap(), 30 * 86_400);
        assert_eq!(parse_interval("90s").unwrap(), 90);
        assert_eq!(parse_interval("0").unwrap(), 0);
        for bad in ["", "d", "5y", "-1", "100000000d"] {
            assert!(parse_interval(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn time_uuids_are_version_1_rfc4122() {
        let u = time_uuid();
        assert_eq!(u[6] >> 4, 1);
        assert_eq!(u[8] & 0xc0, 0x80);
    }
}
