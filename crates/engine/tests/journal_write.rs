//! The journal writer against the real tools: an image copied right after
//! `sync` (a crash with the log full of committed, unchekpointed
//! transactions) must say `needs_recovery`, show a valid log to `debugfs
//! logdump`, and replay in e2fsck (`-E journal_only`, which repairs
//! nothing else) and in the kernel to a state that `e2fsck -fn` finds clean
//! and that holds every synced file. A clean unmount leaves an empty log.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use common::mkfs;
use ext4kit_engine::device::FileDevice;
use ext4kit_engine::journal::DataMode;
use ext4kit_engine::{Attr, Filesystem, NodeKind, OpenOptions, ROOT_INO};
use ext4kit_testkit::mount::{LoopMount, can_loop_mount};
use ext4kit_testkit::tools::{assert_fsck_clean, debugfs, run};

const ATTR: Attr = Attr {
    perm: 0o644,
    uid: 0,
    gid: 0,
};

/// What the files of the test should hold: path → contents.
type Model = BTreeMap<String, Vec<u8>>;

fn open_rw(img: &Path, opts: OpenOptions) -> Filesystem {
    Filesystem::open(Box::new(FileDevice::open(img, true).unwrap()), opts).unwrap()
}

/// Bytes that tell file `n`, version `v` apart from every other.
fn pattern(n: usize, v: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(7) ^ (n as u8).wrapping_mul(31) ^ v)
        .collect()
}

/// Creates `count` files under `/d` of growing sizes; returns the model.
fn populate(fs: &Filesystem, count: usize, model: &mut Model) {
    let dir = match fs.resolve(b"/d") {
        Ok(d) => d.ino,
        Err(_) => {
            fs.create(ROOT_INO, b"d", NodeKind::Directory, Attr { perm: 0o755, ..ATTR })
                .unwrap()
                .ino
        }
    };
    for n in 0..count {
        let name = format!("f{n}");
        let ino = fs.create(dir, name.as_bytes(), NodeKind::Regular, ATTR).unwrap().ino;
        let data = pattern(n, 1, 1000 + n * 977);
        fs.write(ino, 0, &data).unwrap();
        model.insert(format!("/d/{name}"), data);
    }
}

fn snapshot(img: &Path, name: &str) -> PathBuf {
    let to = img.with_file_name(name);
    std::fs::copy(img, &to).unwrap();
    to
}

fn dumpe2fs(img: &Path) -> String {
    run("dumpe2fs", &[std::ffi::OsStr::new("-h"), img.as_os_str()])
        .unwrap()
        .stdout
}

/// Checks the crash copy `img` wants recovery and shows a valid log.
fn assert_dirty_log(img: &Path) {
    let h = dumpe2fs(img);
    assert!(h.contains("needs_recovery"), "no needs_recovery:\n{h}");
    assert!(!h.contains("Journal start:            0\n"), "empty log:\n{h}");
    let dump = debugfs(img, "logdump").unwrap();
    assert!(dump.contains("Found expected sequence"), "logdump:\n{dump}");
    assert!(dump.contains("commit block"), "no commit block in logdump:\n{dump}");
}

/// Replays `img` with e2fsck (journal only), then requires a clean check
/// and the model's contents.
fn replay_with_e2fsck(img: &Path, model: &Model) {
    let out = run(
        "e2fsck",
        &[
            std::ffi::OsStr::new("-E"),
            "journal_only".as_ref(),
            "-y".as_ref(),
            img.as_os_str(),
        ],
    )
    .unwrap();
    assert!(matches!(out.code, Some(0 | 1)), "e2fsck replay: {}", out.combined());
    assert_fsck_clean(img).unwrap();
    assert!(!dumpe2fs(img).contains("needs_recovery"));
    check_model(img, model);
}

fn check_model(img: &Path, model: &Model) {
    let fs = common::open(img, OpenOptions::default()).unwrap();
    for (path, want) in model {
        let inode = fs.resolve(path.as_bytes()).unwrap_or_else(|e| panic!("{path}: {e}"));
        let got = fs.read_all(&inode, 1 << 24).unwrap();
        assert!(got == *want, "{path}: {} bytes, want {}", got.len(), want.len());
    }
}

/// The kernel replays `img` at mount and sees the model.
fn replay_with_kernel(img: &Path, model: &Model) {
    if can_loop_mount().is_err() {
        ext4kit_testkit::skipped!("kernel replay: loop mounts unavailable");
        return;
    }
    let mnt = LoopMount::rw(img, &[]).expect("kernel mount replays");
    for (path, want) in model {
        let got = std::fs::read(mnt.path().join(&path[1..])).unwrap();
        assert!(got == *want, "{path} via the kernel");
    }
    mnt.unmount().unwrap();
    assert_fsck_clean(img).unwrap();
}

fn crash_and_replay(args: &[&str], size: &str) {
    crash_and_replay_with(args, size, OpenOptions::default());
}

fn crash_and_replay_with(args: &[&str], size: &str, opts: OpenOptions) {
    let dir = tempfile::tempdir().unwrap();
    let Some(img) = mkfs(dir.path(), None, args, size) else {
        return;
    };
    let fs = open_rw(&img, opts);
    let mut model = Model::new();
    populate(&fs, 60, &mut model);
    fs.sync().unwrap();
    let first = snapshot(&img, "first.img");
    let model_first = model.clone();
    let dir_ino = fs.resolve(b"/d").unwrap().ino;
    for n in (0..60).step_by(3) {
        fs.unlink(dir_ino, format!("f{n}").as_bytes()).unwrap();
        model.remove(&format!("/d/f{n}"));
    }
    let f1 = fs.resolve(b"/d/f1").unwrap().ino;
    let data = pattern(1, 2, 50_000);
    fs.write(f1, 0, &data).unwrap();
    model.insert("/d/f1".into(), data);
    fs.sync().unwrap();
    let second = snapshot(&img, "second.img");
    fs.unmount().unwrap();

    let h = dumpe2fs(&img);
    assert!(!h.contains("needs_recovery"), "unmount left needs_recovery:\n{h}");
    assert!(h.contains("Journal start:            0\n"), "unmount left a log:\n{h}");
    assert_fsck_clean(&img).unwrap();
    check_model(&img, &model);

    assert_dirty_log(&first);
    assert_dirty_log(&second);
    let second_kernel = snapshot(&second, "second-kernel.img");
    replay_with_e2fsck(&first, &model_first);
    replay_with_e2fsck(&second, &model);
    replay_with_kernel(&second_kernel, &model);
}

#[test]
fn ext4_4k_csum_v3_replays_in_e2fsck_and_kernel() {
    crash_and_replay(&["-b", "4096"], "64M");
}

#[test]
fn ext4_1k_replays() {
    crash_and_replay(&["-b", "1024"], "32M");
}

#[test]
fn ext4_without_metadata_csum_replays() {
    crash_and_replay(&["-b", "4096", "-O", "^metadata_csum,^64bit"], "64M");
}

#[test]
fn ext3_block_mapped_journal_replays() {
    crash_and_replay(&["-t", "ext3", "-b", "1024"], "32M");
}

/// `data=journal`: file data is logged too, so the log holds far more
/// blocks than the metadata alone, and replay brings the data back.
#[test]
fn data_journal_logs_file_data() {
    let mut opts = OpenOptions::default();
    opts.journal.data = DataMode::Journal;
    crash_and_replay_with(&["-b", "4096", "-J", "size=16"], "64M", opts.clone());
    let dir = tempfile::tempdir().unwrap();
    let Some(img) = mkfs(dir.path(), None, &["-b", "4096", "-J", "size=16"], "64M") else {
        return;
    };
    let fs = open_rw(&img, opts);
    let f = fs.create(ROOT_INO, b"logged", NodeKind::Regular, ATTR).unwrap().ino;
    let data = pattern(3, 3, 1 << 20);
    fs.write(f, 0, &data).unwrap();
    fs.sync().unwrap();
    let copy = snapshot(&img, "dj.img");
    drop(fs);
    let dump = debugfs(&copy, "logdump").unwrap();
    let commit_at: u64 = dump
        .lines()
        .find_map(|l| l.split("(commit block) at block ").nth(1))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("no commit block:\n{dump}"));
    assert!(
        commit_at > 256,
        "1 MiB of data is 256 logged blocks; the commit is at {commit_at}:\n{dump}"
    );
    replay_with_e2fsck(&copy, &Model::from([("/logged".to_string(), data)]));
    assert_fsck_clean(&img).unwrap();
}

#[test]
fn async_commit_journal_replays() {
    let dir = tempfile::tempdir().unwrap();
    let Some(img) = mkfs(dir.path(), None, &["-b", "4096"], "64M") else {
        return;
    };
    let mut opts = OpenOptions::default();
    opts.journal.async_commit = true;
    let fs = open_rw(&img, opts);
    let mut model = Model::new();
    populate(&fs, 20, &mut model);
    fs.sync().unwrap();
    let copy = snapshot(&img, "async.img");
    drop(fs);
    assert!(dumpe2fs(&copy).contains("journal_async_commit"));
    replay_with_e2fsck(&copy, &model);
    assert_fsck_clean(&img).unwrap();
}

/// A journal much smaller than what is written: the log fills, is
/// checkpointed and starts again many times; a copy taken after any sync
/// replays clean.
#[test]
fn small_journal_checkpoints_and_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let Some(img) = mkfs(dir.path(), None, &["-b", "1024", "-J", "size=1"], "64M") else {
        return;
    };
    let fs = open_rw(&img, OpenOptions::default());
    let mut model = Model::new();
    let mut copies = Vec::new();
    for round in 0..6 {
        populate_round(&fs, round, &mut model);
        fs.sync().unwrap();
        if round % 2 == 1 {
            copies.push((snapshot(&img, &format!("round{round}.img")), model.clone()));
        }
    }
    fs.unmount().unwrap();
    assert_fsck_clean(&img).unwrap();
    check_model(&img, &model);
    for (copy, m) in &copies {
        replay_with_e2fsck(copy, m);
    }
}

fn populate_round(fs: &Filesystem, round: usize, model: &mut Model) {
    let name = format!("r{round}");
    let dir = fs
        .create(
            ROOT_INO,
            name.as_bytes(),
            NodeKind::Directory,
            Attr { perm: 0o755, ..ATTR },
        )
        .unwrap();
    for n in 0..150 {
        let ino = fs
            .create(dir.ino, format!("g{n}").as_bytes(), NodeKind::Regular, ATTR)
            .unwrap()
            .ino;
        let data = pattern(n, round as u8, 100 + n);
        fs.write(ino, 0, &data).unwrap();
        model.insert(format!("/{name}/g{n}"), data);
    }
}

/// Directory blocks logged, then freed (the commit revokes them) and, once
/// that is committed, reused by file data: replaying the older transaction
/// must not write the stale directory blocks over the file.
#[test]
fn freed_metadata_is_revoked() {
    let dir = tempfile::tempdir().unwrap();
    let Some(img) = mkfs(dir.path(), None, &["-b", "1024", "-J", "size=4"], "16M") else {
        return;
    };
    let fs = open_rw(&img, OpenOptions::default());
    let big = fs
        .create(ROOT_INO, b"big", NodeKind::Directory, Attr { perm: 0o755, ..ATTR })
        .unwrap()
        .ino;
    for n in 0..1500 {
        fs.create(
            big,
            format!("entry-with-a-long-name-{n:05}").as_bytes(),
            NodeKind::Regular,
            ATTR,
        )
        .unwrap();
    }
    fs.sync().unwrap();
    let before = snapshot(&img, "before.img");
    replay_with_e2fsck(&before, &Model::new());
    let dir_blocks = block_list(&before, "/big");
    assert!(dir_blocks.len() > 50, "{dir_blocks:?}");
    for n in 0..1500 {
        fs.unlink(big, format!("entry-with-a-long-name-{n:05}").as_bytes())
            .unwrap();
    }
    fs.rmdir(ROOT_INO, b"big").unwrap();
    // Freed blocks are reused only once the freeing is committed.
    fs.sync().unwrap();
    let file = fs.create(ROOT_INO, b"data", NodeKind::Regular, ATTR).unwrap().ino;
    let data = pattern(9, 9, 5 << 20);
    fs.write(file, 0, &data).unwrap();
    fs.sync().unwrap();
    let copy = snapshot(&img, "after.img");
    drop(fs);
    assert_fsck_clean(&img).unwrap();
    let dump = debugfs(&copy, "logdump").unwrap();
    assert!(
        dump.contains("(revoke table)"),
        "no revoke record in the log:\n{}",
        dump.lines()
            .filter(|l| !l.contains("FS block"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    let model = Model::from([("/data".to_string(), data)]);
    replay_with_e2fsck(&copy, &model);
    let file_blocks = block_list(&copy, "/data");
    let reused = dir_blocks.iter().filter(|b| file_blocks.contains(b)).count();
    assert!(
        reused > 0,
        "the file did not reuse a directory block; the test proves nothing"
    );
}

/// Physical blocks of `path` as debugfs lists them.
fn block_list(img: &Path, path: &str) -> Vec<u64> {
    debugfs(img, &format!("blocks {path}"))
        .unwrap()
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect()
}

/// A logged block that starts with the jbd2 magic is escaped in the log
/// (its tag says so, its first word is zeroed) and restored by replay.
#[test]
fn blocks_starting_with_the_journal_magic_are_escaped() {
    let dir = tempfile::tempdir().unwrap();
    let Some(img) = mkfs(dir.path(), None, &["-b", "4096"], "64M") else {
        return;
    };
    let mut opts = OpenOptions::default();
    opts.journal.data = DataMode::Journal;
    let fs = open_rw(&img, opts);
    let f = fs.create(ROOT_INO, b"magic", NodeKind::Regular, ATTR).unwrap().ino;
    let mut data = pattern(5, 5, 3 * 4096);
    for block in data.chunks_mut(4096) {
        block[..4].copy_from_slice(&0xC03B_3998u32.to_be_bytes());
    }
    fs.write(f, 0, &data).unwrap();
    fs.sync().unwrap();
    let copy = snapshot(&img, "magic.img");
    drop(fs);
    // logdump -a prints each tag's flags; JBD2_FLAG_ESCAPE is bit 0.
    let dump = debugfs(&copy, "logdump -a").unwrap();
    let escaped = dump
        .split("(flags 0x")
        .skip(1)
        .filter_map(|rest| u32::from_str_radix(rest.split(')').next()?, 16).ok())
        .filter(|f| f & 1 != 0)
        .count();
    assert!(escaped >= 3, "{escaped} escaped tags:\n{dump}");
    replay_with_e2fsck(&copy, &Model::from([("/magic".to_string(), data)]));
}

/// fsync (`sync_inode`) waits for the transaction holding the file's last
/// change: a file already durable costs a flush, not a commit, however
/// much else is waiting; a file changed again commits everything waiting.
#[test]
fn fsync_commits_only_for_the_files_own_changes() {
    let dir = tempfile::tempdir().unwrap();
    let Some(img) = mkfs(dir.path(), None, &[], "32M") else {
        return;
    };
    let fs = open_rw(&img, OpenOptions::default());
    let commits = || fs.journal_stats().expect("the image has a journal").commits;
    let a = fs.create(ROOT_INO, b"a", NodeKind::Regular, ATTR).unwrap().ino;
    fs.write(a, 0, b"a, first").unwrap();
    let before = commits();
    fs.sync_inode(a).unwrap();
    assert_eq!(commits(), before + 1, "a's changes need a commit");

    let b = fs.create(ROOT_INO, b"b", NodeKind::Regular, ATTR).unwrap().ino;
    fs.write(b, 0, b"b, never synced").unwrap();
    fs.sync_inode(a).unwrap();
    assert_eq!(commits(), before + 1, "a is durable already: no commit");

    fs.write(a, 0, b"a, second").unwrap();
    fs.sync_inode(a).unwrap();
    assert_eq!(commits(), before + 2, "a changed again");
    let crash = snapshot(&img, "crash.img");
    drop(fs);
    assert_fsck_clean(&img).unwrap();
    assert_dirty_log(&crash);
    // b's data was held for delayed allocation and never written back: b
    // is empty after the crash, not its length of zeros.
    let model = Model::from([
        ("/a".to_string(), b"a, second".to_vec()),
        ("/b".to_string(), Vec::new()),
    ]);
    replay_with_e2fsck(&crash, &model);
}
