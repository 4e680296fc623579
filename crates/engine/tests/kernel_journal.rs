//! A journal the kernel left dirty: the image is copied while still mounted
//! read-write (after `sync`, so the log holds committed transactions that
//! were never checkpointed). Asked to refuse, the engine must report it
//! rather than read stale metadata, read it on request, and open the image
//! cleanly once e2fsck has replayed the journal. (Replay by the engine
//! itself, the default, is tested in `journal_recovery.rs`.)

mod common;

use std::process::Command;

use common::{mkfs, open, run};
use ext4kit_engine::{DirtyJournal, Error, OpenOptions};
use ext4kit_testkit::mount::{LoopMount, can_loop_mount};
use ext4kit_testkit::tools::skip_unless;

#[test]
fn kernel_dirty_journal_is_reported_then_replayed_by_e2fsck() {
    if skip_unless(can_loop_mount()).is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let Some(img) = mkfs(dir.path(), None, &["-b", "4096"], "64M") else {
        return;
    };
    let copy = dir.path().join("dirty.img");
    {
        let mnt = LoopMount::rw(&img, &[]).expect("mount rw");
        for i in 0..50 {
            std::fs::write(mnt.path().join(format!("file{i}")), vec![i as u8; 3000]).unwrap();
        }
        std::fs::create_dir(mnt.path().join("dir")).unwrap();
        run("sync", &[]);
        std::fs::copy(&img, &copy).unwrap();
        mnt.unmount().expect("unmount");
    }
    let refuse = OpenOptions {
        dirty_journal: DirtyJournal::Refuse,
        ..OpenOptions::default()
    };
    match open(&copy, refuse) {
        Err(Error::NeedsRecovery) => {}
        other => panic!("expected NeedsRecovery, got {other:?}"),
    }
    let stale = open(
        &copy,
        OpenOptions {
            dirty_journal: DirtyJournal::ReadStale,
            ..OpenOptions::default()
        },
    )
    .unwrap();
    let info = stale.journal_info();
    assert!(info.needs_recovery);
    let jsb = info.superblock.as_ref().expect("journal superblock read");
    assert_ne!(jsb.start, 0, "the kernel's log should start somewhere");
    assert_ne!(jsb.incompat & 0x10, 0, "this kernel writes csum v3 journals");
    drop(stale);
    let out = Command::new("e2fsck").args(["-fy"]).arg(&copy).output().unwrap();
    assert!(
        out.status.code().is_some_and(|c| c <= 1),
        "e2fsck replay: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    let refuse = OpenOptions {
        dirty_journal: DirtyJournal::Refuse,
        ..OpenOptions::default()
    };
    let fs = open(&copy, refuse).expect("clean after replay");
    assert!(!fs.journal_info().needs_recovery);
    let root = fs.resolve(b"/").unwrap();
    let names = fs.read_dir(&root).unwrap();
    assert_eq!(names.iter().filter(|e| e.name.starts_with(b"file")).count(), 50);
    let f = fs.resolve(b"/file7").unwrap();
    let mut buf = vec![0u8; 3000];
    assert_eq!(fs.read_at(&f, 0, &mut buf).unwrap(), 3000);
    assert!(buf.iter().all(|&b| b == 7));
}
