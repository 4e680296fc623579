//! The blocks of a rebuilt directory (pass 3A, [`crate::rehash`]), laid
//! out in memory before anything is written (`directory.rst`, "Linear
//! Directories" and "Hash Tree Directories"):
//!
//! - leaves: `ext4_dir_entry_2` records packed in the order given, each
//!   block closed by stretching its last record to the block's end (less
//!   the 12-byte `ext4_dir_entry_tail` under metadata_csum), a block left
//!   when less than `slack` bytes remain — e2fsck leaves a fifth of every
//!   indexed leaf free so that later inserts do not split at once;
//! - the index: a `dx_root` at block 0 (`.`, `..` spanning the rest, the
//!   8-byte `dx_root_info`, then `dx_countlimit` and the entries), and when
//!   the root cannot point at every leaf, interior `dx_node`s after the
//!   leaves, each leaf or node named by the hash of its first name (bit 0
//!   set when that hash continues the previous block's last one, so a
//!   lookup goes on into the next block).

use ext4kit_format::dir_entry::{
    TAIL_SIZE, encode_entry, encode_hash, rec_len_hashed, rec_len_to_disk, set_block_checksum,
};
use ext4kit_format::hash::HashVersion;
use ext4kit_format::htree::{DxEntry, DxNode, DxParams, DxRoot, max_indirect_levels, node_limit, set_dx_checksum};

/// One name of the directory.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Name {
    /// Major hash (0 when the directory is not indexed).
    pub hash: u32,
    /// Minor hash.
    pub minor: u32,
    /// The name's bytes.
    pub name: Vec<u8>,
    /// The inode it names.
    pub inode: u32,
    /// `file_type` (0 without the filetype feature).
    pub ft: u8,
}

/// How the blocks are shaped.
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    /// Block size.
    pub bs: usize,
    /// metadata_csum: leaves end with a dirent tail, index blocks with a `dx_tail`.
    pub csum: bool,
    /// The directory's checksum seed.
    pub seed: u32,
    /// The filetype feature (`name_len` is one byte, the other is the type).
    pub filetype: bool,
    /// large_dir: three index levels are allowed.
    pub large_dir: bool,
    /// The directory is casefolded and encrypted: every record but `.`
    /// and `..` stores its name's hash after the name.
    pub hashed: bool,
}

impl Shape {
    fn end(&self) -> usize {
        if self.csum { self.bs - TAIL_SIZE } else { self.bs }
    }

    /// The free bytes e2fsck leaves in an indexed leaf: 20 % of the
    /// record space, at least one minimal record.
    pub fn htree_slack(&self) -> usize {
        (self.end() * 20 / 100).max(rec_len_hashed(1, self.hashed))
    }

    /// The record bytes `n` takes: with its stored hash in a hashed
    /// directory, unless it is `.` or `..` (e2fsck's fake entries).
    fn rec_len(&self, n: &Name) -> usize {
        rec_len_hashed(n.name.len(), self.stores_hash(n))
    }

    fn stores_hash(&self, n: &Name) -> bool {
        self.hashed && n.name != b"." && n.name != b".."
    }

    fn params(&self) -> DxParams {
        DxParams {
            block_size: self.bs as u32,
            metadata_csum: self.csum,
            large_dir: self.large_dir,
        }
    }
}

/// Leaf blocks holding `names` in order, and per block the hash that
/// names it in the index.
pub fn leaves(s: &Shape, names: &[Name], slack: usize) -> (Vec<Vec<u8>>, Vec<u32>) {
    let end = s.end();
    let (mut blocks, mut hashes) = (Vec::new(), Vec::new());
    let mut cur: Option<(Vec<u8>, usize, usize)> = None;
    let mut prev = None;
    for n in names {
        let len = s.rec_len(n);
        if cur.as_ref().is_none_or(|&(_, at, _)| at + len > end) {
            if let Some((buf, _, last)) = cur.take() {
                blocks.push(close(s, buf, last));
            }
            cur = Some((vec![0u8; s.bs], 0, 0));
            hashes.push(if prev == Some(n.hash) { n.hash | 1 } else { n.hash });
        }
        let Some((buf, at, last)) = cur.as_mut() else { continue };
        let ft = if s.filetype { n.ft } else { (n.name.len() >> 8) as u8 };
        encode_entry(buf, *at, n.inode, len, ft, &n.name, s.bs);
        if s.stores_hash(n) {
            encode_hash(buf, *at, n.name.len(), (n.hash, n.minor));
        }
        (*last, *at) = (*at, *at + len);
        if end - *at < slack {
            *at = end;
        }
        prev = Some(n.hash);
    }
    if let Some((buf, _, last)) = cur {
        blocks.push(close(s, buf, last));
    }
    (blocks, hashes)
}

/// Stretches the record at `last` to the end of the record space and
/// seals the block.
fn close(s: &Shape, mut buf: Vec<u8>, last: usize) -> Vec<u8> {
    let len = s.end() - last;
    buf[last + 4..last + 6].copy_from_slice(&rec_len_to_disk(len, s.bs).to_le_bytes());
    if s.csum {
        set_block_checksum(&mut buf, s.seed);
    }
    buf
}

/// The index over `hashes.len()` leaves at logical blocks 1..: the root
/// block, and the interior nodes that follow the leaves. `None` when the
/// leaves need more index levels than the file system allows.
pub fn index(
    s: &Shape,
    ino: u32,
    parent: u32,
    version: HashVersion,
    hashes: &[u32],
) -> Option<(Vec<u8>, Vec<Vec<u8>>)> {
    let p = s.params();
    let mut root = DxRoot::new(ino, parent, version, 1, &p);
    let mut level: Vec<DxEntry> = (0..hashes.len())
        .map(|i| DxEntry {
            hash: if i == 0 { 0 } else { hashes[i] },
            block: i as u32 + 1,
        })
        .collect();
    let per_node = usize::from(node_limit(p.block_size, p.metadata_csum)).max(2);
    let mut nodes: Vec<Vec<u8>> = Vec::new();
    let mut levels = 0u8;
    while level.len() > usize::from(root.limit) {
        levels += 1;
        if levels > max_indirect_levels(s.large_dir) {
            return None;
        }
        let mut up = Vec::new();
        for chunk in level.chunks(per_node) {
            let block = (1 + hashes.len() + nodes.len()) as u32;
            up.push(DxEntry {
                hash: chunk[0].hash,
                block,
            });
            let mut buf = DxNode::new(chunk.to_vec(), &p).to_block(p.block_size).ok()?;
            seal_dx(s, &mut buf);
            nodes.push(buf);
        }
        level = up;
    }
    root.entries = level;
    root.header.info.indirect_levels = levels;
    let mut buf = root.to_block(p.block_size).ok()?;
    if !s.filetype {
        buf[7] = 0;
        buf[19] = 0;
    }
    seal_dx(s, &mut buf);
    Some((buf, nodes))
}

fn seal_dx(s: &Shape, buf: &mut [u8]) {
    if s.csum {
        let _ = set_dx_checksum(buf, s.bs as u32, s.seed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ext4kit_format::htree::root_limit;

    fn shape(bs: usize, csum: bool) -> Shape {
        Shape {
            bs,
            csum,
            seed: 7,
            filetype: true,
            large_dir: false,
            hashed: false,
        }
    }

    fn names(n: u32) -> Vec<Name> {
        (0..n)
            .map(|i| Name {
                hash: i * 1000,
                minor: 0,
                name: format!("file-{i:06}").into_bytes(),
                inode: 100 + i,
                ft: 1,
            })
            .collect()
    }

    #[test]
    fn leaves_fill_to_the_slack_and_end_on_the_tail() {
        let s = shape(1024, true);
        let (blocks, hashes) = leaves(&s, &names(200), s.htree_slack());
        assert_eq!(blocks.len(), hashes.len());
        // 20-byte records; 1012 bytes of records, stop below 202 free.
        let per = (1012 - 202) / 20 + 1;
        assert_eq!(blocks.len(), 200usize.div_ceil(per));
        for b in &blocks {
            ext4kit_format::dir_entry::verify_block_checksum(b, 7).unwrap();
        }
        assert_eq!(hashes[1], per as u32 * 1000);
    }

    #[test]
    fn a_hash_continuing_into_the_next_leaf_is_marked() {
        let s = shape(1024, false);
        let mut v = names(120);
        v.iter_mut().for_each(|n| n.hash = 4242);
        let (_, hashes) = leaves(&s, &v, 12);
        assert!(hashes.len() > 1);
        assert_eq!(hashes[1], 4243);
    }

    #[test]
    fn hashed_records_carry_their_hash_and_dots_do_not() {
        let s = Shape {
            hashed: true,
            ..shape(1024, true)
        };
        let mut v = names(3);
        v.insert(
            0,
            Name {
                name: b"..".to_vec(),
                ..v[0].clone()
            },
        );
        v.insert(
            0,
            Name {
                name: b".".to_vec(),
                ..v[0].clone()
            },
        );
        let (blocks, _) = leaves(&s, &v, 12);
        let b = &blocks[0];
        let es: Vec<_> = ext4kit_format::dir_entry::DirEntryIter::new(&b[..1012], 1024, true)
            .map(Result::unwrap)
            .collect();
        assert_eq!(
            es.iter().map(|e| e.rec_len).take(4).collect::<Vec<_>>(),
            [12, 12, 28, 28]
        );
        for (e, n) in es[2..].iter().zip(&v[2..]) {
            let h = ext4kit_format::dir_entry::stored_hash(b, e);
            assert_eq!(h, Some((n.hash, n.minor)), "{:?}", n.name);
        }
    }

    #[test]
    fn many_leaves_take_a_second_level() {
        let s = shape(1024, true);
        let n = usize::from(root_limit(1024, true)) + 5;
        let hashes: Vec<u32> = (0..n as u32).map(|i| i * 64).collect();
        let (root, nodes) = index(&s, 12, 2, HashVersion::HalfMd4, &hashes).unwrap();
        assert_eq!(nodes.len(), 2);
        let p = s.params();
        let r = DxRoot::parse(&root, &p).unwrap();
        assert_eq!(r.indirect_levels(), 1);
        assert_eq!(r.entries[1].block as usize, n + 2);
        let node = DxNode::parse(&nodes[1], &p).unwrap();
        assert_eq!(node.entries[0].block as usize, usize::from(node.limit) + 1);
    }

    #[test]
    fn too_many_leaves_without_large_dir_have_no_index() {
        let s = shape(1024, false);
        let n = usize::from(root_limit(1024, false)) * usize::from(node_limit(1024, false)) + 1;
        let hashes: Vec<u32> = (0..n as u32).collect();
        assert!(index(&s, 12, 2, HashVersion::Tea, &hashes).is_none());
    }
}
