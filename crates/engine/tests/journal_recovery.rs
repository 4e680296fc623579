//! Journal replay at open against e2fsck's: images the kernel left with a
//! dirty journal (copied while mounted read-write, after `sync`) are
//! replayed by the engine on one copy and by `e2fsck -E journal_only` on
//! another, and the two must agree block for block outside the two
//! superblocks (whose significant fields are compared). Corrupt logs must
//! end the replay where jbd2 ends it, or fail cleanly, never panic.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{mkfs, run};
use ext4kit_engine::device::FileDevice;
use ext4kit_engine::{DirtyJournal, Error, Filesystem, OpenOptions};
use ext4kit_format::journal::superblock::RawJournalSuperblock;
use ext4kit_format::superblock::RawSuperblock;
use ext4kit_testkit::mount::{LoopMount, can_loop_mount};
use ext4kit_testkit::tools::{assert_fsck_clean, debugfs, skip_unless};

/// Files written by the workload and still present, with their contents.
type Expected = Vec<(String, Vec<u8>)>;

fn content(i: usize, len: usize) -> Vec<u8> {
    (0..len).map(|j| (i * 31 + j * 7 % 251) as u8).collect()
}

/// Mounts `img`, runs three committed rounds (create, delete, create
/// again) and copies the image to `dirty` while still mounted.
fn make_dirty(img: &Path, dirty: &Path) -> Expected {
    let mnt = LoopMount::rw(img, &[]).expect("mount rw");
    let root = mnt.path();
    let mut expected = Vec::new();
    for d in 0..4 {
        let dir = root.join(format!("d{d}"));
        std::fs::create_dir(&dir).unwrap();
        for i in 0..40 {
            std::fs::write(dir.join(format!("f{i}")), content(d * 100 + i, 700 + i * 37)).unwrap();
        }
    }
    run("sync", &[]);
    for d in 0..2 {
        std::fs::remove_dir_all(root.join(format!("d{d}"))).unwrap();
    }
    run("sync", &[]);
    for i in 0..30 {
        let name = format!("top{i}");
        let data = content(1000 + i, 5000 + i * 101);
        std::fs::write(root.join(&name), &data).unwrap();
        expected.push((format!("/{name}"), data));
    }
    std::fs::remove_file(root.join("d2/f3")).unwrap();
    run("sync", &[]);
    std::fs::copy(img, dirty).unwrap();
    mnt.unmount().expect("unmount");
    for d in 2..4 {
        for i in 0..40 {
            if (d, i) != (2, 3) {
                expected.push((format!("/d{d}/f{i}"), content(d * 100 + i, 700 + i * 37)));
            }
        }
    }
    expected
}

fn open_rw(img: &Path, opts: OpenOptions) -> ext4kit_engine::Result<Filesystem> {
    Filesystem::open(Box::new(FileDevice::open(img, true).expect("open image")), opts)
}

fn open_ro(img: &Path, opts: OpenOptions) -> ext4kit_engine::Result<Filesystem> {
    Filesystem::open(Box::new(FileDevice::open(img, false).expect("open image")), opts)
}

/// `e2fsck -E journal_only`: replays the journal and nothing else.
fn e2fsck_replay(img: &Path) -> (i32, String) {
    let out = Command::new("e2fsck")
        .args(["-y", "-E", "journal_only"])
        .arg(img)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.code().unwrap_or(-1), text)
}

fn copy(from: &Path, dir: &Path, name: &str) -> PathBuf {
    let to = dir.join(name);
    std::fs::copy(from, &to).unwrap();
    to
}

fn superblock(img: &[u8]) -> RawSuperblock {
    RawSuperblock::parse(&img[1024..2048]).unwrap()
}

/// The journal superblock: the first block of inode 8, found with debugfs.
fn journal_sb_block(img: &Path) -> u64 {
    let out = debugfs(img, "bmap <8> 0").unwrap();
    out.trim().parse().unwrap()
}

/// Asserts two replayed images agree: every block byte for byte except the
/// superblock block and the journal superblock, whose significant fields
/// are compared instead.
fn assert_same_replay(ours: &Path, theirs: &Path) {
    let (a, b) = (std::fs::read(ours).unwrap(), std::fs::read(theirs).unwrap());
    assert_eq!(a.len(), b.len());
    let bs = 1024usize << superblock(&a).s_log_block_size.get();
    let jsb = journal_sb_block(ours) as usize;
    let sb_block = 1024 / bs;
    let differing: Vec<usize> = (0..a.len() / bs)
        .filter(|&n| n != sb_block && n != jsb && a[n * bs..(n + 1) * bs] != b[n * bs..(n + 1) * bs])
        .collect();
    assert!(
        differing.is_empty(),
        "blocks differ from e2fsck's replay: {differing:?}"
    );
    let (sa, sb) = (superblock(&a), superblock(&b));
    assert_eq!(sa.s_feature_incompat.get(), sb.s_feature_incompat.get());
    assert_eq!(sa.s_feature_compat.get(), sb.s_feature_compat.get());
    assert_eq!(sa.s_feature_ro_compat.get(), sb.s_feature_ro_compat.get());
    assert_eq!(sa.s_state.get(), sb.s_state.get(), "s_state");
    assert_eq!(sa.s_free_blocks_count_lo.get(), sb.s_free_blocks_count_lo.get());
    assert_eq!(sa.s_free_inodes_count.get(), sb.s_free_inodes_count.get());
    assert_eq!(sa.s_last_orphan.get(), sb.s_last_orphan.get());
    let ja = RawJournalSuperblock::parse(&a[jsb * bs..]).unwrap();
    let jb = RawJournalSuperblock::parse(&b[jsb * bs..]).unwrap();
    assert_eq!(ja.s_start.get(), jb.s_start.get(), "s_start");
    assert_eq!(ja.s_sequence.get(), jb.s_sequence.get(), "s_sequence");
    assert_eq!(ja.s_errno.get(), jb.s_errno.get(), "s_errno");
    ja.verify_checksum().unwrap();
}

fn assert_files(fs: &Filesystem, expected: &Expected) {
    for (path, data) in expected {
        let ino = fs.resolve(path.as_bytes()).unwrap_or_else(|e| panic!("{path}: {e}"));
        let mut buf = vec![0u8; data.len() + 1];
        let n = fs.read_at(&ino, 0, &mut buf).unwrap();
        assert_eq!(&buf[..n], &data[..], "{path}");
    }
    assert!(fs.resolve(b"/d0").is_err() && fs.resolve(b"/d2/f3").is_err());
}

/// The workload on a fresh image made with `args`, replayed both ways.
/// Returns the engine's replay report.
fn replay_matches_e2fsck(args: &[&str], size: &str) -> Option<ext4kit_engine::journal::Recovered> {
    skip_unless(can_loop_mount())?;
    let dir = tempfile::tempdir().unwrap();
    let img = mkfs(dir.path(), None, args, size)?;
    let dirty = dir.path().join("dirty.img");
    let expected = make_dirty(&img, &dirty);
    let logdump = debugfs(&dirty, "logdump").unwrap();
    assert!(logdump.contains("Found expected sequence"), "{logdump}");
    assert!(
        logdump.contains("revoke table"),
        "the deletes should log revoke blocks: {logdump}"
    );
    let ours = copy(&dirty, dir.path(), "ours.img");
    let theirs = copy(&dirty, dir.path(), "theirs.img");
    let (code, text) = e2fsck_replay(&theirs);
    assert!(code <= 1, "e2fsck replay: {text}");
    let fs = open_rw(&ours, OpenOptions::default()).expect("replay");
    let rec = fs.journal_info().recovered.clone().expect("replayed");
    assert!(!fs.journal_info().needs_recovery);
    assert_files(&fs, &expected);
    fs.unmount().unwrap();
    assert_same_replay(&ours, &theirs);
    assert_fsck_clean(&ours).unwrap();
    // The image now opens with nothing to replay.
    let again = open_ro(&ours, OpenOptions::default()).unwrap();
    assert!(again.journal_info().recovered.is_none());
    eprintln!(
        "{args:?}: {rec:?}; revoke blocks in log: {}",
        logdump.matches("revoke table").count()
    );
    Some(rec)
}

#[test]
fn default_4k_csum_v3_replays_like_e2fsck() {
    if let Some(rec) = replay_matches_e2fsck(&["-b", "4096"], "64M") {
        assert!(rec.transactions >= 1 && rec.blocks_written > 0, "{rec:?}");
    }
}

#[test]
fn blocks_of_1k_replay_like_e2fsck() {
    if let Some(rec) = replay_matches_e2fsck(&["-b", "1024"], "32M") {
        assert!(rec.transactions >= 1 && rec.blocks_written > 0, "{rec:?}");
    }
}

#[test]
fn journal_without_checksums_replays_like_e2fsck() {
    if let Some(rec) = replay_matches_e2fsck(&["-b", "4096", "-O", "^metadata_csum,^64bit"], "64M") {
        assert!(rec.transactions >= 1 && rec.blocks_written > 0, "{rec:?}");
    }
}

/// `(sequence, block type, journal block)` of each block `debugfs logdump`
/// finds in the log, in log order.
fn log_blocks(img: &Path) -> Vec<(u32, u32, u64)> {
    let dump = debugfs(img, "logdump").unwrap();
    dump.lines()
        .filter_map(|l| {
            let rest = l.strip_prefix("Found expected sequence ")?;
            let (seq, rest) = rest.split_once(", type ")?;
            let (kind, rest) = rest.split_once(' ')?;
            let block = rest.rsplit_once("at block ")?.1;
            Some((seq.parse().ok()?, kind.parse().ok()?, block.trim().parse().ok()?))
        })
        .collect()
}

/// Flips the byte at `offset` of journal block `jblock`.
fn flip(img: &Path, jblock: u64, offset: usize) {
    use std::os::unix::fs::FileExt;
    let phys: u64 = debugfs(img, &format!("bmap <8> {jblock}"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let bs = 1024u64 << superblock(&std::fs::read(img).unwrap()).s_log_block_size.get();
    let f = std::fs::OpenOptions::new().read(true).write(true).open(img).unwrap();
    let at = phys * bs + offset as u64;
    let mut b = [0u8; 1];
    f.read_exact_at(&mut b, at).unwrap();
    f.write_all_at(&[b[0] ^ 0x5a], at).unwrap();
}

/// A kernel-dirty 4 KiB image with three or more transactions in its log.
fn dirty_fixture(dir: &Path) -> Option<PathBuf> {
    skip_unless(can_loop_mount())?;
    let img = mkfs(dir, None, &["-b", "4096"], "64M")?;
    let dirty = dir.join("dirty.img");
    make_dirty(&img, &dirty);
    let commits = log_blocks(&dirty).iter().filter(|b| b.1 == 2).count();
    assert!(commits >= 3, "{:?}", log_blocks(&dirty));
    Some(dirty)
}

#[test]
fn bad_commit_checksum_ends_the_replay_before_its_transaction_like_e2fsck() {
    let dir = tempfile::tempdir().unwrap();
    let Some(dirty) = dirty_fixture(dir.path()) else { return };
    let log = log_blocks(&dirty);
    let commits: Vec<_> = log.iter().filter(|b| b.1 == 2).collect();
    let (seq, _, jblock) = *commits[1];
    flip(&dirty, jblock, 0x100);
    let ours = copy(&dirty, dir.path(), "ours.img");
    let theirs = copy(&dirty, dir.path(), "theirs.img");
    let (code, text) = e2fsck_replay(&theirs);
    eprintln!("e2fsck ({code}): {text}");
    let fs = open_rw(&ours, OpenOptions::default()).expect("replay up to the bad commit");
    let rec = fs.journal_info().recovered.clone().unwrap();
    assert_eq!(rec.transactions, 1, "{rec:?}");
    assert_eq!(rec.failed_commit, Some(seq));
    drop(fs);
    assert_same_replay(&ours, &theirs);
}

/// A descriptor or data block whose checksum fails inside a committed
/// transaction: the engine refuses and writes nothing (e2fsck reports a
/// journal checksum error too).
fn refused_and_untouched(dirty: &Path, dir: &Path, jblock: u64) {
    let before = std::fs::read(dirty).unwrap();
    let theirs = copy(dirty, dir, "theirs.img");
    let (code, text) = e2fsck_replay(&theirs);
    assert!(text.contains("checksum error"), "e2fsck ({code}): {text}");
    match open_rw(dirty, OpenOptions::default()) {
        Err(Error::BadChecksum { at, .. }) => {
            assert_eq!(at, ext4kit_engine::Location::Journal { block: jblock });
        }
        other => panic!("expected a journal checksum error, got {other:?}"),
    }
    assert!(
        std::fs::read(dirty).unwrap() == before,
        "a refused replay must not write"
    );
    // The stale state stays readable on request.
    let stale = OpenOptions {
        dirty_journal: DirtyJournal::ReadStale,
        ..OpenOptions::default()
    };
    assert!(open_ro(dirty, stale).unwrap().journal_info().needs_recovery);
}

#[test]
fn bad_descriptor_checksum_is_refused_without_writing() {
    let dir = tempfile::tempdir().unwrap();
    let Some(dirty) = dirty_fixture(dir.path()) else { return };
    let log = log_blocks(&dirty);
    let (_, _, jblock) = *log.iter().filter(|b| b.1 == 1).nth(1).unwrap();
    // The last byte before the tail: an unused tag slot or padding, so
    // only the block checksum notices.
    flip(&dirty, jblock, 4096 - 5);
    refused_and_untouched(&dirty, dir.path(), jblock);
}

#[test]
fn bad_data_block_checksum_is_refused_without_writing() {
    let dir = tempfile::tempdir().unwrap();
    let Some(dirty) = dirty_fixture(dir.path()) else { return };
    let log = log_blocks(&dirty);
    // The first data block of the last transaction: nothing later revokes it.
    let (_, _, desc) = *log.iter().rfind(|b| b.1 == 1).unwrap();
    flip(&dirty, desc + 1, 100);
    refused_and_untouched(&dirty, dir.path(), desc + 1);
}

#[test]
fn random_byte_flips_in_the_log_never_panic() {
    use ext4kit_engine::device::MemDevice;
    let dir = tempfile::tempdir().unwrap();
    let Some(dirty) = dirty_fixture(dir.path()) else { return };
    let image = std::fs::read(&dirty).unwrap();
    let bs = 4096usize;
    let log = log_blocks(&dirty);
    let last = log.iter().map(|b| b.2).max().unwrap();
    let phys: Vec<usize> = (0..=last)
        .map(|j| {
            debugfs(&dirty, &format!("bmap <8> {j}"))
                .unwrap()
                .trim()
                .parse()
                .unwrap()
        })
        .collect();
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut rand = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let (mut ok, mut refused) = (0, 0);
    let mut kinds = std::collections::BTreeMap::new();
    for _ in 0..200 {
        let mut img = image.clone();
        for _ in 0..1 + rand() % 4 {
            let block = phys[(rand() as usize) % phys.len()];
            let at = block * bs + (rand() as usize) % bs;
            img[at] ^= 1 << (rand() % 8);
        }
        match Filesystem::open(Box::new(MemDevice::new(img)), OpenOptions::default()) {
            Ok(fs) => {
                ok += 1;
                assert!(!fs.journal_info().needs_recovery);
            }
            Err(e) => {
                refused += 1;
                assert!(
                    !matches!(e, Error::Io { .. }),
                    "the log must not send reads off the device: {e}"
                );
                *kinds
                    .entry(format!("{e}").split(" at ").next().unwrap_or("").to_owned())
                    .or_insert(0) += 1;
            }
        }
    }
    eprintln!("random flips: {ok} replayed, {refused} refused: {kinds:?}");
}

#[test]
fn read_only_device_replays_in_memory() {
    let dir = tempfile::tempdir().unwrap();
    skip_unless(can_loop_mount());
    let Some(img) = mkfs(dir.path(), None, &["-b", "4096"], "64M") else {
        return;
    };
    let dirty = dir.path().join("dirty.img");
    let expected = make_dirty(&img, &dirty);
    let before = std::fs::read(&dirty).unwrap();
    let fs = open_ro(&dirty, OpenOptions::default()).expect("in-memory replay");
    let rec = fs.journal_info().recovered.clone().unwrap();
    assert!(rec.in_memory && rec.transactions >= 3, "{rec:?}");
    assert!(!fs.journal_info().needs_recovery);
    assert_files(&fs, &expected);
    fs.unmount().unwrap();
    assert!(
        std::fs::read(&dirty).unwrap() == before,
        "a read-only replay must not write"
    );
    // Refuse still refuses.
    assert!(matches!(
        open_ro(
            &dirty,
            OpenOptions {
                dirty_journal: DirtyJournal::Refuse,
                ..OpenOptions::default()
            }
        ),
        Err(Error::NeedsRecovery)
    ));
    // The image itself replays the same way later.
    let fs = open_rw(&dirty, OpenOptions::default()).unwrap();
    assert_files(&fs, &expected);
    drop(fs);
    assert_fsck_clean(&dirty).unwrap();
}

/// A log that ends on the journal's last block: the walk wraps to
/// `s_first`, where the log's own first transaction is, and stops there
/// (jbd2 reads that block and stops at its sequence). Transactions of a
/// descriptor, one block and a commit fill a 1 MiB journal of 1 KiB blocks
/// (1023 usable blocks) exactly; e2fsck and we must replay all of them.
#[test]
fn a_log_that_fills_the_whole_journal_replays_like_e2fsck() {
    use ext4kit_format::features::IncompatFeatures;
    use ext4kit_format::journal::{commit, descriptor};

    let dir = tempfile::tempdir().unwrap();
    let Some(img) = mkfs(dir.path(), None, &["-b", "1024", "-J", "size=1"], "16M") else {
        return;
    };
    let bs = 1024usize;
    let j0 = journal_sb_block(&img);
    let mut bytes = std::fs::read(&img).unwrap();
    let mut jsb = RawJournalSuperblock::parse(&bytes[j0 as usize * bs..]).unwrap();
    let params = jsb.params().unwrap();
    let (first, end) = (jsb.s_first.get(), jsb.s_maxlen.get());
    let last = debugfs(&img, &format!("bmap <8> {}", end - 1)).unwrap();
    assert_eq!(
        last.trim().parse::<u64>().unwrap(),
        j0 + u64::from(end) - 1,
        "a fresh journal is contiguous"
    );
    assert_eq!((end - first) % 3, 0, "transactions of 3 blocks fill the log");
    // The home of every logged copy: the file system's last block, free.
    let home = superblock(&bytes).s_blocks_count_lo.get() as u64 - 1;
    assert!(debugfs(&img, &format!("testb {home}")).unwrap().contains("not in use"));

    let mut seq = jsb.s_sequence.get();
    let mut at = first;
    let mut data = vec![0u8; bs];
    while at < end {
        data.fill(seq as u8);
        let tag = descriptor::Tag {
            offset: 0,
            blocknr: home,
            flags: 0,
            checksum: descriptor::data_checksum(&params, seq, &data),
            uuid: Some(jsb.s_uuid),
        };
        let blocks = [
            descriptor::encode(&params, seq, &[tag]).unwrap(),
            data.clone(),
            commit::encode(&params, seq, 1_700_000_000, 0),
        ];
        for b in blocks {
            let off = (j0 + u64::from(at)) as usize * bs;
            bytes[off..off + bs].copy_from_slice(&b);
            at += 1;
        }
        seq += 1;
    }
    jsb.s_start.set(first);
    jsb.set_checksum();
    let off = j0 as usize * bs;
    bytes[off..off + jsb.encode().len()].copy_from_slice(&jsb.encode());
    let mut sb = superblock(&bytes);
    sb.s_feature_incompat
        .set(sb.s_feature_incompat.get() | IncompatFeatures::RECOVER.0);
    sb.set_checksum();
    bytes[1024..2048].copy_from_slice(&sb.encode());
    let dirty = dir.path().join("dirty.img");
    std::fs::write(&dirty, &bytes).unwrap();
    let dump = debugfs(&dirty, "logdump").unwrap();
    assert!(dump.contains(&format!("at block {}", end - 1)), "{dump}");

    let ours = copy(&dirty, dir.path(), "ours.img");
    let theirs = copy(&dirty, dir.path(), "theirs.img");
    let (code, text) = e2fsck_replay(&theirs);
    assert!(code <= 1, "e2fsck replay: {text}");
    let fs = open_rw(&ours, OpenOptions::default()).expect("a full log replays");
    let rec = fs.journal_info().recovered.clone().expect("replayed");
    fs.unmount().unwrap();
    assert_same_replay(&ours, &theirs);
    assert_fsck_clean(&ours).unwrap();
    let replayed = std::fs::read(&ours).unwrap();
    let got = &replayed[home as usize * bs..(home as usize + 1) * bs];
    assert!(
        got.iter().all(|&b| b == (seq - 1) as u8),
        "the last transaction's copy is home"
    );
    eprintln!("{} transactions: {rec:?}", (end - first) / 3);
}
