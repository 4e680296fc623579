//! The fuzz input is an image, typically with a journal that needs
//! recovery: open it with the replay every command does by default, on a
//! read-only device (the engine replays into memory and leaves the device
//! alone) and on a writable one (the replay is written to the image), walk
//! what the replay left, and on the writable one write a little through
//! the journal and unmount.
//!
//! Nothing is asserted: a hostile journal is expected to be refused. What
//! must never happen is a panic, a hang or an unbounded allocation.
//!
//! Seeds: `fuzz/make-seed.sh` writes images with dirty journals into
//! `fuzz/corpus/journal_replay`.

#![no_main]

use std::hint::black_box;

use ext4kit_engine::device::MemDevice;
use ext4kit_engine::{DirtyJournal, Filesystem, OpenOptions};
use ext4kit_fuzz::{walk, without_mmp, write_a_little};
use libfuzzer_sys::fuzz_target;

fn options(verify_checksums: bool) -> OpenOptions {
    OpenOptions {
        verify_checksums,
        dirty_journal: DirtyJournal::Replay,
        cache_bytes: 1 << 20,
        writeback_bytes: 4 << 20,
        ..OpenOptions::default()
    }
}

fn replay_read_only(img: &[u8]) {
    let dev = MemDevice::read_only(img.to_vec());
    let Ok(fs) = Filesystem::open(Box::new(dev), options(true)) else {
        return;
    };
    black_box((fs.journal_info(), fs.read_only_reason()));
    walk(&fs);
}

fn replay_writable(img: &[u8]) {
    let dev = MemDevice::new(img.to_vec());
    let Ok(fs) = Filesystem::open(Box::new(dev), options(true)) else {
        return;
    };
    black_box((fs.journal_info(), fs.read_only_reason()));
    walk(&fs);
    write_a_little(&fs);
    let _ = black_box(fs.unmount());
}

fuzz_target!(|data: &[u8]| {
    let img = without_mmp(data);
    replay_read_only(&img);
    replay_writable(&img);
});
