//! Multi-mount protection against the kernel and e2fsprogs: images made by
//! `mke2fs -O mmp -E mmp_update_interval=1`, opened for writing through the
//! engine with `mmp_min_check_interval = 1` (so a claim waits 3 s where the
//! block allows it; the kernel's blocks say 5 s, which means 11 s).
//!
//! - the kernel holds the image: a writable open is refused, naming the
//!   kernel's node and loop device;
//! - ext4kit holds it: the kernel's mount is refused; after a clean close
//!   the block says clean (`debugfs dump_mmp`) and the kernel mounts it;
//! - a holder that died without cleaning up is taken over after the wait;
//! - e2fsck running, or an unknown sequence, is refused at once, and
//!   e2fsck refuses an image ext4kit holds;
//! - another writer appearing while ext4kit holds the block turns the file
//!   system read-only and records the error;
//! - a corrupt MMP block is an error naming it, never a panic.
//!
//! Every test ends with `e2fsck -fn`.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use ext4kit_engine::device::{BlockDevice, FileDevice};
use ext4kit_engine::{Attr, Error, Filesystem, NodeKind, OpenOptions, ROOT_INO};
use ext4kit_format::mmp::{EXT4_MMP_SEQ_CLEAN, EXT4_MMP_SEQ_FSCK, RawMmp};
use ext4kit_format::superblock::{RawSuperblock, STATE_ERROR};
use ext4kit_testkit::mount::{LoopMount, can_loop_mount};
use ext4kit_testkit::tools::{self, assert_fsck_clean, require_tools, skip_unless};

const ATTR: Attr = Attr {
    perm: 0o644,
    uid: 0,
    gid: 0,
};

/// `mke2fs -O mmp` with a 1 s update interval; `None` after SKIPPED.
fn image(dir: &Path, extra: &[&str]) -> Option<PathBuf> {
    skip_unless(require_tools(&["mke2fs", "e2fsck", "debugfs"]))?;
    let img = dir.join("mmp.img");
    let mut args = vec!["-q", "-F", "-t", "ext4", "-O", "mmp", "-E", "mmp_update_interval=1"];
    args.extend_from_slice(extra);
    let img_s = img.to_str().unwrap();
    args.extend_from_slice(&[img_s, "32M"]);
    tools::run_ok("mke2fs", &args).expect("mke2fs -O mmp");
    Some(img)
}

fn opts() -> OpenOptions {
    OpenOptions {
        mmp_min_check_interval: 1,
        ..OpenOptions::default()
    }
}

fn superblock(img: &Path) -> RawSuperblock {
    let mut buf = [0u8; 1024];
    File::open(img).unwrap().read_exact_at(&mut buf, 1024).unwrap();
    RawSuperblock::parse(&buf).unwrap()
}

/// Byte offset of the MMP block.
fn mmp_offset(img: &Path) -> u64 {
    let sb = superblock(img);
    sb.s_mmp_block.get() << (10 + sb.s_log_block_size.get())
}

fn read_mmp(img: &Path) -> RawMmp {
    let mut buf = [0u8; 1024];
    File::open(img)
        .unwrap()
        .read_exact_at(&mut buf, mmp_offset(img))
        .unwrap();
    RawMmp::parse(&buf).unwrap()
}

/// Writes `rec` as the MMP block, with a valid checksum.
fn write_mmp(img: &Path, mut rec: RawMmp) {
    rec.set_checksum(superblock(img).csum_seed());
    let f = std::fs::OpenOptions::new().write(true).open(img).unwrap();
    f.write_all_at(&rec.encode(), mmp_offset(img)).unwrap();
    f.sync_data().unwrap();
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .unwrap()
        .trim()
        .to_string()
}

/// The image as another host on shared storage sees it: plain positioned
/// I/O, none of this host's checks for local users (image lock, mount
/// table), so only multi-mount protection stands between the two.
struct OtherHost {
    file: File,
    len: u64,
}

impl OtherHost {
    fn open(img: &Path) -> Box<dyn BlockDevice> {
        let file = std::fs::OpenOptions::new().read(true).write(true).open(img).unwrap();
        let len = file.metadata().unwrap().len();
        Box::new(Self { file, len })
    }
}

impl BlockDevice for OtherHost {
    fn len(&self) -> u64 {
        self.len
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<()> {
        self.file.read_exact_at(buf, offset)
    }
    fn write_at(&self, offset: u64, buf: &[u8]) -> io::Result<()> {
        self.file.write_all_at(buf, offset)
    }
    fn flush(&self) -> io::Result<()> {
        self.file.sync_data()
    }
    fn read_only(&self) -> bool {
        false
    }
    fn name(&self) -> String {
        "other-host-disk".into()
    }
}

fn dump_mmp(img: &Path) -> String {
    tools::debugfs(img, "dump_mmp").expect("debugfs dump_mmp")
}

/// Polls `cond` every 100 ms for up to `limit` (generous: this is not a
/// timing assertion, only a bound on a hang).
fn eventually(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + limit;
    while Instant::now() < end {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    cond()
}

#[test]
fn the_kernel_holds_the_image_and_a_writable_open_is_refused() {
    let Some(()) = skip_unless(can_loop_mount()) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let Some(img) = image(dir.path(), &[]) else { return };
    let mnt = LoopMount::rw(&img, &[]).expect("the kernel mounts the MMP image");
    std::fs::write(mnt.path().join("kernel.txt"), b"written by the kernel\n").unwrap();
    let loop_dev = read_mmp(&img).bdevname();
    assert!(
        loop_dev.starts_with("loop"),
        "the kernel names its loop device: {loop_dev:?}"
    );

    let err = Filesystem::open(OtherHost::open(&img), opts()).expect_err("the kernel holds the image");
    let msg = err.to_string();
    assert!(matches!(err, Error::InUseElsewhere(_)), "{err:?}");
    assert_eq!(err.errno(), libc::EBUSY);
    assert!(msg.contains(&format!("host {}", hostname())), "{msg}");
    assert!(msg.contains(&format!("device {loop_dev}")), "{msg}");
    // Reading stays possible and says who holds it.
    let ro = Filesystem::open(Box::new(FileDevice::open(&img, false).unwrap()), opts()).unwrap();
    let st = ro.mmp_status().expect("mmp image");
    assert!(!st.held);
    assert_eq!(st.record.unwrap().bdevname(), loop_dev);
    drop(ro);

    mnt.unmount().unwrap();
    assert_eq!(read_mmp(&img).mmp_seq.get(), EXT4_MMP_SEQ_CLEAN);
    assert_fsck_clean(&img).unwrap();
}

#[test]
fn ext4kit_holds_the_image_and_the_kernel_mount_is_refused() {
    let Some(()) = skip_unless(can_loop_mount()) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let Some(img) = image(dir.path(), &[]) else { return };
    let dev = FileDevice::open(&img, true).unwrap();
    let fs = Filesystem::open(Box::new(dev), opts()).unwrap();
    let st = fs.mmp_status().unwrap();
    assert!(st.held && st.problem.is_none(), "{st:?}");
    let f = fs.create(ROOT_INO, b"held.txt", NodeKind::Regular, ATTR).unwrap();
    fs.write(f.ino, 0, b"written while holding the MMP block\n").unwrap();
    fs.sync().unwrap();

    // The record on disk is ours and alive.
    let first = read_mmp(&img);
    assert_eq!(first.nodename(), hostname());
    assert_eq!(
        first.bdevname(),
        img.to_str().unwrap().chars().take(32).collect::<String>()
    );
    assert!(
        eventually(Duration::from_secs(30), || read_mmp(&img).mmp_seq != first.mmp_seq),
        "the MMP block is updated while held"
    );

    let refused = LoopMount::rw(&img, &[]);
    assert!(refused.is_err(), "the kernel mounted an image ext4kit holds");
    let log = tools::run("dmesg", &["--notime"]).map(|o| o.stdout).unwrap_or_default();
    let tail: Vec<&str> = log.lines().rev().take(40).collect();
    if !log.is_empty() {
        assert!(
            tail.iter().any(|l| l.contains("already active on another node")),
            "kernel log: {tail:#?}"
        );
    }
    assert!(fs.read_only_reason().is_none(), "the kernel's attempt wrote nothing");

    fs.unmount().unwrap();
    let rec = read_mmp(&img);
    assert_eq!(rec.mmp_seq.get(), EXT4_MMP_SEQ_CLEAN);
    let dump = dump_mmp(&img);
    assert!(dump.contains("sequence: ff4d4d50"), "{dump}");
    assert!(dump.contains(&format!("node_name: {}", hostname())), "{dump}");
    assert_fsck_clean(&img).unwrap();

    // Clean again: the kernel takes it and sees the file.
    let mnt = LoopMount::rw(&img, &[]).expect("the kernel mounts after a clean close");
    assert_eq!(
        std::fs::read(mnt.path().join("held.txt")).unwrap(),
        b"written while holding the MMP block\n"
    );
    mnt.unmount().unwrap();
    assert_fsck_clean(&img).unwrap();
}

#[test]
fn a_clean_close_leaves_the_block_clean() {
    let dir = tempfile::tempdir().unwrap();
    let Some(img) = image(dir.path(), &[]) else { return };
    let fs = Filesystem::open(OtherHost::open(&img), opts()).unwrap();
    let rec = fs.mmp_status().unwrap().record.unwrap();
    assert_eq!(rec.bdevname(), "other-host-disk");
    let seq = rec.mmp_seq.get();
    assert!(seq != EXT4_MMP_SEQ_CLEAN && seq != EXT4_MMP_SEQ_FSCK, "{seq:#x}");
    fs.create(ROOT_INO, b"d", NodeKind::Directory, Attr { perm: 0o755, ..ATTR })
        .unwrap();
    // e2fsck that would repair the image waits and backs off, as it does
    // for a kernel holder.
    let fsck = tools::run("e2fsck", &[Path::new("-fy"), &img]).unwrap();
    assert_eq!(
        fsck.code,
        Some(8),
        "e2fsck -fy ran on a held image: {}",
        fsck.combined()
    );
    assert!(fsck.combined().contains("MMP"), "{}", fsck.combined());
    assert!(fs.read_only_reason().is_none());
    drop(fs);
    let after = read_mmp(&img);
    assert_eq!(after.mmp_seq.get(), EXT4_MMP_SEQ_CLEAN);
    assert_eq!(after.bdevname(), "other-host-disk");
    let dump = dump_mmp(&img);
    assert!(dump.contains("device_name: other-host-disk"), "{dump}");
    let dumpe2fs = tools::run_ok("dumpe2fs", &[&img]).unwrap().stdout;
    assert!(dumpe2fs.contains("mmp_sequence: 0xff4d4d50"), "{dumpe2fs}");
    assert_fsck_clean(&img).unwrap();
}

#[test]
fn a_dead_holder_is_taken_over_after_the_wait() {
    let dir = tempfile::tempdir().unwrap();
    let Some(img) = image(dir.path(), &[]) else { return };
    // What a holder killed without cleaning up leaves: a live-looking
    // sequence that never changes again.
    let mut dead = read_mmp(&img);
    dead.mmp_seq.set(0x1234);
    dead.set_nodename(b"deadhost");
    dead.set_bdevname(b"sdz");
    dead.mmp_check_interval.set(1);
    write_mmp(&img, dead);

    let fs = Filesystem::open(OtherHost::open(&img), opts()).expect("a dead holder is taken over");
    let rec = read_mmp(&img);
    assert_eq!(rec.nodename(), hostname());
    assert_ne!(rec.mmp_seq.get(), 0x1234);
    fs.create(ROOT_INO, b"after-takeover", NodeKind::Regular, ATTR).unwrap();
    fs.unmount().unwrap();
    assert_eq!(read_mmp(&img).mmp_seq.get(), EXT4_MMP_SEQ_CLEAN);
    assert_fsck_clean(&img).unwrap();
    if skip_unless(can_loop_mount()).is_some() {
        let mnt = LoopMount::rw(&img, &[]).expect("the kernel mounts after the takeover");
        assert!(mnt.path().join("after-takeover").exists());
        mnt.unmount().unwrap();
        assert_fsck_clean(&img).unwrap();
    }
}

#[test]
fn e2fsck_running_or_an_unknown_sequence_is_refused_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let Some(img) = image(dir.path(), &[]) else { return };
    let clean = read_mmp(&img);
    for (seq, says) in [(EXT4_MMP_SEQ_FSCK, "e2fsck"), (0xF000_0000, "clear_mmp")] {
        let mut rec = clean;
        rec.mmp_seq.set(seq);
        rec.set_nodename(b"checker");
        write_mmp(&img, rec);
        let start = Instant::now();
        let err = Filesystem::open(OtherHost::open(&img), opts()).unwrap_err();
        assert!(matches!(err, Error::InUseElsewhere(_)), "{err:?}");
        assert!(err.to_string().contains(says), "{err}");
        assert!(start.elapsed() < Duration::from_secs(3), "refused without waiting");
        assert_eq!(read_mmp(&img).mmp_seq.get(), seq, "the refused open wrote nothing");
        // Reading is not refused.
        let ro = Filesystem::open(Box::new(FileDevice::open(&img, false).unwrap()), opts()).unwrap();
        assert_eq!(ro.mmp_status().unwrap().record.unwrap().mmp_seq.get(), seq);
    }
    write_mmp(&img, clean);
    assert_fsck_clean(&img).unwrap();
}

#[test]
fn another_writer_while_held_turns_the_file_system_read_only() {
    let dir = tempfile::tempdir().unwrap();
    let Some(img) = image(dir.path(), &[]) else { return };
    let fs = Filesystem::open(OtherHost::open(&img), opts()).unwrap();
    fs.create(ROOT_INO, b"before", NodeKind::Regular, ATTR).unwrap();
    fs.sync().unwrap();
    let mut intruder = read_mmp(&img);
    intruder.mmp_seq.set(42);
    intruder.set_nodename(b"intruder");
    intruder.set_bdevname(b"sdq");
    write_mmp(&img, intruder);

    assert!(
        eventually(Duration::from_secs(30), || fs.read_only_reason().is_some()),
        "the MMP thread notices the other writer"
    );
    let why = fs.read_only_reason().unwrap().to_string();
    assert!(why.contains("host intruder, device sdq"), "{why}");
    assert!(matches!(
        fs.create(ROOT_INO, b"after", NodeKind::Regular, ATTR),
        Err(Error::ReadOnly)
    ));
    let st = fs.mmp_status().unwrap();
    assert!(!st.held && st.problem.is_some(), "{st:?}");
    fs.unmount()
        .expect_err("the unmount cannot finish: nothing more is written");

    // The intruder's record is left alone; the error is in the superblock.
    assert_eq!(read_mmp(&img).nodename(), "intruder");
    let sb = superblock(&img);
    assert_ne!(sb.s_state.get() & STATE_ERROR, 0);
    assert_eq!(sb.s_error_count.get(), 1);
    assert_eq!(&sb.s_first_error_func[..6], b"kmmpd\0");
    sb.verify_checksum().unwrap();
    // Once the other holder is gone, the next user's e2fsck replays the
    // journal and finds only the recorded error to clear: what was synced
    // before the loss is there.
    write_mmp(&img, {
        let mut r = intruder;
        r.mmp_seq.set(EXT4_MMP_SEQ_CLEAN);
        r
    });
    let fix = tools::run("e2fsck", &[Path::new("-fy"), &img]).unwrap();
    assert!(fix.code.is_some_and(|c| c <= 1), "e2fsck -fy: {}", fix.combined());
    assert!(!fix.combined().contains("Fix? yes"), "{}", fix.combined());
    assert!(tools::debugfs(&img, "stat /before").unwrap().contains("Inode:"));
    assert_fsck_clean(&img).unwrap();
}

#[test]
fn a_corrupt_mmp_block_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let Some(img) = image(dir.path(), &[]) else { return };
    let block = superblock(&img).s_mmp_block.get();
    let good = read_mmp(&img);

    let mut bad_magic = good;
    bad_magic.mmp_magic.set(0xdead_beef);
    write_mmp(&img, bad_magic);
    let err = Filesystem::open(OtherHost::open(&img), opts()).unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, Error::Corrupt(_)), "{err:?}");
    assert!(
        msg.contains(&format!("block {block}")) && msg.contains("mmp_magic"),
        "{msg}"
    );
    let ro = Filesystem::open(Box::new(FileDevice::open(&img, false).unwrap()), opts()).unwrap();
    let problem = ro.mmp_status().unwrap().problem.unwrap();
    assert!(problem.contains("mmp_magic"), "{problem}");
    drop(ro);

    write_mmp(&img, good);
    let f = std::fs::OpenOptions::new().write(true).open(&img).unwrap();
    f.write_all_at(&[0xff], mmp_offset(&img) + 200).unwrap();
    let err = Filesystem::open(OtherHost::open(&img), opts()).unwrap_err();
    assert!(matches!(err, Error::BadChecksum { .. }), "{err:?}");
    assert!(err.to_string().contains(&format!("block {block}")), "{err}");
    assert!(err.to_string().contains("mmp_checksum"), "{err}");

    // s_mmp_block outside the file system.
    write_mmp(&img, good);
    let mut sb = superblock(&img);
    sb.s_mmp_block.set(1 << 40);
    sb.set_checksum();
    f.write_all_at(&sb.encode(), 1024).unwrap();
    let err = Filesystem::open(OtherHost::open(&img), opts()).unwrap_err();
    assert!(err.to_string().contains("s_mmp_block"), "{err}");
    sb.s_mmp_block.set(block);
    sb.set_checksum();
    f.write_all_at(&sb.encode(), 1024).unwrap();
    drop(f);

    // Nothing the refused opens did changed the image.
    assert_eq!(read_mmp(&img), good);
    assert_fsck_clean(&img).unwrap();
}
