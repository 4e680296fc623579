//! The fuzz input is an image: check it (`fsck -fn`), repair a writable
//! copy as `fsck -fy` does (journal replay, runs until nothing is left to
//! repair, commit), then check the result again.
//!
//! Nothing about the findings is asserted: the checker is expected to find
//! anything at all on a fuzzed image. What must never happen is a panic, a
//! hang or an unbounded allocation. With `EXT4KIT_FUZZ_RECHECK=1` in the
//! environment, one promise of the repair is asserted too: when its
//! verdict says nothing is left, the check of the written image finds no
//! error either.
//!
//! Seeds: `fuzz/make-seed.sh` writes e2fsprogs' damaged test images and
//! images with dirty journals into `fuzz/corpus/fsck`.

#![no_main]

use std::hint::black_box;
use std::sync::{Arc, OnceLock};

use ext4kit_engine::BlockDevice;
use ext4kit_engine::device::MemDevice;
use ext4kit_fsck::{Mode, Options, check, repair};
use ext4kit_fuzz::without_mmp;
use libfuzzer_sys::fuzz_target;

/// A fixed "now", so that the check interval and the times a repair
/// writes do not depend on the clock.
const NOW: u64 = 1_700_000_000;

fn recheck_asserted() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var_os("EXT4KIT_FUZZ_RECHECK").is_some_and(|v| v == "1"))
}

fn opts(mode: Mode) -> Options<'static> {
    Options {
        force: true,
        now: NOW,
        mode,
        ..Options::default()
    }
}

fuzz_target!(|data: &[u8]| {
    let img = without_mmp(data);
    let ro = MemDevice::read_only(img.clone());
    let _ = black_box(check(&ro, &opts(Mode::Check), &mut |_| {}));
    drop(ro);

    let mem = Arc::new(MemDevice::new(img));
    let dev: Arc<dyn BlockDevice> = mem.clone();
    let Ok(outcome) = repair::repair(&dev, &opts(Mode::Yes), &mut |_| {}) else {
        return;
    };
    let claimed_clean = outcome.verdict.unfixed_errors() == 0 && !outcome.verdict.halted;
    black_box(outcome.exit_code());
    let after = MemDevice::read_only(mem.snapshot());
    let recheck = check(&after, &opts(Mode::Check), &mut |_| {});
    if recheck_asserted() && claimed_clean {
        match &recheck {
            Ok(rep) => assert_eq!(rep.errors(), 0, "repair said clean, recheck found: {:?}", rep.findings),
            Err(e) => panic!("repair said clean, recheck failed: {e}"),
        }
    }
});
