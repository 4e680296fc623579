//! The fuzz input is a whole image: open it from memory and walk every
//! reachable file, twice (without and with checksum verification).
//!
//! Nothing is asserted: errors are expected on damaged images. What must
//! never happen is a panic, a hang or an unbounded allocation. The walk
//! itself is bounded (entries visited, bytes read, directories entered once)
//! so that any hang or blow-up found is the engine's, not this harness's.
//!
//! Seeds: `fuzz/make-seed.sh` writes small mkfs images into
//! `fuzz/corpus/open_and_walk`.

#![no_main]

use std::collections::HashSet;
use std::hint::black_box;

use ext4kit_engine::device::MemDevice;
use ext4kit_engine::{DirtyJournal, Filesystem, Inode, OpenOptions, ROOT_INO};
use ext4kit_format::inode::FileType;
use libfuzzer_sys::fuzz_target;

/// Directory entries looked at per walk.
const MAX_ENTRIES: usize = 4096;
/// File bytes read per walk.
const READ_BUDGET: u64 = 4 << 20;
/// Size of one `read_at` request.
const CHUNK: usize = 16 << 10;

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

fn open_and_walk(data: &[u8], verify_checksums: bool) {
    let opts = OpenOptions {
        verify_checksums,
        dirty_journal: DirtyJournal::ReadStale,
        cache_bytes: 1 << 20,
        ..OpenOptions::default()
    };
    let Ok(fs) = Filesystem::open(Box::new(MemDevice::new(data.to_vec())), opts) else {
        return;
    };
    black_box((fs.geometry(), fs.group_descs().len(), fs.journal_info()));
    black_box(fs.read_only_reason());
    for path in [&b"/"[..], b"/lost+found", b"/a/b/../c", b"/link"] {
        let _ = black_box(fs.resolve(path));
    }
    let mut walk = Walk {
        fs: &fs,
        seen_dirs: HashSet::new(),
        entries: 0,
        budget: READ_BUDGET,
        buf: vec![0u8; CHUNK],
    };
    walk.run();
}

fuzz_target!(|data: &[u8]| {
    open_and_walk(data, false);
    open_and_walk(data, true);
});
