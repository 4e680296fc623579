//! Directory names replaced by stand-ins (`e2image -s`), so an image can
//! be shared without the names it holds.
//!
//! e2image overwrites every entry's name with letters in each block marked
//! as directory data, htree index blocks included, and leaves checksums
//! and hashes stale, so `e2fsck` finds its output damaged. Here the
//! output stays consistent: index blocks (the root and interior nodes) are
//! left alone, each stand-in is unique in its directory, has the name's
//! length and, in an indexed directory, a hash inside the range the index
//! gives its leaf; the slack after each name is zeroed (old names linger
//! there) and the leaf's checksum tail recomputed. "." and "..", and
//! `lost+found` in the root (`e2fsck` looks it up by name) are kept, as
//! are names for which no stand-in fits (counted in the statistics).

use std::collections::{HashMap, HashSet};

use ext4kit_format::checksum::crc32c_raw;
use ext4kit_format::dir_entry::{self, rec_len_from_disk};
use ext4kit_format::hash::{HashVersion, dx_hash, seed_from_bytes};
use ext4kit_format::htree::{DxNode, DxParams, DxRoot};

use super::DirBlocks;
use crate::fs::Filesystem;
use crate::inode::ROOT_INO;

/// Stand-ins tried for one name before the name is kept.
const MAX_TRIES: u64 = 1 << 16;

/// One directory's scrambling state.
struct Dir {
    ino: u32,
    /// Per-inode checksum seed of its leaf blocks.
    seed: u32,
    /// True when indexed; `hash` is then its version, `None` when the
    /// index is damaged.
    htree: bool,
    hash: Option<HashVersion>,
    /// Leaf logical block → its `[lo, hi)` hash range; index blocks absent.
    leaves: HashMap<u64, (u32, u32)>,
    /// `(lo, leaf)` sorted by `lo`, to find the leaf of a hash.
    by_hash: Vec<(u32, u64)>,
    /// Logical blocks of the index (never rewritten).
    index: HashSet<u64>,
    /// Next stand-in number per name length, and candidates found for
    /// other leaves meanwhile, by (length, leaf).
    next: HashMap<usize, u64>,
    /// Names handed out or kept, so no two entries share one.
    used: HashSet<Vec<u8>>,
    spare: HashMap<(usize, u64), Vec<Vec<u8>>>,
}

/// Scrambles the leaf blocks of the directories of an image.
pub(super) struct Scrambler {
    dirs: Vec<Dir>,
    /// Physical block → (directory, logical block).
    at: HashMap<u64, (usize, u64)>,
    seed: [u32; 4],
    csum: bool,
    pub(super) scrambled: u64,
    pub(super) kept: u64,
}

impl Scrambler {
    pub(super) fn new(fs: &Filesystem, dirs: &[DirBlocks]) -> Self {
        let sb = fs.superblock();
        let mut seed_bytes = [0u8; 16];
        for (c, w) in seed_bytes.chunks_exact_mut(4).zip(sb.s_hash_seed.iter()) {
            c.copy_from_slice(&w.get().to_le_bytes());
        }
        let csum = fs.geo.features.metadata_csum();
        let mut s = Self {
            dirs: Vec::new(),
            at: HashMap::new(),
            seed: seed_from_bytes(&seed_bytes),
            csum,
            scrambled: 0,
            kept: 0,
        };
        for d in dirs {
            let i = s.dirs.len();
            s.at.extend(d.blocks.iter().map(|&(l, p)| (p, (i, l))));
            let c = crc32c_raw(fs.csum_seed, &d.ino.to_le_bytes());
            let mut dir = Dir {
                ino: d.ino,
                seed: crc32c_raw(c, &d.generation.to_le_bytes()),
                htree: d.htree,
                hash: None,
                leaves: HashMap::new(),
                by_hash: Vec::new(),
                index: HashSet::new(),
                next: HashMap::new(),
                used: HashSet::new(),
                spare: HashMap::new(),
            };
            if d.htree {
                read_index(fs, d, sb.s_flags.get(), &mut dir);
                dir.by_hash = dir.leaves.iter().map(|(&l, r)| (r.0, l)).collect();
                dir.by_hash.sort_unstable();
            }
            s.dirs.push(dir);
        }
        s
    }

    /// Scrambles `buf` if it is a leaf block of a listed directory.
    pub(super) fn block(&mut self, block: u64, buf: &mut [u8]) {
        let Some(&(d, logical)) = self.at.get(&block) else {
            return;
        };
        if self.dirs[d].index.contains(&logical) {
            return;
        }
        let bs = buf.len();
        let tail = self.csum && dir_entry::has_tail(buf);
        let end = if tail { bs - dir_entry::TAIL_SIZE } else { bs };
        let mut pos = 0;
        while pos + 8 <= end {
            let rec = rec_len_from_disk(u16::from_le_bytes([buf[pos + 4], buf[pos + 5]]), bs);
            let name_len = usize::from(buf[pos + 6]);
            if rec < 8 || !rec.is_multiple_of(4) || pos + rec > end || name_len + 8 > rec {
                break;
            }
            buf[pos + 8 + name_len..pos + rec].fill(0);
            let ino = u32::from_le_bytes([buf[pos], buf[pos + 1], buf[pos + 2], buf[pos + 3]]);
            let name = &mut buf[pos + 8..pos + 8 + name_len];
            let keep = name == b"." || name == b".." || (self.dirs[d].ino == ROOT_INO && name == b"lost+found");
            if !keep && name_len > 0 {
                if ino == 0 {
                    name.fill(b'A');
                } else if let Some(n) = self.stand_in(d, logical, name_len) {
                    name.copy_from_slice(&n);
                    self.scrambled += 1;
                } else {
                    self.dirs[d].used.insert(name.to_vec());
                    self.kept += 1;
                }
            } else if keep && ino != 0 && name_len > 2 {
                self.dirs[d].used.insert(name.to_vec());
                self.kept += 1;
            }
            pos += rec;
        }
        if tail {
            dir_entry::set_block_checksum(buf, self.dirs[d].seed);
        }
    }

    /// A fresh name of `len` bytes for leaf `logical` of directory `d`.
    fn stand_in(&mut self, d: usize, logical: u64, len: usize) -> Option<Vec<u8>> {
        let seed = self.seed;
        let dir = &mut self.dirs[d];
        let range = match dir.hash {
            None if dir.htree => return None,
            None => None,
            Some(v) => Some((v, *dir.leaves.get(&logical)?)),
        };
        while let Some(n) = dir.spare.get_mut(&(len, logical)).and_then(Vec::pop) {
            if dir.used.insert(n.clone()) {
                return Some(n);
            }
        }
        for _ in 0..MAX_TRIES {
            let id = dir.next.entry(len).or_insert(0);
            let n = name_for(*id, len)?;
            *id += 1;
            if dir.used.contains(&n) {
                continue;
            }
            let Some((version, (lo, hi))) = range else {
                dir.used.insert(n.clone());
                return Some(n);
            };
            let h = dx_hash(&n, version, &seed).ok()?.major;
            if (lo..hi).contains(&h) {
                dir.used.insert(n.clone());
                return Some(n);
            }
            let i = dir.by_hash.partition_point(|x| x.0 <= h);
            if let Some(&(_, leaf)) = i.checked_sub(1).and_then(|i| dir.by_hash.get(i)) {
                let spare = dir.spare.entry((len, leaf)).or_default();
                if spare.len() < 64 {
                    spare.push(n);
                }
            }
        }
        None
    }
}

/// Stand-in number `id` as a name of `len` bytes: base-62 digits over
/// letters and digits, padded with `A`, while they last; then base-253
/// over every byte a name may hold (not NUL, `/` or `.`), which only
/// one- and two-byte names in large directories reach. `None` when `id`
/// is past both.
fn name_for(id: u64, len: usize) -> Option<Vec<u8>> {
    const FIRST: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    static ALL: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    let all = ALL.get_or_init(|| {
        let rest = (1u8..=255).filter(|b| !FIRST.contains(b) && *b != b'/' && *b != b'.');
        FIRST.iter().copied().chain(rest).collect()
    });
    let small = u32::try_from(len)
        .ok()
        .and_then(|l| 62u64.checked_pow(l))
        .unwrap_or(u64::MAX);
    let (mut id, alphabet) = if id < small {
        (id, FIRST)
    } else {
        (id - small, all.as_slice())
    };
    let base = alphabet.len() as u64;
    let mut out = vec![b'A'; len];
    for c in &mut out {
        if id == 0 {
            break;
        }
        *c = alphabet[(id % base) as usize];
        id /= base;
    }
    (id == 0).then_some(out)
}

/// Reads an indexed directory's root and interior nodes into `dir`: the
/// hash range of each leaf, narrowed level by level. A damaged index
/// leaves the directory without ranges, so its names are kept.
fn read_index(fs: &Filesystem, d: &DirBlocks, s_flags: u32, dir: &mut Dir) {
    let phys: HashMap<u64, u64> = d.blocks.iter().copied().collect();
    let params = DxParams {
        block_size: fs.geo.block_size,
        metadata_csum: fs.geo.features.metadata_csum(),
        large_dir: fs
            .geo
            .features
            .incompat
            .contains(ext4kit_format::features::IncompatFeatures::LARGEDIR),
    };
    let mut buf = vec![0u8; fs.block_size()];
    let read = |logical: u64, buf: &mut [u8]| -> bool {
        phys.get(&logical)
            .is_some_and(|&p| fs.read_bytes(p << fs.geo.block_size_log2, buf).is_ok())
    };
    if !read(0, &mut buf) {
        return;
    }
    let Ok(root) = DxRoot::parse(&buf, &params) else {
        return;
    };
    let Some(version) = HashVersion::effective(root.header.info.hash_version, s_flags) else {
        return;
    };
    dir.index.insert(0);
    // (logical block, lo, hi, levels below it)
    let mut todo = ranges(&root.entries, 0, u32::MAX, root.indirect_levels());
    while let Some((logical, lo, hi, levels)) = todo.pop() {
        if levels == 0 {
            dir.leaves.insert(logical, (lo, hi));
            continue;
        }
        if dir.index.contains(&logical) || !read(logical, &mut buf) {
            return;
        }
        let Ok(node) = DxNode::parse(&buf, &params) else {
            return;
        };
        dir.index.insert(logical);
        todo.extend(ranges(&node.entries, lo, hi, levels - 1));
    }
    dir.hash = Some(version);
}

/// Each entry's child with the hash range it covers inside `[lo, hi)`.
fn ranges(entries: &[ext4kit_format::htree::DxEntry], lo: u32, hi: u32, levels: u8) -> Vec<(u64, u32, u32, u8)> {
    (0..entries.len())
        .map(|i| {
            let start = if i == 0 { lo } else { (entries[i].hash & !1).max(lo) };
            let end = entries.get(i + 1).map_or(hi, |e| (e.hash & !1).min(hi));
            (u64::from(entries[i].block), start, end, levels)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stand_ins_are_unique_legal_and_run_out_only_past_every_byte() {
        assert_eq!(name_for(0, 3).unwrap(), b"AAA");
        assert_eq!(name_for(1, 3).unwrap(), b"BAA");
        let ones: Vec<Vec<u8>> = (0..62 + 253).map_while(|i| name_for(i, 1)).collect();
        let distinct: HashSet<&Vec<u8>> = ones.iter().collect();
        assert_eq!(ones.len(), 62 + 253);
        // Base-253 names restart at the letters: 62 of them repeat, which
        // the per-directory `used` set skips; 253 distinct bytes in all.
        assert_eq!(distinct.len(), 253);
        assert!(ones.iter().all(|n| n[0] != 0 && n[0] != b'/' && n[0] != b'.'));
        assert!(name_for(62 + 253, 1).is_none());
        assert!((0..5000).all(|i| name_for(i, 4).unwrap().iter().all(u8::is_ascii_alphanumeric)));
    }

    #[test]
    fn leaf_ranges_nest_inside_the_parent_range() {
        let e = |hash, block| ext4kit_format::htree::DxEntry { hash, block };
        let r = ranges(
            &[e(0, 1), e(0x1000_0001, 2), e(0x8000_0000, 3)],
            0x0800_0000,
            0x9000_0000,
            0,
        );
        assert_eq!(r[0], (1, 0x0800_0000, 0x1000_0000, 0));
        assert_eq!(r[1], (2, 0x1000_0000, 0x8000_0000, 0));
        assert_eq!(r[2], (3, 0x8000_0000, 0x9000_0000, 0));
    }
}
