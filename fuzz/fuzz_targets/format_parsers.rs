//! Feeds arbitrary bytes to every parser of `ext4kit-format`.
//!
//! The crate promises that no input makes it panic; results are ignored, only
//! panics (and sanitizer findings, timeouts, OOMs) count. The first eight
//! bytes of the input also pick the few numbers some parsers take besides the
//! buffer (checksum seeds, inode numbers, parameters), so the fuzzer can
//! steer them; every parser still sees the whole input.

#![no_main]

use std::hint::black_box;

use ext4kit_format::features::{CompatFeatures, Features, IncompatFeatures, RoCompatFeatures};
use ext4kit_format::group_desc::{RawGroupDesc, bitmap_checksum};
use ext4kit_format::hash::{HashVersion, dx_hash, seed_from_bytes};
use ext4kit_format::htree::{self, DxNode, DxParams, DxRoot};
use ext4kit_format::inline::{self, InlineDir};
use ext4kit_format::inode::{RawInode, inode_checksum, verify_inode_checksum};
use ext4kit_format::journal::commit::{self, RawCommitHeader};
use ext4kit_format::journal::superblock::RawJournalSuperblock;
use ext4kit_format::journal::{
    self, INCOMPAT_64BIT, INCOMPAT_CSUM_V2, INCOMPAT_CSUM_V3, INCOMPAT_REVOKE, JournalParams,
    descriptor, revoke,
};
use ext4kit_format::mmp::RawMmp;
use ext4kit_format::superblock::{Geometry, RawSuperblock};
use ext4kit_format::xattr::{self, acl};
use ext4kit_format::{dir_entry, extent};
use libfuzzer_sys::fuzz_target;

/// Numbers taken from the head of the input.
struct Knobs {
    seed: u32,
    number: u32,
}

fn knobs(data: &[u8]) -> Knobs {
    let mut head = [0u8; 8];
    let n = data.len().min(8);
    head[..n].copy_from_slice(&data[..n]);
    Knobs {
        seed: u32::from_le_bytes([head[0], head[1], head[2], head[3]]),
        number: u32::from_le_bytes([head[4], head[5], head[6], head[7]]),
    }
}

/// `data` copied into a zero-padded buffer of at least `len` bytes, so that
/// block parsers that need a whole block see the input at its start.
fn padded(data: &[u8], len: usize) -> Vec<u8> {
    let mut v = data.to_vec();
    if v.len() < len {
        v.resize(len, 0);
    }
    v
}

fn superblock(data: &[u8], k: &Knobs) -> Features {
    // As found, and as if the input were an image (superblock at byte 1024).
    let mut features = Features::default();
    for buf in [data, data.get(1024..).unwrap_or(&[])] {
        let Ok(sb) = RawSuperblock::parse(buf) else {
            continue;
        };
        black_box(sb.encode());
        black_box(sb.verify_checksum().is_ok());
        black_box((sb.csum_seed(), sb.volume_name(), sb.last_mounted()));
        features = sb.features();
        if let Ok(geo) = Geometry::from_superblock(&sb) {
            black_box(geo.descs_per_block());
            black_box(geo.inode_location(k.number));
            let group = k.number % geo.group_count.max(1);
            black_box(geo.group_first_block(group));
            black_box(geo.blocks_in_group(group));
            black_box(geo.group_has_super_sparse(group));
            black_box(geo.group_has_super_sparse(k.number));
        }
    }
    features
}

fn group_descs(data: &[u8], k: &Knobs, features: &Features) {
    let uuid = [0x5Au8; 16];
    for desc_size in [32usize, 64] {
        let Ok(gd) = RawGroupDesc::parse(data, desc_size) else {
            continue;
        };
        black_box((gd.block_bitmap(), gd.inode_bitmap(), gd.inode_table()));
        black_box((gd.free_blocks(), gd.free_inodes(), gd.used_dirs()));
        black_box((gd.itable_unused(), gd.flags()));
        black_box((gd.block_bitmap_csum(), gd.inode_bitmap_csum()));
        // The features of the input's own superblock, and every checksum kind.
        let kinds = [
            *features,
            Features::default(),
            Features {
                compat: CompatFeatures(0),
                incompat: IncompatFeatures(0),
                ro_compat: RoCompatFeatures(k.number),
            },
        ];
        for f in &kinds {
            let _ = black_box(gd.verify_checksum(f, k.seed, &uuid, k.number, desc_size));
        }
        let mut out = [0u8; 64];
        gd.encode_into(&mut out[..desc_size]);
        black_box(out);
    }
    let len = usize::try_from(k.number % 8192).unwrap_or(0);
    black_box(bitmap_checksum(k.seed, data, len, 32));
    black_box(bitmap_checksum(k.seed, data, len, 64));
}

fn inodes(data: &[u8], k: &Knobs) {
    let sizes = [128usize, 256, 512, 1024, data.len()];
    for size in sizes {
        if let Ok(raw) = RawInode::parse(data, size) {
            black_box((raw.file_type(), raw.permissions(), raw.size()));
            black_box((raw.uid(), raw.gid(), raw.links(), raw.flags()));
            black_box((raw.file_acl(), raw.device(), raw.extra_isize()));
            black_box((raw.blocks_512(true, 4096), raw.blocks_512(false, 1024)));
            black_box((raw.atime(), raw.mtime(), raw.ctime(), raw.crtime()));
            black_box(raw.csum_seed(k.seed, k.number));
            let mut out = vec![0u8; size.min(1024)];
            raw.encode_into(&mut out);
            black_box(out);
            // The in-inode xattr region of a record of this size.
            if let Some(record) = data.get(..size)
                && let Ok(region) = xattr::ibody_region(record, raw.i_extra_isize.get())
                && let Ok(entries) = xattr::parse_ibody(region)
            {
                black_box(inline::system_data(&entries));
            }
        }
    }
    // `verify_inode_checksum` takes the record length as the inode size:
    // hand it the power-of-two sizes the engine uses, then the raw input.
    for size in [128usize, 256, 512] {
        if let Some(record) = data.get(..size) {
            let _ = black_box(verify_inode_checksum(record, k.seed, k.number));
        }
    }
    let _ = black_box(verify_inode_checksum(data, k.seed, k.number));
    let _ = black_box(inode_checksum(data, k.seed, k.number));
}

fn extents(data: &[u8], k: &Knobs) {
    let root = &data[..data.len().min(60)];
    for (buf, is_root) in [(root, true), (data, false), (data, true)] {
        if let Ok(node) = extent::parse_node(buf, is_root) {
            let mut out = vec![0u8; buf.len()];
            extent::encode_node(&node, &mut out);
            black_box(out);
        }
    }
    let _ = black_box(extent::verify_block_checksum(data, k.seed));
    let _ = black_box(extent::block_checksum(data, k.seed));
    let _ = black_box(extent::tail_offset(data));
}

fn dir_entries(data: &[u8], k: &Knobs) {
    for block_size in [1024usize, 4096, 65536] {
        for filetype in [true, false] {
            // Every item is consumed; errors end the iteration.
            for e in dir_entry::DirEntryIter::new(data, block_size, filetype).flatten() {
                black_box((e.inode, e.rec_len, e.file_type, e.name, e.offset));
            }
        }
    }
    black_box(dir_entry::has_tail(data));
    let _ = black_box(dir_entry::verify_block_checksum(data, k.seed));
    for block_size in [1024usize, 65536] {
        let raw = u16::try_from(k.number & 0xFFFF).unwrap_or(0);
        let len = dir_entry::rec_len_from_disk(raw, block_size);
        black_box(dir_entry::rec_len_to_disk(len, block_size));
    }
}

fn htree_blocks(data: &[u8], k: &Knobs) {
    for block_size in [1024u32, 4096] {
        let block = padded(data, block_size as usize);
        for metadata_csum in [false, true] {
            for large_dir in [false, true] {
                let params = DxParams {
                    block_size,
                    metadata_csum,
                    large_dir,
                };
                if let Ok(root) = DxRoot::parse(&block, &params) {
                    black_box((root.hash_version(), root.indirect_levels()));
                    black_box(htree::find(&root.entries, k.number));
                    black_box(root.to_block(block_size).is_ok());
                }
                if let Ok(node) = DxNode::parse(&block, &params) {
                    black_box(htree::find(&node.entries, k.number));
                    black_box(node.to_block(block_size).is_ok());
                }
            }
        }
        let _ = black_box(htree::verify_dx_checksum(&block, block_size, k.seed));
        let _ = black_box(htree::dx_checksum(data, block_size, k.seed));
    }
    // An impossible block size must be refused, not trusted.
    let params = DxParams {
        block_size: k.number,
        metadata_csum: true,
        large_dir: false,
    };
    let _ = black_box(DxRoot::parse(data, &params));
    let _ = black_box(DxNode::parse(data, &params));
    let _ = black_box(htree::verify_dx_checksum(data, k.number, k.seed));
}

fn hashes(data: &[u8]) {
    let mut seed_bytes = [0u8; 16];
    let n = data.len().min(16);
    seed_bytes[..n].copy_from_slice(&data[..n]);
    let seeds = [seed_from_bytes(&seed_bytes), [0; 4]];
    let name = &data[data.len().min(16)..];
    for code in 0..=7u8 {
        let Some(version) = HashVersion::from_code(code) else {
            continue;
        };
        black_box((version.code(), version.is_unsigned()));
        black_box(HashVersion::effective(code, u32::from(data.len() as u8)));
        for seed in &seeds {
            let _ = black_box(dx_hash(name, version, seed));
            let _ = black_box(dx_hash(data, version, seed));
        }
    }
}

fn xattrs(data: &[u8], k: &Knobs) {
    if let Ok(block) = xattr::parse_block(data) {
        for e in &block.entries {
            black_box((e.index(), e.full_name(), e.verify_hash().is_ok()));
        }
        black_box(xattr::block_hash(&block.entries));
    }
    let _ = black_box(xattr::verify_block_checksum(
        k.seed,
        u64::from(k.number),
        data,
    ));
    if let Ok(entries) = xattr::parse_ibody(data) {
        for e in &entries {
            black_box((e.index(), e.full_name(), e.verify_hash().is_ok()));
        }
        black_box(inline::system_data(&entries));
    }
    let extra = u16::try_from(k.number & 0xFFFF).unwrap_or(0);
    if let Ok(region) = xattr::ibody_region(data, extra) {
        let _ = black_box(xattr::parse_ibody(region));
    }
    black_box(xattr::split_name(data));
    for attr in [data, data.get(8..).unwrap_or(&[])] {
        if let Ok(vfs) = acl::disk_to_vfs(attr) {
            let _ = black_box(acl::vfs_to_disk(&vfs));
        }
        if let Ok(disk) = acl::vfs_to_disk(attr) {
            let _ = black_box(acl::disk_to_vfs(&disk));
        }
    }
}

fn inline_data(data: &[u8], k: &Knobs) {
    let (i_block, system_data) = if data.len() >= 60 {
        data.split_at(60)
    } else {
        (data, &[][..])
    };
    if let Ok(dir) = InlineDir::parse(i_block, system_data) {
        black_box(dir.parent);
        for e in dir.entries().flatten() {
            black_box((e.offset, e.inode, e.rec_len, e.file_type, e.name));
        }
    }
    for item in inline::dirents(data) {
        black_box(item.is_ok());
    }
    let _ = black_box(inline::content(i_block, system_data, u64::from(k.number)));
}

fn journal_blocks(data: &[u8], k: &Knobs) {
    let mut params = vec![];
    if let Ok(jsb) = RawJournalSuperblock::parse(data) {
        black_box((jsb.is_v2(), jsb.incompat(), jsb.encode()));
        let _ = black_box(jsb.verify_checksum());
        if let Ok(p) = jsb.params() {
            params.push(p);
        }
    }
    let incompats = [
        0,
        INCOMPAT_REVOKE,
        INCOMPAT_REVOKE | INCOMPAT_64BIT,
        INCOMPAT_CSUM_V2,
        INCOMPAT_CSUM_V2 | INCOMPAT_64BIT,
        INCOMPAT_CSUM_V3,
        INCOMPAT_CSUM_V3 | INCOMPAT_64BIT,
    ];
    for block_size in [1024usize, 4096] {
        for incompat in incompats {
            params.push(JournalParams {
                block_size,
                incompat,
                csum_seed: k.seed,
            });
        }
    }
    for p in &params {
        let block = padded(data, p.block_size);
        for buf in [data, &block[..]] {
            if let Ok((seq, tags)) = descriptor::tags(buf, p) {
                black_box(seq);
                for t in tags.flatten() {
                    black_box((t.escaped(), t.blocknr, t.flags, t.checksum, t.uuid));
                    let payload = &data[..data.len().min(p.block_size)];
                    let _ = black_box(descriptor::verify_data(p, &t, seq, payload));
                }
                let _ = black_box(descriptor::verify_checksum(buf, p));
            }
            if let Ok((seq, revoked)) = revoke::revoked(buf, p) {
                black_box(seq);
                for b in revoked {
                    black_box(b);
                }
                let _ = black_box(revoke::verify_checksum(buf, p));
            }
            if let Ok(h) = RawCommitHeader::parse(buf) {
                black_box(h.sequence());
                let _ = black_box(commit::verify_checksum(p, buf));
            }
            let _ = black_box(journal::verify_tail(p, buf, "fuzz"));
        }
    }
}

fn mmp_block(data: &[u8], k: &Knobs) {
    if let Ok(m) = RawMmp::parse(data) {
        let _ = black_box(m.validate(k.seed, k.number & 1 != 0));
        black_box((m.state(), m.nodename(), m.bdevname(), m.encode()));
    }
}

fuzz_target!(|data: &[u8]| {
    let k = knobs(data);
    let features = superblock(data, &k);
    group_descs(data, &k, &features);
    inodes(data, &k);
    extents(data, &k);
    dir_entries(data, &k);
    htree_blocks(data, &k);
    hashes(data);
    xattrs(data, &k);
    inline_data(data, &k);
    journal_blocks(data, &k);
    mmp_block(data, &k);
});
