//! The fuzz input is a whole image: open it from memory, reading a dirty
//! journal's file system as it is (no replay; `journal_replay` fuzzes the
//! replay), and walk every reachable file, twice (without and with
//! checksum verification).
//!
//! Nothing is asserted: errors are expected on damaged images. What must
//! never happen is a panic, a hang or an unbounded allocation. The walk
//! itself is bounded (see `ext4kit_fuzz::walk`).
//!
//! Seeds: `fuzz/make-seed.sh` writes small mkfs images into
//! `fuzz/corpus/open_and_walk`.

#![no_main]

use std::hint::black_box;

use ext4kit_engine::device::MemDevice;
use ext4kit_engine::{DirtyJournal, Filesystem, OpenOptions};
use ext4kit_fuzz::{walk, without_mmp};
use libfuzzer_sys::fuzz_target;

fn open_and_walk(img: &[u8], verify_checksums: bool) {
    let opts = OpenOptions {
        verify_checksums,
        dirty_journal: DirtyJournal::ReadStale,
        cache_bytes: 1 << 20,
        ..OpenOptions::default()
    };
    let Ok(fs) = Filesystem::open(Box::new(MemDevice::new(img.to_vec())), opts) else {
        return;
    };
    black_box((fs.geometry(), fs.group_descs().len(), fs.journal_info()));
    black_box(fs.read_only_reason());
    walk(&fs);
}

fuzz_target!(|data: &[u8]| {
    let img = without_mmp(data);
    open_and_walk(&img, false);
    open_and_walk(&img, true);
});
