//! Fast commits the kernel wrote, replayed at open: an image made with
//! `mkfs.ext4 -O fast_commit` is loop-mounted, files are created, written,
//! appended, linked, unlinked and truncated with an `fsync` after each,
//! and the backing file is copied while still mounted, so the copy holds
//! the last full commit plus fast commits (`commit=600` keeps the timer's
//! full commit away). The engine's replay must give the tree, inode
//! numbers and link counts the kernel's own replay of another copy gives,
//! and an image `e2fsck -fn` finds clean.

mod common;

use std::fs::{self, OpenOptions as StdOpen};
use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use ext4kit_testkit::compare::{CompareOptions, compare_trees, format_differences};
use ext4kit_testkit::mount::{LoopMount, can_loop_mount};
use ext4kit_testkit::tools::{assert_fsck_clean, debugfs, run_ok};

fn write_sync(path: &Path, data: &[u8], append: bool) {
    let mut f = StdOpen::new()
        .create(true)
        .append(append)
        .write(true)
        .truncate(!append)
        .open(path)
        .unwrap();
    f.write_all(data).unwrap();
    f.sync_all().unwrap();
}

/// Pseudo-random bytes (no clock, no RNG crate): the content only has to
/// differ from block to block.
fn bytes(n: usize, seed: u32) -> Vec<u8> {
    let mut x = seed | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect()
}

/// The kernel's work: a base tree made durable by a full commit, then
/// fast-committed changes; returns the image copied while mounted.
fn kernel_image(dir: &Path) -> std::path::PathBuf {
    let img = common::mkfs(dir, None, &["-O", "fast_commit", "-b", "4096"], "64M").unwrap();
    let m = LoopMount::rw(&img, &["commit=600"]).unwrap();
    let d = m.path().join("d");
    fs::create_dir(&d).unwrap();
    write_sync(&d.join("keep"), b"base\n", false);
    write_sync(&d.join("gone"), b"gone\n", false);
    write_sync(&d.join("trunc"), &bytes(50_000, 7), false);
    write_sync(&d.join("old"), b"x\n", false);
    run_ok("sync", &["-f", d.to_str().unwrap()]).unwrap();
    write_sync(&d.join("new"), b"hello fast commit\n", false);
    write_sync(&d.join("big"), &bytes(70_000, 9), false);
    write_sync(&d.join("keep"), b"appended\n", true);
    fs::remove_file(d.join("gone")).unwrap();
    fs::hard_link(d.join("new"), d.join("new2")).unwrap();
    let f = StdOpen::new().write(true).open(d.join("trunc")).unwrap();
    f.set_len(5000).unwrap();
    f.sync_all().unwrap();
    drop(f);
    write_sync(&d.join("new"), b"more\n", true);
    let crashed = dir.join("crashed.img");
    fs::copy(&img, &crashed).unwrap();
    m.unmount().unwrap();
    crashed
}

/// Name → (inode, links, size, mtime) under `d`. The files' times come
/// from the replayed inode records; the directory's are the replay's own
/// (the kernel's link and unlink stamp it), so trees compare without times.
fn entries(root: &Path) -> Vec<(String, u64, u64, u64, i64)> {
    let mut v: Vec<_> = fs::read_dir(root.join("d"))
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            let m = e.metadata().unwrap();
            let name = e.file_name().to_string_lossy().into_owned();
            (
                name,
                m.ino(),
                m.nlink(),
                m.size(),
                m.mtime_nsec() + m.mtime() * 1_000_000_000,
            )
        })
        .collect();
    v.sort();
    v
}

fn same_trees(expected: &Path, actual: &Path, what: &str) {
    let opts = CompareOptions {
        ignore_lost_found: true,
        mtime: false,
        ..CompareOptions::default()
    };
    let diffs = compare_trees(expected, actual, opts);
    assert!(diffs.is_empty(), "{what}:\n{}", format_differences(&diffs));
}

#[test]
fn kernel_fast_commits_replay_as_the_kernel_replays_them() {
    if let Err(why) = can_loop_mount() {
        ext4kit_testkit::skipped!("fast-commit replay against the kernel: {why}");
        assert!(std::env::var_os("CI").is_none(), "CI must run the kernel tests");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let crashed = kernel_image(dir.path());
    let (ours, kernels, e2fsck) = (
        dir.path().join("ours.img"),
        dir.path().join("k.img"),
        dir.path().join("e.img"),
    );
    for to in [&ours, &kernels, &e2fsck] {
        fs::copy(&crashed, to).unwrap();
    }

    let fs = common::open_rw(&ours);
    let r = fs
        .journal_info()
        .recovered
        .clone()
        .expect("the journal needed recovery");
    assert!(r.fast_commits >= 5, "the kernel's fsyncs left fast commits: {r:?}");
    assert!(r.fast_commit_records > 0, "{r:?}");
    fs.unmount().unwrap();
    assert_fsck_clean(&ours).unwrap();

    let theirs = LoopMount::rw(&kernels, &[]).unwrap();
    let mine = LoopMount::ro(&ours).unwrap();
    same_trees(theirs.path(), mine.path(), "kernel replay vs engine replay");
    assert_eq!(
        entries(theirs.path()),
        entries(mine.path()),
        "names, inodes, links, sizes"
    );
    let content = fs::read(mine.path().join("d/new")).unwrap();
    assert_eq!(content, b"hello fast commit\nmore\n");
    mine.unmount().unwrap();
    theirs.unmount().unwrap();

    // e2fsck replays too; its replay leaves the unlinked inode for pass 4
    // (lost+found), the rest of the tree is the same.
    let _ = run_ok("e2fsck", &["-fy", e2fsck.to_str().unwrap()]);
    let theirs = LoopMount::ro(&e2fsck).unwrap();
    let mine = LoopMount::ro(&ours).unwrap();
    same_trees(theirs.path(), mine.path(), "e2fsck replay vs engine replay");
    mine.unmount().unwrap();
    theirs.unmount().unwrap();
}

/// The engine's own transactions stay out of the fast-commit area of a
/// journal whose superblock has `INCOMPAT_FAST_COMMIT`: the log ends at
/// `j_last`, `s_num_fc_blks` before `s_maxlen`, with the block at `j_last`
/// unused (jbd2's layout), however often it wraps.
#[test]
fn the_log_leaves_the_fast_commit_area_alone() {
    use ext4kit_engine::{Attr, NodeKind, ROOT_INO};
    let dir = tempfile::tempdir().unwrap();
    let Some(img) = common::mkfs(
        dir.path(),
        None,
        &["-O", "fast_commit", "-b", "4096", "-J", "size=4"],
        "64M",
    ) else {
        return;
    };
    // mke2fs leaves the jbd2 flag to the kernel's first mount; set it as
    // that mount does (a fresh journal superblock has no checksum).
    let jsb = debugfs(&img, "bmap <8> 0").unwrap().trim().parse::<u64>().unwrap() * 4096;
    let mut bytes = fs::read(&img).unwrap();
    let at = jsb as usize + 0x28;
    let incompat = u32::from_be_bytes(bytes[at..at + 4].try_into().unwrap()) | 0x20;
    bytes[at..at + 4].copy_from_slice(&incompat.to_be_bytes());
    fs::write(&img, bytes).unwrap();
    let attr = Attr {
        perm: 0o644,
        uid: 0,
        gid: 0,
    };
    let fs = common::open_rw(&img);
    for i in 0..600 {
        fs.create(ROOT_INO, format!("f{i}").as_bytes(), NodeKind::Regular, attr)
            .unwrap();
        fs.sync().unwrap();
    }
    let mut block = vec![0u8; 4096];
    for b in 1024..1040u64 {
        fs.read_file_at(8, b * 4096, &mut block).unwrap();
        assert_ne!(
            block[..4],
            0xC03B_3998u32.to_be_bytes(),
            "journal block {b} is past j_last: {:?}",
            &block[..16]
        );
    }
    fs.unmount().unwrap();
    assert_fsck_clean(&img).unwrap();
}

/// Device offsets of the fast-commit area's blocks (`j_last + 1..s_maxlen`).
fn fc_blocks(img: &Path) -> Vec<u64> {
    let phys = |l: u64| {
        debugfs(img, &format!("bmap <8> {l}"))
            .unwrap()
            .trim()
            .parse::<u64>()
            .unwrap()
            * 4096
    };
    let bytes = fs::read(img).unwrap();
    let sb = phys(0) as usize;
    let be = |o: usize| u32::from_be_bytes(bytes[sb + o..sb + o + 4].try_into().unwrap());
    let (maxlen, nfc) = (be(0x10), be(0x54));
    let nfc = if nfc == 0 { 256 } else { nfc };
    (maxlen - nfc + 1..maxlen).map(|l| phys(l.into())).collect()
}

/// A fast commit whose tail does not match its records ends the replay
/// before it; a damaged first fast commit fails the recovery, the
/// kernel's mount and the engine's open alike.
#[test]
fn damaged_fast_commits_are_not_replayed() {
    use ext4kit_format::journal::fast_commit::{Tag, records};
    if let Err(why) = can_loop_mount() {
        ext4kit_testkit::skipped!("fast-commit replay against the kernel: {why}");
        assert!(std::env::var_os("CI").is_none(), "CI must run the kernel tests");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let crashed = kernel_image(dir.path());
    let area = fc_blocks(&crashed);
    let mut bytes = fs::read(&crashed).unwrap();
    let block = |bytes: &[u8], at: u64| bytes[at as usize..at as usize + 4096].to_vec();
    // The last block with a tail holds the last fast commit.
    let last = area
        .iter()
        .rposition(|&at| {
            let b = block(&bytes, at);
            records(&b).any(|r| matches!(r, Ok(r) if matches!(r.tag, Tag::Tail { .. })))
        })
        .unwrap();
    let whole = {
        let copy = dir.path().join("whole.img");
        fs::copy(&crashed, &copy).unwrap();
        let fs = common::open_rw(&copy);
        fs.journal_info().recovered.clone().unwrap().fast_commits
    };
    bytes[area[last] as usize + 40] ^= 0x10;
    let torn = dir.path().join("torn.img");
    fs::write(&torn, &bytes).unwrap();
    let fs = common::open_rw(&torn);
    assert_eq!(fs.journal_info().recovered.clone().unwrap().fast_commits, whole - 1);
    fs.unmount().unwrap();
    assert_fsck_clean(&torn).unwrap();

    bytes[area[0] as usize + 40] ^= 0x10;
    let bad = dir.path().join("bad.img");
    fs::write(&bad, &bytes).unwrap();
    let err = common::open(&bad, ext4kit_engine::OpenOptions::default()).err();
    assert!(err.is_some(), "a damaged first fast commit must fail the replay");
    let kernel = dir.path().join("kbad.img");
    fs::copy(&bad, &kernel).unwrap();
    assert!(LoopMount::rw(&kernel, &[]).is_err(), "the kernel's mount fails too");
}

/// Appends and fsyncs on a `fast_commit` image (the first fsync, after a
/// create, is a full commit); the image copied before any later commit.
/// Returns the copy, the content the file must have and the journal's
/// counts.
fn engine_fsyncs(dir: &Path, fast: bool) -> (std::path::PathBuf, Vec<u8>, ext4kit_engine::journal::JournalStats) {
    use ext4kit_engine::device::FileDevice;
    use ext4kit_engine::journal::JournalOptions;
    use ext4kit_engine::{Attr, Filesystem, NodeKind, OpenOptions, ROOT_INO};
    let sub = dir.join(if fast { "fast" } else { "full" });
    fs::create_dir(&sub).unwrap();
    let img = common::mkfs(&sub, None, &["-O", "fast_commit", "-b", "4096"], "64M").unwrap();
    let opts = OpenOptions {
        journal: JournalOptions {
            fast_commit: fast,
            ..JournalOptions::default()
        },
        ..OpenOptions::default()
    };
    let fs = Filesystem::open(Box::new(FileDevice::open(&img, true).unwrap()), opts).unwrap();
    let attr = Attr {
        perm: 0o644,
        uid: 0,
        gid: 0,
    };
    let f = fs.create(ROOT_INO, b"log", NodeKind::Regular, attr).unwrap().ino;
    let mut content = Vec::new();
    for i in 0..FSYNCS {
        let rec = bytes(1000 + i * 37, i as u32 + 1);
        fs.write(f, content.len() as u64, &rec).unwrap();
        content.extend_from_slice(&rec);
        fs.sync_inode(f).unwrap();
    }
    let stats = fs.journal_stats().unwrap();
    let copy = dir.join(if fast { "fast.img" } else { "full.img" });
    fs::copy(&img, &copy).unwrap();
    drop(fs);
    (copy, content, stats)
}

const FSYNCS: usize = 40;

/// Fast commits the engine writes at fsync are replayed by the kernel's
/// mount and by the engine's own open, each giving the file every fsync
/// promised; they take far fewer journal blocks than full
/// commits (the figures are printed: `cargo test -p ext4kit-engine --test
/// fast_commit fsync -- --nocapture`).
#[test]
fn engine_fast_commits_replay_everywhere() {
    let dir = tempfile::tempdir().unwrap();
    let (img, content, fast) = engine_fsyncs(dir.path(), true);
    let (full_img, full_content, full) = engine_fsyncs(dir.path(), false);
    assert_eq!(full.fast_commits, 0);
    // The first fsync (after the create) and one whenever the 15-block
    // area is full are full commits.
    assert_eq!(fast.fast_commits + fast.commits, FSYNCS as u64, "{fast:?}");
    assert!(fast.fast_commits >= FSYNCS as u64 * 3 / 4, "{fast:?}");
    let per = |s: &ext4kit_engine::journal::JournalStats| (s.log_blocks + s.fast_commit_blocks) as f64 / FSYNCS as f64;
    println!(
        "{FSYNCS} fsyncs of appends: fast commits {} ({} fc blocks), full commits {}; journal blocks per fsync {:.2} with fast commits, {:.2} without ({} commits)",
        fast.fast_commits,
        fast.fast_commit_blocks,
        fast.commits,
        per(&fast),
        per(&full),
        full.commits
    );
    assert!(per(&fast) < per(&full), "{fast:?} vs {full:?}");

    let ours = dir.path().join("ours.img");
    fs::copy(&img, &ours).unwrap();
    let e = common::open_rw(&ours);
    let r = e.journal_info().recovered.clone().unwrap();
    assert!(r.fast_commits > 0, "the fast commits after the last full commit: {r:?}");
    let ino = e.lookup(&e.inode(ext4kit_engine::ROOT_INO).unwrap(), b"log").unwrap();
    let mut got = vec![0u8; content.len() + 10];
    let n = e.read_file_at(ino, 0, &mut got).unwrap();
    assert_eq!(&got[..n], &content[..], "the engine's replay");
    e.unmount().unwrap();
    assert_fsck_clean(&ours).unwrap();

    // e2fsck replays them too: `-fy` recovers the journal (log, then fast
    // commits) and the result is clean, with the content every fsync
    // promised.
    let by_e2fsck = dir.path().join("e2fsck.img");
    fs::copy(&img, &by_e2fsck).unwrap();
    let out = std::process::Command::new("e2fsck")
        .arg("-fy")
        .arg(&by_e2fsck)
        .output()
        .unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(matches!(out.status.code(), Some(0 | 1)), "e2fsck -fy: {said}");
    assert_fsck_clean(&by_e2fsck).unwrap();
    let cat = std::process::Command::new("debugfs")
        .args(["-R", "cat /log"])
        .arg(&by_e2fsck)
        .output()
        .unwrap();
    assert_eq!(cat.stdout, content, "e2fsck's replay");

    // The full-commit copy needs no fast commit to be right.
    let m = common::open_rw(&full_img);
    m.unmount().unwrap();
    assert_fsck_clean(&full_img).unwrap();
    let _ = full_content;

    if let Err(why) = can_loop_mount() {
        ext4kit_testkit::skipped!("the kernel's replay of engine fast commits: {why}");
        assert!(std::env::var_os("CI").is_none(), "CI must run the kernel tests");
        return;
    }
    let m = LoopMount::rw(&img, &[]).unwrap();
    assert_eq!(fs::read(m.path().join("log")).unwrap(), content, "the kernel's replay");
    m.unmount().unwrap();
    assert_fsck_clean(&img).unwrap();
}

/// A file's content as the engine's open of `img` replays it, and what
/// the recovery found.
fn engine_reads(img: Vec<u8>, name: &[u8]) -> (Vec<u8>, Option<ext4kit_engine::journal::Recovered>) {
    use ext4kit_engine::device::MemDevice;
    use ext4kit_engine::{Filesystem, OpenOptions, ROOT_INO};
    let fs = Filesystem::open(Box::new(MemDevice::new(img)), OpenOptions::default()).unwrap();
    let ino = fs.lookup(&fs.inode(ROOT_INO).unwrap(), name).unwrap();
    let mut got = vec![0u8; fs.inode(ino).unwrap().size() as usize];
    let n = fs.read_file_at(ino, 0, &mut got).unwrap();
    got.truncate(n);
    (got, fs.journal_info().recovered.clone())
}

/// `/log` of the image at `copy` after `e2fsck -fy` recovered it, which
/// `e2fsck -fn` must then find clean.
fn e2fsck_reads(copy: &Path, point: usize) -> Vec<u8> {
    if let Some(keep) = std::env::var_os("EXT4KIT_FC_KEEP") {
        fs::copy(copy, Path::new(&keep).join(format!("p{point}.img"))).unwrap();
    }
    let out = std::process::Command::new("e2fsck")
        .arg("-fy")
        .arg(copy)
        .output()
        .unwrap();
    assert!(
        matches!(out.status.code(), Some(0 | 1)),
        "point {point}: e2fsck -fy: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_fsck_clean(copy).unwrap_or_else(|e| panic!("point {point}: {e}"));
    let cat = std::process::Command::new("debugfs")
        .args(["-R", "cat /log"])
        .arg(copy)
        .output()
        .unwrap();
    cat.stdout
}

/// A fresh 16 MiB `fast_commit` image on a crash device, open with fast
/// commits written, holding an empty file `log` (its inode returned).
/// 4 KiB atomic writes, as `tests/crash.rs`: the superblock is written in
/// place (checkpoints, and here before a round of fast commits), as the
/// kernel writes it, and a torn one fails its checksum anywhere.
fn crash_fast_commit_fs(
    dir: &Path,
) -> Option<(
    std::sync::Arc<ext4kit_engine::device::CrashDevice>,
    ext4kit_engine::Filesystem,
    u32,
)> {
    use ext4kit_engine::journal::JournalOptions;
    use ext4kit_engine::{Filesystem, NodeKind, OpenOptions, ROOT_INO};
    let img = common::mkfs(dir, None, &["-O", "fast_commit", "-b", "4096"], "16M")?;
    let dev = std::sync::Arc::new(ext4kit_engine::device::CrashDevice::with_atomic_unit(
        fs::read(&img).unwrap(),
        4096,
    ));
    let opts = OpenOptions {
        journal: JournalOptions {
            fast_commit: true,
            ..JournalOptions::default()
        },
        ..OpenOptions::default()
    };
    let fs = Filesystem::open(Box::new(dev.clone()), opts).unwrap();
    let f = fs.create(ROOT_INO, b"log", NodeKind::Regular, LOG_ATTR).unwrap().ino;
    Some((dev, fs, f))
}

const LOG_ATTR: ext4kit_engine::Attr = ext4kit_engine::Attr {
    perm: 0o644,
    uid: 0,
    gid: 0,
};

/// Power lost at every write of a run of fast-committed appends, the
/// writes since the last flush kept, dropped and reordered at random:
/// `e2fsck -fy` replays the journal (log and fast commits) into an image
/// `e2fsck -fn` finds clean, and it and the engine's open give the file
/// a prefix of what was written that holds all every returned fsync
/// promised.
#[test]
fn engine_fast_commits_survive_crashes_for_e2fsck() {
    use ext4kit_engine::device::Survivors;
    let dir = tempfile::tempdir().unwrap();
    let Some((dev, fs, f)) = crash_fast_commit_fs(dir.path()) else {
        assert!(std::env::var_os("CI").is_none(), "CI has mkfs.ext4");
        return;
    };
    let mut content = Vec::new();
    let mut promised = Vec::new();
    for i in 0..24 {
        let rec = bytes(700 + i * 301, i as u32 + 100);
        fs.write(f, content.len() as u64, &rec).unwrap();
        content.extend_from_slice(&rec);
        fs.sync_inode(f).unwrap();
        promised.push((dev.writes(), content.len()));
    }
    let stats = fs.journal_stats().unwrap();
    assert!(stats.fast_commits >= 20, "{stats:?}");
    drop(fs);
    let copy = dir.path().join("crash.img");
    let mut stale = 0;
    for point in promised[0].0..=dev.writes() {
        let kept = promised.iter().rev().find(|(w, _)| *w <= point).map_or(0, |p| p.1);
        let survivors = Survivors::Random {
            seed: point as u64,
            torn: true,
            reorder: true,
        };
        let image = dev.crash_image(point, survivors);
        let (by_engine, _) = engine_reads(image.clone(), b"log");
        assert!(
            by_engine.len() >= kept && content.starts_with(&by_engine),
            "point {point}: the engine's replay has {} bytes, {kept} promised",
            by_engine.len()
        );
        fs::write(&copy, &image).unwrap();
        if stale_head(&copy) {
            // The commit block is down, the zeroed head not yet: e2fsck
            // would give up on the log (see `journal/fast_commit/area.rs`).
            stale += 1;
            continue;
        }
        let cat = e2fsck_reads(&copy, point);
        assert!(
            cat.len() >= kept && content.starts_with(&cat),
            "point {point}: e2fsck's replay has {} bytes, {kept} promised",
            cat.len()
        );
    }
    println!(
        "{} crash points, {stale} between a full commit and its zeroed area head; {stats:?}",
        dev.writes() + 1 - promised[0].0
    );
    // Only the crash points around each head's zeroing (before it is
    // issued, while it is volatile).
    assert!(
        stale <= 2 * stats.fast_commit_resets as usize,
        "{stale} stale-head points"
    );
}

/// Whether the image's fast-commit area starts with a `HEAD` naming a
/// transaction other than the first one its log lacks (`debugfs logdump`).
fn stale_head(img: &Path) -> bool {
    let out = debugfs(img, "logdump").unwrap();
    let last = out
        .lines()
        .rev()
        .filter(|l| l.contains("(commit block)"))
        .find_map(|l| l.split_whitespace().nth(3)?.trim_end_matches(',').parse::<u32>().ok());
    let start = out.lines().find_map(|l| {
        l.strip_prefix("Journal starts at block ")?
            .split("transaction ")
            .nth(1)?
            .parse::<u32>()
            .ok()
    });
    let head = out.lines().find_map(|l| {
        l.strip_prefix("tag HEAD, features ")?
            .split("tid ")
            .nth(1)?
            .trim()
            .parse::<u32>()
            .ok()
    });
    let expected = last.map(|t| t + 1).or(start);
    matches!((head, expected), (Some(h), Some(e)) if h != e)
}

/// A long run of fast-committed appends with a mkdir between every few
/// (ineligible: full commits) fills the log, so checkpoints come while the area holds fast
/// commits of the transaction about to be logged: at every flush the
/// durable image still gives the file all every returned fsync promised,
/// through the engine's open and (at a sample of points) e2fsck's replay.
#[test]
fn fast_commits_outlive_checkpoints() {
    use ext4kit_engine::device::Survivors;
    use ext4kit_engine::{NodeKind, ROOT_INO};
    let dir = tempfile::tempdir().unwrap();
    let Some((dev, fs, f)) = crash_fast_commit_fs(dir.path()) else {
        assert!(std::env::var_os("CI").is_none(), "CI has mkfs.ext4");
        return;
    };
    let mut content = Vec::new();
    let mut promised = Vec::new();
    for i in 0..400 {
        if i % 3 == 2 {
            let name = format!("d{i}");
            fs.create(ROOT_INO, name.as_bytes(), NodeKind::Directory, LOG_ATTR)
                .unwrap();
        }
        let rec = bytes(100 + i % 50, i as u32 + 7);
        fs.write(f, content.len() as u64, &rec).unwrap();
        content.extend_from_slice(&rec);
        fs.sync_inode(f).unwrap();
        promised.push((dev.writes(), content.len()));
    }
    let stats = fs.journal_stats().unwrap();
    drop(fs);
    println!("{stats:?}");
    assert!(stats.checkpoints > 0 && stats.fast_commits > 100, "{stats:?}");
    let copy = dir.path().join("ckpt.img");
    let mut stale = 0;
    for (n, point) in dev
        .flush_points()
        .into_iter()
        .filter(|&p| p >= promised[0].0)
        .enumerate()
    {
        let kept = promised.iter().rev().find(|(w, _)| *w <= point).map_or(0, |p| p.1);
        let image = dev.crash_image(point, Survivors::None);
        let (got, rec) = engine_reads(image.clone(), b"log");
        assert!(
            got.len() >= kept && content.starts_with(&got),
            "point {point}: the engine's replay has {} bytes, {kept} promised",
            got.len()
        );
        // Every point right after a checkpoint (an empty log, fast commits
        // after it), and a sample of the rest.
        if n % 25 != 0 && rec.is_none_or(|r| r.transactions > 0) {
            continue;
        }
        fs::write(&copy, &image).unwrap();
        if stale_head(&copy) {
            stale += 1;
            continue;
        }
        let cat = e2fsck_reads(&copy, point);
        assert!(
            cat.len() >= kept && content.starts_with(&cat),
            "point {point}: e2fsck's replay has {} bytes, {kept} promised",
            cat.len()
        );
    }
    // A stale head only at the flush after a full commit's commit block.
    assert!(stale <= stats.fast_commit_resets as usize, "{stale} stale-head points");
}

/// `image` on a modelled `profile` disk, opened with fast commits on or
/// off: the set-up of the modelled-time comparisons.
fn on_modeled_disk(
    image: &[u8],
    profile: &str,
    fast: bool,
) -> (
    std::sync::Arc<ext4kit_engine::device::DiskModel<ext4kit_engine::device::MemDevice>>,
    ext4kit_engine::Filesystem,
) {
    use ext4kit_engine::device::{DiskModel, DiskProfile, MemDevice};
    use ext4kit_engine::journal::JournalOptions;
    let p: DiskProfile = profile.parse().unwrap();
    let disk = std::sync::Arc::new(DiskModel::new(MemDevice::new(image.to_vec()), &p).unwrap());
    let opts = ext4kit_engine::OpenOptions {
        journal: JournalOptions {
            fast_commit: fast,
            ..JournalOptions::default()
        },
        ..ext4kit_engine::OpenOptions::default()
    };
    let fs = ext4kit_engine::Filesystem::open(Box::new(disk.clone()), opts).unwrap();
    (disk, fs)
}

/// Modeled disk time of an fsync-heavy loop (100 appends of ~1 KB, each
/// fsync'd) on the engine's disk model, with fast commits and without:
/// deterministic figures, printed (`cargo test -p ext4kit-engine --test
/// fast_commit modeled -- --nocapture`).
#[test]
fn fsync_loop_modeled_disk_time() {
    use ext4kit_engine::{Attr, NodeKind, ROOT_INO};
    let dir = tempfile::tempdir().unwrap();
    let Some(img) = common::mkfs(dir.path(), None, &["-O", "fast_commit", "-b", "4096"], "64M") else {
        assert!(std::env::var_os("CI").is_none(), "CI has mkfs.ext4");
        return;
    };
    let image = fs::read(&img).unwrap();
    for profile in ["hp-sas-10k", "ssd"] {
        let mut per = Vec::new();
        for fast in [true, false] {
            let (disk, fs) = on_modeled_disk(&image, profile, fast);
            let attr = Attr {
                perm: 0o644,
                uid: 0,
                gid: 0,
            };
            let f = fs.create(ROOT_INO, b"log", NodeKind::Regular, attr).unwrap().ino;
            fs.sync_inode(f).unwrap();
            disk.reset();
            let mut at = 0u64;
            for i in 0..100 {
                let rec = bytes(900 + i * 7, i as u32 + 3);
                fs.write(f, at, &rec).unwrap();
                at += rec.len() as u64;
                fs.sync_inode(f).unwrap();
            }
            let s = disk.stats();
            let j = fs.journal_stats().unwrap();
            println!(
                "{profile}, fast commits {}: {:.3} ms per fsync modeled, {} writes, {} flushes, {} fast commits, {} full commits",
                if fast { "on" } else { "off" },
                s.modeled_ns as f64 / 100.0 / 1e6,
                s.writes,
                s.flushes,
                j.fast_commits,
                j.commits
            );
            per.push(s.modeled_ns);
            fs.unmount().unwrap();
        }
        assert!(
            per[0] < per[1],
            "{profile}: fast commits must take less modeled time: {per:?}"
        );
    }
}

/// Path → (inode, links, size, content) of every name under the root
/// but lost+found, as the engine reads `fs`.
fn engine_tree(fs: &ext4kit_engine::Filesystem) -> Vec<(String, u32, u16, u64, Vec<u8>)> {
    let mut out = Vec::new();
    let mut todo = vec![(String::new(), ext4kit_engine::ROOT_INO)];
    while let Some((path, dir)) = todo.pop() {
        for e in fs.read_dir(&fs.inode(dir).unwrap()).unwrap() {
            if e.name == b"." || e.name == b".." || (dir == ext4kit_engine::ROOT_INO && e.name == b"lost+found") {
                continue;
            }
            let p = format!("{path}/{}", String::from_utf8_lossy(&e.name));
            let inode = fs.inode(e.ino).unwrap();
            let mut body = Vec::new();
            if inode.is_dir() {
                todo.push((p.clone(), e.ino));
            } else {
                body = vec![0u8; inode.size() as usize];
                let n = fs.read_file_at(e.ino, 0, &mut body).unwrap();
                body.truncate(n);
            }
            out.push((p, e.ino, inode.raw.links(), inode.size(), body));
        }
    }
    out.sort();
    out
}

type Tree = Vec<(String, u32, u16, u64, Vec<u8>)>;

fn assert_same_tree(want: &Tree, got: &Tree, what: &str) {
    let show = |t: &Tree| {
        t.iter()
            .map(|(p, i, l, s, _)| format!("{p} ino {i} links {l} size {s}"))
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert!(want == got, "{what}: want\n{}\ngot\n{}", show(want), show(got));
}

/// A 64 MiB `fast_commit` image open in the engine, with a base tree a
/// full commit made durable: `/a` holding `keep`, `victim` (also
/// `/b/victim2`), `solo`, `far` and the directory `sub`; `/b`.
fn namespace_base(dir: &Path) -> Option<(std::path::PathBuf, ext4kit_engine::Filesystem)> {
    use ext4kit_engine::device::FileDevice;
    use ext4kit_engine::journal::JournalOptions;
    use ext4kit_engine::{Filesystem, NodeKind, OpenOptions, ROOT_INO};
    let img = common::mkfs(dir, None, &["-O", "fast_commit", "-b", "4096"], "64M")?;
    let opts = OpenOptions {
        journal: JournalOptions {
            fast_commit: true,
            ..JournalOptions::default()
        },
        ..OpenOptions::default()
    };
    let fs = Filesystem::open(Box::new(FileDevice::open(&img, true).unwrap()), opts).unwrap();
    let a = fs.create(ROOT_INO, b"a", NodeKind::Directory, LOG_ATTR).unwrap().ino;
    let b = fs.create(ROOT_INO, b"b", NodeKind::Directory, LOG_ATTR).unwrap().ino;
    for (i, name) in [&b"keep"[..], b"victim", b"solo", b"far"].into_iter().enumerate() {
        let f = fs.create(a, name, NodeKind::Regular, LOG_ATTR).unwrap().ino;
        fs.write(f, 0, &bytes(3000 + i * 500, i as u32 + 11)).unwrap();
    }
    fs.create(a, b"sub", NodeKind::Directory, LOG_ATTR).unwrap();
    let victim = fs.lookup(&fs.inode(a).unwrap(), b"victim").unwrap();
    fs.link(victim, b, b"victim2").unwrap();
    fs.sync_inode(victim).unwrap();
    Some((img, fs))
}

fn lookup_path(fs: &ext4kit_engine::Filesystem, path: &[&str]) -> u32 {
    let mut ino = ext4kit_engine::ROOT_INO;
    for p in path {
        ino = fs.lookup(&fs.inode(ino).unwrap(), p.as_bytes()).unwrap();
    }
    ino
}

/// Name changes fsync'd as fast commits (creates, link, unlink of a
/// file with another name, rename within and across directories) are
/// replayed from a copy taken right after the last fsync — before any
/// full commit — by the kernel's mount, by `e2fsck -fy` and by the
/// engine's open, each giving the tree (names, inode numbers, links,
/// sizes, contents) the fsyncs promised, and an image `e2fsck -fn` finds
/// clean.
#[test]
fn name_changes_fast_commit_and_replay_everywhere() {
    use ext4kit_engine::{NodeKind, RenameFlags};
    let dir = tempfile::tempdir().unwrap();
    let Some((img, fs)) = namespace_base(dir.path()) else {
        assert!(std::env::var_os("CI").is_none(), "CI has mkfs.ext4");
        return;
    };
    let before = fs.journal_stats().unwrap();
    let (a, b) = (lookup_path(&fs, &["a"]), lookup_path(&fs, &["b"]));
    let new1 = fs.create(a, b"new1", NodeKind::Regular, LOG_ATTR).unwrap().ino;
    fs.write(new1, 0, &bytes(5000, 3)).unwrap();
    fs.sync_inode(new1).unwrap();
    let sub = lookup_path(&fs, &["a", "sub"]);
    let inner = fs.create(sub, b"inner", NodeKind::Regular, LOG_ATTR).unwrap().ino;
    fs.write(inner, 0, &bytes(9000, 4)).unwrap();
    fs.sync_inode(inner).unwrap();
    let keep = lookup_path(&fs, &["a", "keep"]);
    fs.link(keep, b, b"keep_link").unwrap();
    fs.sync_inode(keep).unwrap();
    fs.unlink(a, b"victim").unwrap();
    fs.sync_inode(lookup_path(&fs, &["b", "victim2"])).unwrap();
    fs.rename(a, b"solo", a, b"solo2", RenameFlags::default()).unwrap();
    fs.sync_inode(a).unwrap();
    fs.rename(a, b"far", b, b"far", RenameFlags::default()).unwrap();
    let far = lookup_path(&fs, &["b", "far"]);
    fs.write(far, 100, b"moved").unwrap();
    fs.sync_inode(far).unwrap();
    let after = fs.journal_stats().unwrap();
    println!("name changes: {before:?}\n -> {after:?}");
    assert_eq!(after.commits, before.commits, "every fsync a fast commit: {after:?}");
    assert_eq!(after.fast_commits - before.fast_commits, 6, "{after:?}");
    let want = engine_tree(&fs);
    replays_agree(dir.path(), &img, &want, fs);
}

/// Copies `img` (crash-cut: `fs` is still open, nothing committed since
/// its last fsync) three times and asserts that the engine's open,
/// `e2fsck -fy` and the kernel's mount each replay it to `want`, each
/// leaving an image `e2fsck -fn` finds clean.
fn replays_agree(dir: &Path, img: &Path, want: &Tree, fs: ext4kit_engine::Filesystem) {
    let copies: Vec<_> = ["kernel", "e2fsck", "engine"]
        .iter()
        .map(|w| {
            let p = dir.join(format!("{w}.img"));
            fs::copy(img, &p).unwrap();
            p
        })
        .collect();
    drop(fs);

    // (c) the engine's open.
    let e = common::open_rw(&copies[2]);
    assert!(e.journal_info().recovered.clone().unwrap().fast_commits > 0);
    assert_same_tree(want, &engine_tree(&e), "the engine's replay");
    e.unmount().unwrap();
    assert_fsck_clean(&copies[2]).unwrap();

    // (b) e2fsck.
    let out = std::process::Command::new("e2fsck")
        .arg("-fy")
        .arg(&copies[1])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(matches!(out.status.code(), Some(0 | 1)), "e2fsck -fy: {said}");
    assert_fsck_clean(&copies[1]).unwrap();
    let e = common::open_rw(&copies[1]);
    assert_same_tree(want, &engine_tree(&e), &format!("e2fsck's replay ({said})"));
    drop(e);

    // (a) the kernel's mount.
    if let Err(why) = can_loop_mount() {
        ext4kit_testkit::skipped!("the kernel's replay of name changes: {why}");
        assert!(std::env::var_os("CI").is_none(), "CI must run the kernel tests");
        return;
    }
    let m = LoopMount::rw(&copies[0], &[]).unwrap();
    m.unmount().unwrap();
    assert_fsck_clean(&copies[0]).unwrap();
    let e = common::open_rw(&copies[0]);
    assert_same_tree(want, &engine_tree(&e), "the kernel's replay");
    drop(e);
}

/// Creates and unlinks fsync'd into a directory with an htree index
/// (300 names before): the replays add and remove the names through the
/// index (a leaf split grows the directory: that fsync is a full commit).
#[test]
fn htree_name_changes_replay_everywhere() {
    use ext4kit_engine::NodeKind;
    let dir = tempfile::tempdir().unwrap();
    let Some((img, fs)) = namespace_base(dir.path()) else {
        assert!(std::env::var_os("CI").is_none(), "CI has mkfs.ext4");
        return;
    };
    let b = lookup_path(&fs, &["b"]);
    let big = fs.create(b, b"big", NodeKind::Directory, LOG_ATTR).unwrap().ino;
    let mut last = 0;
    for i in 0..300 {
        let name = format!("entry-with-a-longer-name-{i:05}");
        last = fs
            .create(big, name.as_bytes(), NodeKind::Regular, LOG_ATTR)
            .unwrap()
            .ino;
    }
    fs.link(last, big, b"second-name").unwrap();
    fs.sync_inode(big).unwrap();
    assert!(fs.inode(big).unwrap().raw.flags() & 0x1000 != 0, "an htree directory");
    let s0 = fs.journal_stats().unwrap();
    for i in 0..30u32 {
        let f = fs
            .create(big, format!("late-{i:03}").as_bytes(), NodeKind::Regular, LOG_ATTR)
            .unwrap()
            .ino;
        fs.write(f, 0, &bytes(700 + i as usize, i + 90)).unwrap();
        fs.sync_inode(f).unwrap();
    }
    fs.unlink(big, b"second-name").unwrap();
    fs.sync_inode(last).unwrap();
    let s1 = fs.journal_stats().unwrap();
    println!("htree: {s1:?}");
    assert!(s1.fast_commits - s0.fast_commits >= 20, "{s1:?}");
    let want = engine_tree(&fs);
    replays_agree(dir.path(), &img, &want, fs);
}

/// Changes no fast commit carries make the fsync a full commit, as the
/// kernel's ineligible operations do: removing a last link, renaming a
/// directory, an xattr, a symlink, a mkdir (see `fc_note_create`), the
/// journal-data flag; the image stays clean.
#[test]
fn ineligible_name_changes_commit_in_full() {
    use ext4kit_engine::{NodeKind, RenameFlags, XattrSet};
    let dir = tempfile::tempdir().unwrap();
    let Some((img, fs)) = namespace_base(dir.path()) else {
        assert!(std::env::var_os("CI").is_none(), "CI has mkfs.ext4");
        return;
    };
    let (a, b) = (lookup_path(&fs, &["a"]), lookup_path(&fs, &["b"]));
    let keep = lookup_path(&fs, &["a", "keep"]);
    // Each step returns the inode to fsync.
    type Step = Box<dyn Fn(&ext4kit_engine::Filesystem) -> u32>;
    let steps: Vec<(&str, Step)> = vec![
        (
            "unlink of a last link",
            Box::new(move |fs| {
                fs.unlink(a, b"solo").unwrap();
                a
            }),
        ),
        (
            "directory rename",
            Box::new(move |fs| {
                fs.rename(ext4kit_engine::ROOT_INO, b"b", a, b"b", RenameFlags::default())
                    .unwrap();
                a
            }),
        ),
        (
            "xattr",
            Box::new(move |fs| {
                fs.set_xattr(keep, b"user.x", b"1", XattrSet::Any).unwrap();
                keep
            }),
        ),
        (
            "symlink",
            Box::new(move |fs| {
                fs.create(a, b"sl", NodeKind::Symlink(b"keep".to_vec()), LOG_ATTR)
                    .unwrap()
                    .ino
            }),
        ),
        (
            "mkdir",
            Box::new(move |fs| fs.create(a, b"made", NodeKind::Directory, LOG_ATTR).unwrap().ino),
        ),
        (
            "journal flag",
            Box::new(move |fs| {
                let old = fs.inode(keep).unwrap().raw.flags();
                fs.set_flags(keep, old | 0x4000, true).unwrap();
                keep
            }),
        ),
        (
            "control: a create",
            Box::new(move |fs| fs.create(a, b"plain", NodeKind::Regular, LOG_ATTR).unwrap().ino),
        ),
    ];
    let _ = b;
    for (what, step) in steps {
        let s0 = fs.journal_stats().unwrap();
        let ino = step(&fs);
        fs.sync_inode(ino).unwrap();
        let s1 = fs.journal_stats().unwrap();
        let full = s1.commits - s0.commits;
        let fast = s1.fast_commits - s0.fast_commits;
        if what.starts_with("control") {
            assert_eq!((full, fast), (0, 1), "{what}: {s1:?}");
        } else {
            assert_eq!((full, fast), (1, 0), "{what}: {s1:?}");
        }
    }
    fs.unmount().unwrap();
    assert_fsck_clean(&img).unwrap();
}

/// Modeled disk time and journal blocks of an fsync-heavy create loop
/// (100 × create a file in one directory, write 4 KiB, fsync it), with
/// fast commits and without: deterministic figures, printed (`cargo test
/// -p ext4kit-engine --test fast_commit create_loop -- --nocapture`).
#[test]
fn create_loop_modeled_disk_time() {
    use ext4kit_engine::{NodeKind, ROOT_INO};
    const N: u64 = 100;
    let dir = tempfile::tempdir().unwrap();
    let Some(img) = common::mkfs(dir.path(), None, &["-O", "fast_commit", "-b", "4096"], "64M") else {
        assert!(std::env::var_os("CI").is_none(), "CI has mkfs.ext4");
        return;
    };
    let image = fs::read(&img).unwrap();
    for profile in ["hp-sas-10k", "ssd"] {
        let mut per = Vec::new();
        for fast in [true, false] {
            let (disk, fs) = on_modeled_disk(&image, profile, fast);
            let d = fs.create(ROOT_INO, b"d", NodeKind::Directory, LOG_ATTR).unwrap().ino;
            fs.sync_inode(d).unwrap();
            disk.reset();
            let j0 = fs.journal_stats().unwrap();
            for i in 0..N {
                let f = fs
                    .create(d, format!("f{i:04}").as_bytes(), NodeKind::Regular, LOG_ATTR)
                    .unwrap()
                    .ino;
                fs.write(f, 0, &bytes(4096, i as u32 + 5)).unwrap();
                fs.sync_inode(f).unwrap();
            }
            let s = disk.stats();
            let j = fs.journal_stats().unwrap();
            let blocks = (j.log_blocks + j.fast_commit_blocks) - (j0.log_blocks + j0.fast_commit_blocks);
            println!(
                "create loop, {profile}, fast commits {}: {:.3} ms per fsync modeled, {:.2} journal blocks per fsync, {} writes, {} flushes, {} fast commits, {} full commits",
                if fast { "on" } else { "off" },
                s.modeled_ns as f64 / N as f64 / 1e6,
                blocks as f64 / N as f64,
                s.writes,
                s.flushes,
                j.fast_commits - j0.fast_commits,
                j.commits - j0.commits
            );
            per.push((s.modeled_ns, blocks));
            if fast {
                assert!(j.fast_commits - j0.fast_commits >= N * 3 / 4, "{j:?}");
            }
            fs.unmount().unwrap();
        }
        assert!(
            per[0].0 < per[1].0,
            "{profile}: fast commits must take less modeled time: {per:?}"
        );
        assert!(per[0].1 < per[1].1, "{profile}: and fewer journal blocks: {per:?}");
    }
}

/// Name → content of the root directory (lost+found aside) of the image
/// `img` as the engine's open (and its replay) leaves it.
fn root_names(img: Vec<u8>) -> std::collections::BTreeMap<Vec<u8>, Vec<u8>> {
    use ext4kit_engine::device::MemDevice;
    use ext4kit_engine::{Filesystem, OpenOptions, ROOT_INO};
    let fs = Filesystem::open(Box::new(MemDevice::new(img)), OpenOptions::default()).unwrap();
    let mut out = std::collections::BTreeMap::new();
    for e in fs.read_dir(&fs.inode(ROOT_INO).unwrap()).unwrap() {
        if e.name == b"." || e.name == b".." || e.name == b"lost+found" {
            continue;
        }
        let mut body = vec![0u8; fs.inode(e.ino).unwrap().size() as usize];
        let n = fs.read_file_at(e.ino, 0, &mut body).unwrap();
        body.truncate(n);
        out.insert(e.name, body);
    }
    out
}

/// Power lost at every write of a run of fsync'd creates, links, renames
/// and unlinks (writes since the last flush kept, dropped and reordered
/// at random): the engine's open and `e2fsck -fy` (then `-fn` clean)
/// each give the root directory as one fsync left it, never older than
/// the last fsync that returned.
#[test]
fn name_fast_commits_survive_crashes() {
    use ext4kit_engine::device::Survivors;
    use ext4kit_engine::{NodeKind, ROOT_INO, RenameFlags};
    use std::collections::BTreeMap;
    let dir = tempfile::tempdir().unwrap();
    let Some((dev, fs, _)) = crash_fast_commit_fs(dir.path()) else {
        assert!(std::env::var_os("CI").is_none(), "CI has mkfs.ext4");
        return;
    };
    let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::from([(b"log".to_vec(), Vec::new())]);
    let mut states = Vec::new();
    let mut promise = |fs: &ext4kit_engine::Filesystem, ino: u32, model: &BTreeMap<Vec<u8>, Vec<u8>>| {
        fs.sync_inode(ino).unwrap();
        states.push((dev.writes(), model.clone()));
    };
    let look = |fs: &ext4kit_engine::Filesystem, name: &[u8]| fs.lookup(&fs.inode(ROOT_INO).unwrap(), name).unwrap();
    for i in 0..12u32 {
        let name = format!("n{i}").into_bytes();
        let body = bytes(1500 + i as usize * 100, i + 40);
        let f = fs.create(ROOT_INO, &name, NodeKind::Regular, LOG_ATTR).unwrap().ino;
        fs.write(f, 0, &body).unwrap();
        model.insert(name.clone(), body.clone());
        promise(&fs, f, &model);
        if i % 3 == 1 {
            let h = format!("h{i}").into_bytes();
            fs.link(f, ROOT_INO, &h).unwrap();
            model.insert(h, body);
            promise(&fs, f, &model);
        } else if i % 3 == 2 {
            let (from, to) = (format!("n{}", i - 1).into_bytes(), format!("m{i}").into_bytes());
            fs.rename(ROOT_INO, &from, ROOT_INO, &to, RenameFlags::default())
                .unwrap();
            let moved = model.remove(&from).unwrap();
            model.insert(to.clone(), moved);
            promise(&fs, look(&fs, &to), &model);
            // The name linked one step before goes; its file keeps `to`.
            let h = format!("h{}", i - 1).into_bytes();
            fs.unlink(ROOT_INO, &h).unwrap();
            model.remove(&h);
            promise(&fs, look(&fs, &to), &model);
        }
    }
    let stats = fs.journal_stats().unwrap();
    assert!(stats.fast_commits >= 20, "{stats:?}");
    drop(fs);
    let copy = dir.path().join("crash.img");
    let mut stale = 0;
    let first = states[0].0;
    for point in first..=dev.writes() {
        let k = states.iter().rposition(|(w, _)| *w <= point).unwrap_or(0);
        let allowed = &states[k..];
        let survivors = Survivors::Random {
            seed: point as u64 + 7,
            torn: true,
            reorder: true,
        };
        let image = dev.crash_image(point, survivors);
        let got = root_names(image.clone());
        assert!(
            allowed.iter().any(|(_, m)| *m == got),
            "point {point}: the engine's replay gives {:?}, fsync {k} promised {:?}",
            got.keys()
                .map(|k| String::from_utf8_lossy(k).into_owned())
                .collect::<Vec<_>>(),
            states[k]
                .1
                .keys()
                .map(|k| String::from_utf8_lossy(k).into_owned())
                .collect::<Vec<_>>()
        );
        fs::write(&copy, &image).unwrap();
        if let Some(keep) = std::env::var_os("EXT4KIT_FC_KEEP") {
            fs::copy(&copy, Path::new(&keep).join(format!("n{point}.img"))).unwrap();
        }
        if stale_head(&copy) {
            stale += 1;
            continue;
        }
        let out = std::process::Command::new("e2fsck")
            .arg("-fy")
            .arg(&copy)
            .output()
            .unwrap();
        let said = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            matches!(out.status.code(), Some(0 | 1)),
            "point {point}: e2fsck -fy: {said}"
        );
        assert_fsck_clean(&copy).unwrap_or_else(|e| panic!("point {point}: {e}"));
        let got = root_names(fs::read(&copy).unwrap());
        assert!(
            allowed.iter().any(|(_, m)| *m == got),
            "point {point}: e2fsck's replay gives {:?} ({said})",
            got.keys()
                .map(|k| String::from_utf8_lossy(k).into_owned())
                .collect::<Vec<_>>()
        );
    }
    println!(
        "{} crash points, {stale} stale heads; {stats:?}",
        dev.writes() + 1 - first
    );
    assert!(
        stale <= 2 * stats.fast_commit_resets as usize,
        "{stale} stale-head points"
    );
}

/// Threads creating, writing and fsyncing in one directory at once, fast
/// commits on: every fsync returns (the fast commit holds the writer lock
/// before the log, as transactions take them), and the image the last
/// fsyncs leave replays clean.
#[test]
fn concurrent_create_fsyncs() {
    use ext4kit_engine::device::FileDevice;
    use ext4kit_engine::journal::JournalOptions;
    use ext4kit_engine::{Filesystem, NodeKind, OpenOptions, ROOT_INO};
    let dir = tempfile::tempdir().unwrap();
    let Some(img) = common::mkfs(dir.path(), None, &["-O", "fast_commit", "-b", "4096"], "64M") else {
        assert!(std::env::var_os("CI").is_none(), "CI has mkfs.ext4");
        return;
    };
    let opts = OpenOptions {
        journal: JournalOptions {
            fast_commit: true,
            ..JournalOptions::default()
        },
        ..OpenOptions::default()
    };
    let fs = Filesystem::open(Box::new(FileDevice::open(&img, true).unwrap()), opts).unwrap();
    let d = fs.create(ROOT_INO, b"d", NodeKind::Directory, LOG_ATTR).unwrap().ino;
    fs.sync_inode(d).unwrap();
    std::thread::scope(|s| {
        for t in 0..4u32 {
            let fs = &fs;
            s.spawn(move || {
                for i in 0..25u32 {
                    let f = fs
                        .create(d, format!("t{t}-{i}").as_bytes(), NodeKind::Regular, LOG_ATTR)
                        .unwrap()
                        .ino;
                    fs.write(f, 0, &bytes(2000, t * 100 + i)).unwrap();
                    fs.sync_inode(f).unwrap();
                }
            });
        }
    });
    let stats = fs.journal_stats().unwrap();
    assert!(stats.fast_commits > 0, "{stats:?}");
    let want = engine_tree(&fs);
    assert_eq!(want.len(), 101);
    let copy = dir.path().join("cut.img");
    fs::copy(&img, &copy).unwrap();
    drop(fs);
    let e = common::open_rw(&copy);
    assert_same_tree(&want, &engine_tree(&e), "the engine's replay");
    e.unmount().unwrap();
    assert_fsck_clean(&copy).unwrap();
}
