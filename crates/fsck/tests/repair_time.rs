//! The times a repair writes come from `Options::now`, never the system
//! clock, so a repair (and its undo file) is reproducible.

mod support;

use support::*;

use std::process::Command;
use std::sync::Arc;

use ext4kit_engine::device::MemDevice;
use ext4kit_engine::{BlockDevice, NodeKind, ROOT_INO};
use ext4kit_fsck::repair::repair;
use ext4kit_fsck::{Mode, Options};

/// 2005-03-18, far from any clock a test runs under.
const NOW: u64 = 1_111_111_111;

fn repair_at(bytes: &[u8], now: u64) -> Vec<u8> {
    let mem = Arc::new(MemDevice::new(bytes.to_vec()));
    let dev: Arc<dyn BlockDevice> = mem.clone();
    let opts = Options {
        force: true,
        mode: Mode::Yes,
        now,
        ..Options::default()
    };
    let out = repair(&dev, &opts, &mut |_| {}).expect("repair runs");
    assert_eq!(out.verdict.unfixed_errors(), 0, "left: {:?}", out.verdict.findings);
    mem.snapshot()
}

#[test]
fn a_lost_found_the_repair_makes_is_stamped_with_options_now() {
    let (dev, fs) = engine_fs(8 << 20, 12, |_| {});
    let file = fs.create(ROOT_INO, b"file", NodeKind::Regular, ATTR).unwrap().ino;
    fs.write(file, 0, b"not empty, so pass 4 reconnects it").unwrap();
    fs.rmdir(ROOT_INO, b"lost+found").unwrap();
    fs.unmount().expect("unmount");
    let f = temp_image(&dev.snapshot());
    let out = Command::new("debugfs")
        .args(["-w", "-R", "unlink /file"])
        .arg(f.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let fixed = repair_at(&std::fs::read(f.path()).unwrap(), NOW);
    e2fsck_clean(&fixed);
    let g = temp_image(&fixed);
    let out = Command::new("debugfs")
        .args(["-R", "stat /lost+found"])
        .arg(g.path())
        .output()
        .unwrap();
    let stat = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    for field in ["ctime", "atime", "mtime"] {
        assert!(stat.contains(&format!("{field}: 0x{NOW:08x}")), "{stat}");
    }
}
