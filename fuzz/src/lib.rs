//! Code shared by the image-level fuzz targets: the bounded walk over
//! every reachable file, a few bounded writes, and the one change made to
//! an input before a writable open (multi-mount protection turned off).

use std::collections::HashSet;
use std::hint::black_box;

use ext4kit_engine::{Attr, Filesystem, Inode, NodeKind, ROOT_INO, RenameFlags, XattrSet};
use ext4kit_format::features::IncompatFeatures;
use ext4kit_format::inode::FileType;
use ext4kit_format::superblock::{RawSuperblock, SUPERBLOCK_OFFSET, SUPERBLOCK_SIZE};

/// Directory entries looked at per walk.
const MAX_ENTRIES: usize = 4096;
/// File bytes read per walk.
const READ_BUDGET: u64 = 4 << 20;
/// Size of one `read_at` request.
const CHUNK: usize = 16 << 10;

/// Walks every file reachable from the root once, asking of each inode
/// what a reader can ask, within fixed budgets (entries visited, bytes
/// read, directories entered once), so that any hang or blow-up found is
/// the engine's, not the harness's.
pub fn walk(fs: &Filesystem) {
    for path in [&b"/"[..], b"/lost+found", b"/a/b/../c", b"/link"] {
        let _ = black_box(fs.resolve(path));
    }
    let mut w = Walk {
        fs,
        seen_dirs: HashSet::new(),
        entries: 0,
        budget: READ_BUDGET,
        buf: vec![0u8; CHUNK],
    };
    w.run();
}

struct Walk<'a> {
    fs: &'a Filesystem,
    seen_dirs: HashSet<u32>,
    entries: usize,
    budget: u64,
    buf: Vec<u8>,
}

impl Walk<'_> {
    fn run(&mut self) {
        let Ok(root) = self.fs.inode(ROOT_INO) else {
            return;
        };
        self.visit(&root);
        let mut stack = vec![root];
        while let Some(dir) = stack.pop() {
            if !self.seen_dirs.insert(dir.ino) {
                continue;
            }
            let Ok(list) = self.fs.read_dir(&dir) else {
                continue;
            };
            for e in list {
                if self.entries >= MAX_ENTRIES {
                    return;
                }
                self.entries += 1;
                black_box((&e.name, e.file_type));
                let _ = black_box(self.fs.lookup(&dir, &e.name));
                if e.name == b"." || e.name == b".." {
                    continue;
                }
                let Ok(inode) = self.fs.inode(e.ino) else {
                    continue;
                };
                self.visit(&inode);
                if inode.is_dir() && !self.seen_dirs.contains(&inode.ino) {
                    stack.push(inode);
                }
            }
        }
    }

    /// Everything one can ask of a single inode.
    fn visit(&mut self, inode: &Inode) {
        let _ = black_box(self.fs.metadata(inode));
        if let Ok(attrs) = self.fs.xattrs(inode) {
            for a in &attrs {
                let _ = black_box(self.fs.xattr(inode, &a.name));
            }
        }
        match inode.file_type() {
            Ok(FileType::Regular) => self.read_file(inode),
            Ok(FileType::Symlink) => {
                let _ = black_box(self.fs.read_link(inode));
            }
            _ => {}
        }
    }

    fn read_file(&mut self, inode: &Inode) {
        let mut offset = 0u64;
        while self.budget > 0 {
            let want = CHUNK.min(usize::try_from(self.budget).unwrap_or(CHUNK));
            match self.fs.read_at(inode, offset, &mut self.buf[..want]) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    self.budget = self.budget.saturating_sub(n as u64);
                    offset += n as u64;
                }
            }
        }
    }
}

/// A handful of writes of every kind a session makes (create, write,
/// mkdir, xattr, rename, truncate, unlink), each a few blocks at most: on
/// a replayed image they allocate from bitmaps and write through a
/// journal that the fuzzer shaped. Errors are expected and ignored; a
/// failed step does not stop the next.
pub fn write_a_little(fs: &Filesystem) {
    let attr = Attr {
        perm: 0o644,
        uid: 0,
        gid: 0,
    };
    if let Ok(f) = fs.create(ROOT_INO, b"fuzz-file", NodeKind::Regular, attr) {
        let data = [0xA5u8; 9000];
        let _ = fs.write(f.ino, 0, &data);
        let _ = fs.write(f.ino, 40_000, b"tail");
        let _ = fs.set_xattr(f.ino, b"user.fuzz", b"value", XattrSet::Any);
        let _ = fs.truncate(f.ino, 3000);
    }
    if let Ok(d) = fs.create(ROOT_INO, b"fuzz-dir", NodeKind::Directory, Attr { perm: 0o755, ..attr }) {
        let _ = fs.create(d.ino, b"inner", NodeKind::Symlink(b"../fuzz-file".to_vec()), attr);
        let _ = fs.rename(ROOT_INO, b"fuzz-file", d.ino, b"moved", RenameFlags::default());
        let _ = fs.unlink(d.ino, b"inner");
    }
    let _ = fs.unlink(ROOT_INO, b"hello.txt");
    let _ = fs.sync();
}

/// `data` as an image with the `mmp` feature cleared (and the superblock
/// checksum set again when it has one). A writable open of an MMP image
/// waits twice the check interval plus a second by design (up to ten
/// minutes on a hostile image; see the engine's `mmp::claim`), which the
/// fuzzer would report as a timeout on every such input.
pub fn without_mmp(data: &[u8]) -> Vec<u8> {
    let mut img = data.to_vec();
    let at = SUPERBLOCK_OFFSET as usize;
    let Some(buf) = img.get(at..at + SUPERBLOCK_SIZE) else {
        return img;
    };
    let Ok(mut sb) = RawSuperblock::parse(buf) else {
        return img;
    };
    let incompat = sb.s_feature_incompat.get();
    if incompat & IncompatFeatures::MMP.0 == 0 {
        return img;
    }
    let had_good_csum = sb.verify_checksum().is_ok();
    sb.s_feature_incompat.set(incompat & !IncompatFeatures::MMP.0);
    if had_good_csum && sb.features().metadata_csum() {
        sb.set_checksum();
    }
    img[at..at + SUPERBLOCK_SIZE].copy_from_slice(&sb.encode());
    img
}
