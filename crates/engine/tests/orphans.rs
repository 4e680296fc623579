//! Open files and the orphan list against the oracles: a file unlinked
//! while open stays readable and writable by inode number and is freed by
//! the last release; a crash with open orphans leaves a list that e2fsck
//! reports and that both the kernel and our writable open clean up; a list
//! the kernel left is cleaned up by us. Both forms of the list: the classic
//! `s_last_orphan` chain and the `orphan_file`. The superblock says `not
//! clean` while a session has written and `clean` after it.

mod common;

use std::path::{Path, PathBuf};

use common::{mkfs, run};
use ext4kit_engine::device::FileDevice;
use ext4kit_engine::{Attr, Error, Filesystem, NodeKind, OpenOptions, ROOT_INO, RenameFlags};
use ext4kit_testkit::mount::{LoopMount, can_loop_mount};
use ext4kit_testkit::tools::{e2fsck_fn, require_tool};

const ATTR: Attr = Attr {
    perm: 0o644,
    uid: 0,
    gid: 0,
};

/// The variants: (name, mkfs.ext4 arguments).
const VARIANTS: [(&str, &[&str]); 3] = [
    ("chain, journal", &[]),
    ("chain, no journal", &["-O", "^has_journal"]),
    ("orphan_file", &["-O", "orphan_file"]),
];

/// Opens `img` for writing in place, past the journal: these tests look
/// at the orphan list a crash leaves on the device, which with the journal
/// would sit in the log until replay (journal_write.rs covers that path).
/// Without the image lock: the crashes here leak an open file system
/// (`mem::forget`), whose lock a dead process would have lost.
fn open_rw(img: &Path) -> Filesystem {
    let dev = FileDevice::open_unlocked(img, true).expect("open rw");
    let opts = OpenOptions {
        use_journal: false,
        ..OpenOptions::default()
    };
    Filesystem::open(Box::new(dev), opts).expect("open fs")
}

fn open_ro(img: &Path) -> Filesystem {
    common::open(img, OpenOptions::default()).expect("open ro")
}

fn data(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(7).wrapping_add(seed)).collect()
}

/// (free blocks, free inodes) per the superblock.
fn free_counts(fs: &Filesystem) -> (u64, u32) {
    let sb = fs.superblock();
    let blocks = u64::from(sb.s_free_blocks_count_lo.get()) | (u64::from(sb.s_free_blocks_count_hi.get()) << 32);
    (blocks, sb.s_free_inodes_count.get())
}

/// A line of `dumpe2fs -h` (the value after `key:`), trimmed.
fn dumpe2fs_field(img: &Path, key: &str) -> Option<String> {
    let out = run("dumpe2fs", &["-h", img.to_str().unwrap()]);
    out.lines()
        .find_map(|l| l.strip_prefix(key).and_then(|r| r.strip_prefix(':')))
        .map(|v| v.trim().to_string())
}

fn assert_clean(img: &Path, what: &str) {
    let r = e2fsck_fn(img).unwrap();
    assert!(r.is_clean(), "{what}: e2fsck -fn exited {}:\n{}", r.code, r.output);
}

/// The inode numbers on the orphan list as `debugfs` sees it: the chain
/// from `s_last_orphan` (`First orphan inode`) is enough for our checks;
/// the orphan file is read through the engine in the tests that need it.
fn first_orphan(img: &Path) -> u32 {
    dumpe2fs_field(img, "First orphan inode").map_or(0, |v| v.parse().unwrap())
}

fn new_image(dir: &Path, args: &[&str]) -> Option<PathBuf> {
    mkfs(dir, None, args, "32M")
}

#[test]
fn unlink_while_open_keeps_the_body_until_release() {
    for (name, args) in VARIANTS {
        let dir = tempfile::tempdir().unwrap();
        let Some(img) = new_image(dir.path(), args) else { return };
        let fs = open_rw(&img);
        let before = free_counts(&fs);
        let f = fs.create(ROOT_INO, b"f", NodeKind::Regular, ATTR).unwrap();
        let body = data(300 << 10, 1);
        fs.write(f.ino, 0, &body).unwrap();
        fs.open_file(f.ino).unwrap();
        fs.open_file(f.ino).unwrap();
        fs.unlink(ROOT_INO, b"f").unwrap();
        assert!(matches!(fs.resolve(b"/f"), Err(Error::NotFound(_))), "{name}");
        let inode = fs.inode(f.ino).unwrap();
        assert_eq!(inode.raw.links(), 0, "{name}");
        assert_eq!(fs.read_all(&inode, 1 << 20).unwrap(), body, "{name}: read by number");
        fs.write(f.ino, body.len() as u64, b"tail").unwrap();
        let mut want = body.clone();
        want.extend_from_slice(b"tail");
        assert_eq!(fs.read_all(&fs.inode(f.ino).unwrap(), 1 << 20).unwrap(), want, "{name}");
        let on_list = if name == "orphan_file" { 0 } else { f.ino };
        assert_eq!(fs.superblock().s_last_orphan.get(), on_list, "{name}");
        fs.sync().unwrap();
        assert_eq!(dumpe2fs_field(&img, "Filesystem state").unwrap(), "not clean", "{name}");
        fs.release_file(f.ino).unwrap();
        assert_eq!(fs.inode(f.ino).unwrap().raw.links(), 0, "{name}: still open once");
        assert_ne!(free_counts(&fs), before, "{name}: not freed while open");
        fs.release_file(f.ino).unwrap();
        assert_eq!(free_counts(&fs), before, "{name}: blocks and inode come back");
        assert_eq!(fs.superblock().s_last_orphan.get(), 0, "{name}");
        assert!(matches!(fs.open_file(f.ino), Err(Error::NotFound(_))), "{name}");
        assert!(
            matches!(fs.release_file(f.ino), Err(Error::InvalidArgument(_))),
            "{name}"
        );
        fs.unmount().unwrap();
        assert_eq!(dumpe2fs_field(&img, "Filesystem state").unwrap(), "clean", "{name}");
        assert!(
            !dumpe2fs_field(&img, "Filesystem features")
                .unwrap()
                .contains("orphan_present"),
            "{name}"
        );
        assert_clean(&img, name);
    }
}

#[test]
fn rmdir_and_rename_over_open_inodes_orphan_them() {
    for (name, args) in VARIANTS {
        let dir = tempfile::tempdir().unwrap();
        let Some(img) = new_image(dir.path(), args) else { return };
        let fs = open_rw(&img);
        let before = free_counts(&fs);
        let d = fs.create(ROOT_INO, b"d", NodeKind::Directory, ATTR).unwrap();
        let victim = fs.create(ROOT_INO, b"victim", NodeKind::Regular, ATTR).unwrap();
        fs.write(victim.ino, 0, &data(20_000, 2)).unwrap();
        let new = fs.create(ROOT_INO, b"new", NodeKind::Regular, ATTR).unwrap();
        fs.write(new.ino, 0, b"replacement").unwrap();
        let other = fs.create(ROOT_INO, b"other", NodeKind::Regular, ATTR).unwrap();
        fs.write(other.ino, 0, &data(9000, 3)).unwrap();
        for ino in [d.ino, victim.ino, other.ino] {
            fs.open_file(ino).unwrap();
        }
        fs.rmdir(ROOT_INO, b"d").unwrap();
        fs.rename(ROOT_INO, b"new", ROOT_INO, b"victim", RenameFlags::default())
            .unwrap();
        fs.unlink(ROOT_INO, b"other").unwrap();
        assert_eq!(
            fs.read_all(&fs.inode(victim.ino).unwrap(), 1 << 20).unwrap(),
            data(20_000, 2)
        );
        assert_eq!(
            fs.read_all(&fs.resolve(b"/victim").unwrap(), 100).unwrap(),
            b"replacement"
        );
        // Three orphans: the chain links them through i_dtime.
        if name != "orphan_file" {
            assert_eq!(fs.superblock().s_last_orphan.get(), other.ino, "{name}");
            assert_eq!(fs.inode(other.ino).unwrap().raw.i_dtime.get(), victim.ino, "{name}");
        }
        // Release out of list order: the middle one first.
        for ino in [victim.ino, d.ino, other.ino] {
            fs.release_file(ino).unwrap();
        }
        assert_eq!(fs.superblock().s_last_orphan.get(), 0, "{name}");
        fs.unlink(ROOT_INO, b"victim").unwrap();
        assert_eq!(free_counts(&fs), before, "{name}");
        drop(fs);
        assert_clean(&img, name);
    }
}

/// Leaves `img` as a crash would: two files unlinked while open, every
/// committed change on disk, nothing of the session's end.
fn crash_with_orphans(img: &Path) -> (Vec<u32>, (u64, u32)) {
    let fs = open_rw(img);
    let keep = fs.create(ROOT_INO, b"keep", NodeKind::Regular, ATTR).unwrap();
    fs.write(keep.ino, 0, b"still here").unwrap();
    fs.sync().unwrap();
    let after_keep = free_counts(&fs);
    let mut inos = Vec::new();
    for (i, name) in [&b"a"[..], b"b"].iter().enumerate() {
        let f = fs.create(ROOT_INO, name, NodeKind::Regular, ATTR).unwrap();
        fs.write(f.ino, 0, &data(64 << 10, i as u8)).unwrap();
        fs.open_file(f.ino).unwrap();
        fs.unlink(ROOT_INO, name).unwrap();
        inos.push(f.ino);
    }
    assert_ne!(free_counts(&fs), after_keep);
    fs.sync().unwrap();
    // A crash: no release, no unmount (the device writes are already in the file).
    std::mem::forget(fs);
    (inos, after_keep)
}

#[test]
fn crash_with_open_orphans_is_cleaned_by_our_open_and_by_the_kernel() {
    for (name, args) in VARIANTS {
        let dir = tempfile::tempdir().unwrap();
        let Some(img) = new_image(dir.path(), args) else { return };
        let (inos, want_free) = crash_with_orphans(&img);
        assert_eq!(dumpe2fs_field(&img, "Filesystem state").unwrap(), "not clean", "{name}");
        // e2fsck -n does not process orphans: it reports them exactly as it
        // does for a kernel image holding the same list.
        let r = e2fsck_fn(&img).unwrap();
        assert_eq!(r.code, 4, "{name}: {}", r.output);
        let zero_dtime = format!("Deleted inode {} has zero dtime", inos[0]);
        assert!(r.output.contains(&zero_dtime), "{name}: {}", r.output);
        if name == "orphan_file" {
            assert!(
                r.output.contains("Orphan file (inode 12) block 0 is not clean"),
                "{}",
                r.output
            );
        } else {
            let head = format!("Inode {} was part of the orphaned inode list", inos[1]);
            assert!(r.output.contains(&head), "{name}: {}", r.output);
        }
        if name == "orphan_file" {
            assert_eq!(first_orphan(&img), 0, "{name}");
            assert!(
                dumpe2fs_field(&img, "Filesystem features")
                    .unwrap()
                    .contains("orphan_present")
            );
        } else {
            assert_eq!(first_orphan(&img), inos[1], "{name}");
        }
        let kernel_copy = dir.path().join("kernel.img");
        std::fs::copy(&img, &kernel_copy).unwrap();

        // A read-only open reads normally and leaves the list alone.
        let bytes = std::fs::read(&img).unwrap();
        let fs = open_ro(&img);
        assert_eq!(fs.read_all(&fs.resolve(b"/keep").unwrap(), 100).unwrap(), b"still here");
        assert_eq!(fs.inode(inos[0]).unwrap().raw.links(), 0);
        drop(fs);
        assert!(std::fs::read(&img).unwrap() == bytes, "{name}: read-only open wrote");

        // Our writable open finishes the orphans.
        let fs = open_rw(&img);
        assert_eq!(free_counts(&fs), want_free, "{name}");
        assert_eq!(fs.superblock().s_last_orphan.get(), 0, "{name}");
        drop(fs);
        assert_clean(&img, &format!("{name}, after our open"));
        assert!(
            !dumpe2fs_field(&img, "Filesystem features")
                .unwrap()
                .contains("orphan_present")
        );

        // The kernel does the same on its own copy.
        if let Err(why) = can_loop_mount() {
            ext4kit_testkit::skipped!("kernel half: {why}");
            continue;
        }
        let m = LoopMount::rw(&kernel_copy, &[]).unwrap();
        assert_eq!(std::fs::read(m.path().join("keep")).unwrap(), b"still here");
        m.unmount().unwrap();
        assert_clean(&kernel_copy, &format!("{name}, after the kernel's mount"));
        let fs = open_ro(&kernel_copy);
        assert_eq!(free_counts(&fs), want_free, "{name}: kernel freed the same");
    }
}

/// An image the kernel left with an orphan: a file unlinked while held
/// open, frozen (journal checkpointed, list on disk) and copied.
fn kernel_orphan_image(dir: &Path, args: &[&str]) -> Option<PathBuf> {
    if let Err(why) = can_loop_mount().and(require_tool("fsfreeze").map(|_| ())) {
        ext4kit_testkit::skipped!("{why}");
        return None;
    }
    let img = new_image(dir, args)?;
    let copy = dir.join("orphaned.img");
    let m = LoopMount::rw(&img, &[]).unwrap();
    let path = m.path().join("held");
    std::fs::write(&path, data(200 << 10, 9)).unwrap();
    std::fs::write(m.path().join("kept"), b"kept").unwrap();
    let held = std::fs::File::open(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    let mp = m.path().to_str().unwrap().to_string();
    run("sync", &[]);
    run("fsfreeze", &["-f", &mp]);
    let copied = std::fs::copy(&img, &copy);
    run("fsfreeze", &["-u", &mp]);
    copied.unwrap();
    drop(held);
    m.unmount().unwrap();
    Some(copy)
}

#[test]
fn kernel_made_orphans_are_read_and_cleaned_by_us() {
    for (name, args) in [VARIANTS[0], VARIANTS[2]] {
        let dir = tempfile::tempdir().unwrap();
        let Some(img) = kernel_orphan_image(dir.path(), args) else {
            return;
        };
        assert_ne!(e2fsck_fn(&img).unwrap().code, 0, "{name}: the copy holds an orphan");
        let held_ino;
        {
            let fs = open_ro(&img);
            assert_eq!(fs.read_all(&fs.resolve(b"/kept").unwrap(), 10).unwrap(), b"kept");
            assert!(matches!(fs.resolve(b"/held"), Err(Error::NotFound(_))));
            held_ino = if name == "orphan_file" {
                0
            } else {
                fs.superblock().s_last_orphan.get()
            };
        }
        if held_ino != 0 {
            let fs = open_ro(&img);
            assert_eq!(fs.inode(held_ino).unwrap().raw.links(), 0, "{name}");
        }
        let fs = open_rw(&img);
        assert_eq!(fs.superblock().s_last_orphan.get(), 0, "{name}");
        fs.unmount().unwrap();
        assert_clean(&img, name);
        let m = LoopMount::ro(&img).unwrap();
        assert_eq!(std::fs::read(m.path().join("kept")).unwrap(), b"kept");
        assert!(!m.path().join("held").exists());
    }
}

#[test]
fn superblock_state_follows_the_session() {
    let dir = tempfile::tempdir().unwrap();
    let Some(img) = new_image(dir.path(), &["-O", "^has_journal"]) else {
        return;
    };
    let count = |img: &Path| dumpe2fs_field(img, "Mount count").unwrap();
    let mounts = count(&img);
    // A session without writes changes nothing.
    let bytes = std::fs::read(&img).unwrap();
    open_rw(&img).unmount().unwrap();
    assert!(std::fs::read(&img).unwrap() == bytes, "a read-only session wrote");
    let fs = open_rw(&img);
    let f = fs.create(ROOT_INO, b"x", NodeKind::Regular, ATTR).unwrap();
    fs.sync().unwrap();
    assert_eq!(dumpe2fs_field(&img, "Filesystem state").unwrap(), "not clean");
    let after: u32 = count(&img).parse().unwrap();
    assert_eq!(
        after,
        mounts.parse::<u32>().unwrap() + 1,
        "s_mnt_count counts the session once"
    );
    fs.write(f.ino, 0, b"more").unwrap();
    fs.sync().unwrap();
    assert_eq!(count(&img).parse::<u32>().unwrap(), after);
    fs.unmount().unwrap();
    // Building an image is no mount: the count stays, the state still flips.
    let opts = OpenOptions {
        count_mount: false,
        ..OpenOptions::default()
    };
    let fs = Filesystem::open(Box::new(FileDevice::open(&img, true).unwrap()), opts).unwrap();
    fs.create(ROOT_INO, b"y", NodeKind::Regular, ATTR).unwrap();
    fs.sync().unwrap();
    assert_eq!(dumpe2fs_field(&img, "Filesystem state").unwrap(), "not clean");
    assert_eq!(count(&img).parse::<u32>().unwrap(), after);
    fs.unmount().unwrap();
    let fs = open_rw(&img);
    // unmount frees what is still open and unlinked.
    let before = free_counts(&fs);
    let g = fs.create(ROOT_INO, b"g", NodeKind::Regular, ATTR).unwrap();
    fs.write(g.ino, 0, &data(50_000, 4)).unwrap();
    fs.open_file(g.ino).unwrap();
    fs.unlink(ROOT_INO, b"g").unwrap();
    fs.unmount().unwrap();
    assert_eq!(dumpe2fs_field(&img, "Filesystem state").unwrap(), "clean");
    assert_eq!(first_orphan(&img), 0);
    assert_eq!(free_counts(&open_ro(&img)), before);
    assert_clean(&img, "after unmount");
    if can_loop_mount().is_ok() {
        let m = LoopMount::ro(&img).unwrap();
        assert_eq!(std::fs::read(m.path().join("x")).unwrap(), b"more");
    }
}

#[test]
fn corruption_met_while_writing_is_recorded() {
    let dir = tempfile::tempdir().unwrap();
    let Some(img) = new_image(dir.path(), &["-O", "^has_journal"]) else {
        return;
    };
    let ino = {
        let fs = open_rw(&img);
        fs.create(ROOT_INO, b"d", NodeKind::Directory, ATTR).unwrap().ino
    };
    // Break the directory's inode checksum.
    run(
        "debugfs",
        &[
            "-w",
            "-R",
            &format!("sif <{ino}> checksum 0x1234"),
            img.to_str().unwrap(),
        ],
    );
    let fs = open_rw(&img);
    let e = fs.create(ino, b"x", NodeKind::Regular, ATTR).unwrap_err();
    assert_eq!(e.errno(), libc::EBADMSG, "{e}");
    drop(fs);
    let state = dumpe2fs_field(&img, "Filesystem state").unwrap();
    assert!(state.contains("with errors"), "{state}");
    assert_eq!(dumpe2fs_field(&img, "First error function").as_deref(), Some("create"));
    assert_eq!(
        dumpe2fs_field(&img, "First error inode #").as_deref(),
        Some(&*ino.to_string())
    );
}

#[test]
fn linked_orphans_lose_the_blocks_past_their_size() {
    for (name, args) in [VARIANTS[1], ("block map", &["-O", "^extent,^64bit,^has_journal"][..])] {
        let dir = tempfile::tempdir().unwrap();
        let Some(img) = new_image(dir.path(), args) else { return };
        let body = data(64 << 10, 5);
        let ino = {
            let fs = open_rw(&img);
            let f = fs.create(ROOT_INO, b"t", NodeKind::Regular, ATTR).unwrap();
            fs.write(f.ino, 0, &body).unwrap();
            f.ino
        };
        // An interrupted truncate to 5000 bytes: the size is cut, the blocks
        // are not, the inode is on the list (what ext4_truncate's orphan
        // entry protects).
        let img_s = img.to_str().unwrap();
        run("debugfs", &["-w", "-R", &format!("sif <{ino}> size 5000"), img_s]);
        run("debugfs", &["-w", "-R", &format!("ssv last_orphan {ino}"), img_s]);
        let kernel_copy = dir.path().join("kernel.img");
        std::fs::copy(&img, &kernel_copy).unwrap();
        let fs = open_rw(&img);
        let inode = fs.resolve(b"/t").unwrap();
        assert_eq!(fs.read_all(&inode, 1 << 20).unwrap(), &body[..5000], "{name}");
        let mapped: u64 = fs.map_range(&inode, 0, 1 << 20).unwrap().iter().map(|r| r.len).sum();
        assert_eq!(
            mapped,
            5000u64.div_ceil(fs.block_size() as u64),
            "{name}: nothing mapped past the size"
        );
        let free = free_counts(&fs);
        drop(fs);
        assert_clean(&img, name);
        if can_loop_mount().is_ok() {
            LoopMount::rw(&kernel_copy, &[]).unwrap().unmount().unwrap();
            assert_clean(&kernel_copy, name);
            assert_eq!(
                free_counts(&open_ro(&kernel_copy)),
                free,
                "{name}: the kernel frees the same"
            );
        }
    }
}

#[test]
fn orphan_file_of_our_mkfs_takes_and_gives_back_entries() {
    use ext4kit_engine::mkfs::{MkfsOptions, mkfs as our_mkfs};
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("ours.img");
    std::fs::File::create(&img).unwrap().set_len(32 << 20).unwrap();
    let mut opts = MkfsOptions::default();
    opts.add_features("orphan_file");
    our_mkfs(&FileDevice::open(&img, true).unwrap(), &opts).unwrap();
    let fs = open_rw(&img);
    let f = fs.create(ROOT_INO, b"f", NodeKind::Regular, ATTR).unwrap();
    fs.write(f.ino, 0, &data(10_000, 6)).unwrap();
    fs.open_file(f.ino).unwrap();
    fs.unlink(ROOT_INO, b"f").unwrap();
    assert_eq!(fs.superblock().s_last_orphan.get(), 0, "the orphan file takes it");
    fs.sync().unwrap();
    let r = e2fsck_fn(&img).unwrap();
    assert!(
        r.output.contains("Orphan file (inode 12) block 0 is not clean"),
        "{}",
        r.output
    );
    fs.release_file(f.ino).unwrap();
    fs.unmount().unwrap();
    assert_eq!(dumpe2fs_field(&img, "Filesystem state").unwrap(), "clean");
    assert_clean(&img, "our mkfs, orphan_file");
}

#[test]
fn removed_inodes_take_no_new_names() {
    let dir = tempfile::tempdir().unwrap();
    let Some(img) = new_image(dir.path(), &[]) else { return };
    let fs = open_rw(&img);
    let d = fs.create(ROOT_INO, b"d", NodeKind::Directory, ATTR).unwrap();
    let f = fs.create(ROOT_INO, b"f", NodeKind::Regular, ATTR).unwrap();
    let g = fs.create(ROOT_INO, b"g", NodeKind::Regular, ATTR).unwrap();
    fs.open_file(d.ino).unwrap();
    fs.open_file(f.ino).unwrap();
    fs.rmdir(ROOT_INO, b"d").unwrap();
    fs.unlink(ROOT_INO, b"f").unwrap();
    let gone = |r: ext4kit_engine::Result<()>| assert_eq!(r.unwrap_err().errno(), libc::ENOENT);
    gone(fs.create(d.ino, b"x", NodeKind::Regular, ATTR).map(|_| ()));
    gone(fs.link(f.ino, ROOT_INO, b"back"));
    gone(fs.link(g.ino, d.ino, b"into-dead"));
    gone(fs.rename(ROOT_INO, b"g", d.ino, b"g", RenameFlags::default()));
    fs.unmount().unwrap();
    assert_clean(&img, "after refusals and unmount");
}
