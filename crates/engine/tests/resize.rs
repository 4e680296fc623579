//! `resize`: images made by mke2fs and filled by the kernel (files up to
//! the end of the device, xattrs, a directory of many names) are grown by
//! ext4kit and, on a copy, by resize2fs. Afterwards e2fsck -fn is clean,
//! the group layout (dumpe2fs) is resize2fs's, and every file's contents,
//! names and xattrs are as before. A crash at every write of a grow leaves
//! the old or the new file system, each e2fsck-clean.

mod common;

use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use ext4kit_engine::device::{CrashDevice, MemDevice};
use ext4kit_engine::resize::{ResizeOptions, ResizeReport, SizeSpec, parse_size, resize, resize_image};
use ext4kit_engine::{Filesystem, OpenOptions};
use ext4kit_testkit::mount::{LoopMount, can_loop_mount};
use ext4kit_testkit::tools::{assert_fsck_clean, e2fsck_fn, require_tools, run_ok};

/// True when e2fsprogs and kernel loop mounts are here; a skip fails under CI.
fn have_all() -> bool {
    let r =
        require_tools(&["mkfs.ext4", "e2fsck", "dumpe2fs", "resize2fs", "setfattr"]).and_then(|()| can_loop_mount());
    match r {
        Ok(()) => true,
        Err(why) => {
            assert!(
                std::env::var_os("CI").is_none(),
                "CI must have e2fsprogs and loop mounts: {why}"
            );
            ext4kit_testkit::skipped!("{why}");
            false
        }
    }
}

/// mkfs.ext4 ARGS at SIZE, filled by the kernel: small files with xattrs,
/// a directory of 300 names, and a file filling most of the space, so
/// that blocks near the end of the device are in use; then `e2fsck -fy`,
/// which resize2fs (and ext4kit) ask for before a resize.
fn filled(dir: &Path, args: &[&str], size: &str) -> PathBuf {
    let img = common::mkfs(dir, None, args, size).expect("mkfs");
    let m = LoopMount::rw(&img, &[]).expect("kernel mount");
    let root = m.path();
    std::fs::create_dir_all(root.join("many")).unwrap();
    for i in 0..300 {
        std::fs::write(root.join(format!("many/name_{i:04}")), format!("file {i}")).unwrap();
    }
    for i in 0..20 {
        let f = root.join(format!("x{i}"));
        std::fs::write(&f, vec![i as u8; 5000 * i]).unwrap();
        run_ok(
            "setfattr",
            &["-n", "user.k", "-v", &format!("v{i}"), f.to_str().unwrap()],
        )
        .unwrap();
    }
    let st = run_ok("stat", &["-f", "-c", "%a %S", root.to_str().unwrap()])
        .unwrap()
        .stdout;
    let v: Vec<u64> = st.split_whitespace().map(|x| x.parse().unwrap()).collect();
    let avail = v[0] * v[1];
    let big: Vec<u8> = (0..avail * 8 / 10).map(|i| (i % 251) as u8).collect();
    std::fs::write(root.join("big"), &big).unwrap();
    m.unmount().unwrap();
    let r = std::process::Command::new("e2fsck")
        .arg("-fy")
        .arg(&img)
        .output()
        .unwrap();
    assert!(matches!(r.status.code(), Some(0 | 1)), "e2fsck -fy: {r:?}");
    img
}

/// Path → hash of contents and xattrs, read through a kernel mount.
fn walk(img: &Path) -> BTreeMap<String, u64> {
    let m = LoopMount::ro(img).expect("kernel ro mount");
    let mut out = BTreeMap::new();
    let mut stack = vec![m.path().to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let rel = p.strip_prefix(m.path()).unwrap().display().to_string();
            let mut h = std::collections::hash_map::DefaultHasher::new();
            let meta = std::fs::symlink_metadata(&p).unwrap();
            (meta.mode(), meta.nlink(), meta.uid(), meta.size()).hash(&mut h);
            if meta.file_type().is_symlink() {
                std::fs::read_link(&p).unwrap().hash(&mut h);
                out.insert(rel, h.finish());
                continue;
            }
            for name in xattr::list(&p).unwrap() {
                name.hash(&mut h);
                xattr::get(&p, &name).unwrap().hash(&mut h);
            }
            if p.is_dir() {
                stack.push(p);
            } else {
                std::fs::read(&p).unwrap().hash(&mut h);
            }
            out.insert(rel, h.finish());
        }
    }
    out
}

/// The layout lines of dumpe2fs: counts and each group's metadata.
fn layout(img: &Path) -> Vec<String> {
    let out = run_ok("dumpe2fs", &[img.to_str().unwrap()]).unwrap().stdout;
    let keep = [
        "Block count:",
        "Inode count:",
        "Free blocks:",
        "Free inodes:",
        "Reserved GDT blocks:",
        "Reserved block count:",
        "Group ",
        "  Primary superblock",
        "  Backup superblock",
        "  Reserved GDT",
        "  Group descriptor",
        "  Block bitmap at",
        "  Inode bitmap at",
        "  Inode table at",
    ];
    out.lines()
        .filter(|l| keep.iter().any(|k| l.starts_with(k)))
        // Checksums aside (an inode bitmap of an uninitialised group is
        // not checksummed by resize2fs; ext4kit writes and sums it).
        .map(|l| {
            let l = l.split(", csum").next().unwrap();
            match l.find(" csum 0x") {
                Some(i) => format!("{}{}", &l[..i], &l[i + 12..]),
                None => l.to_string(),
            }
        })
        .collect()
}

fn grow_and_compare(args: &[&str], size: &str, targets: &[&str]) {
    grow_and_compare_with(args, size, targets, false);
}

/// `sparse_super2_bug`: resize2fs 1.47.0's `clear_sparse_super2_last_group`
/// frees one block too many (the block after the old last group's backup,
/// `num` counting the superblock twice), so its image fails e2fsck and has
/// one free block more; everything else must still agree.
fn grow_and_compare_with(args: &[&str], size: &str, targets: &[&str], sparse_super2_bug: bool) {
    if !have_all() {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let img = filled(d.path(), args, size);
    let before = walk(&img);
    for t in targets {
        let reference = d.path().join("ref");
        std::fs::copy(&img, &reference).unwrap();
        run_ok("resize2fs", &[reference.to_str().unwrap(), t]).unwrap();
        let spec = parse_size(t).unwrap();
        let r = resize_image(&img, Some(spec), &ResizeOptions::default(), &mut |_, _| {}).unwrap();
        assert!(r.new_blocks > r.old_blocks, "{t}: {r:?}");
        assert_fsck_clean(&img).unwrap();
        let (mut ours, mut theirs) = (layout(&img), layout(&reference));
        if sparse_super2_bug {
            let f = e2fsck_fn(&reference).unwrap();
            if !f.is_clean() {
                assert!(f.output.contains("Block bitmap differences"), "{}", f.output);
                ours.retain(|l| !l.starts_with("Free blocks:"));
                theirs.retain(|l| !l.starts_with("Free blocks:"));
            }
        }
        let diff: Vec<_> = ours.iter().zip(&theirs).filter(|(a, b)| a != b).collect();
        assert!(
            ours == theirs,
            "{args:?} {size} → {t}: layout differs from resize2fs: {diff:?}"
        );
        assert_eq!(walk(&img), before, "{args:?} → {t}: files changed");
    }
}

#[test]
fn grow_4k_flex_bg_like_resize2fs() {
    grow_and_compare(&["-b", "4096"], "64M", &["100M", "300M", "1G"]);
}

#[test]
fn grow_1k_flex_bg_metadata_csum_like_resize2fs() {
    grow_and_compare(&["-b", "1024", "-O", "metadata_csum"], "20M", &["30M", "70M", "300M"]);
}

#[test]
fn grow_4k_no_flex_64bit_like_resize2fs() {
    grow_and_compare(&["-b", "4096", "-O", "^flex_bg,64bit"], "64M", &["200M", "600M"]);
}

#[test]
fn grow_ext2_block_mapped_like_resize2fs() {
    grow_and_compare(&["-t", "ext2", "-b", "1024"], "16M", &["40M", "100M"]);
}

#[test]
fn grow_ext3_uninit_bg_like_resize2fs() {
    grow_and_compare(&["-t", "ext3", "-b", "4096", "-O", "uninit_bg"], "40M", &["180M"]);
}

#[test]
fn grow_sparse_super2_moves_the_last_backup_like_resize2fs() {
    grow_and_compare_with(&["-b", "1024", "-O", "sparse_super2"], "20M", &["100M", "300M"], true);
}

/// meta_bg: new descriptor blocks open new meta groups (their first,
/// second and last groups hold copies); 64bit makes 16 descriptors a
/// 1 KiB block, so 300M spans three meta groups.
#[test]
fn grow_meta_bg_1k_64bit_like_resize2fs() {
    grow_and_compare(
        &["-b", "1024", "-O", "meta_bg,^resize_inode,metadata_csum"],
        "20M",
        &["70M", "300M"],
    );
}

#[test]
fn grow_meta_bg_1k_no_flex_like_resize2fs() {
    grow_and_compare(
        &["-b", "1024", "-O", "meta_bg,^resize_inode,^flex_bg,^64bit"],
        "16M",
        &["150M", "400M"],
    );
}

#[test]
fn grow_meta_bg_4k_like_resize2fs() {
    grow_and_compare(&["-b", "4096", "-O", "meta_bg,^resize_inode"], "64M", &["1G"]);
}

#[test]
fn grow_without_a_journal_like_resize2fs() {
    grow_and_compare(&["-b", "4096", "-O", "^has_journal"], "64M", &["500M"]);
}

#[test]
fn unclean_image_is_refused_unless_forced() {
    if !have_all() {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let img = common::mkfs(d.path(), None, &["-b", "4096"], "32M").unwrap();
    common::patch_sb(&img, |sb| sb.s_state.set(0));
    let e = resize_image(
        &img,
        Some(SizeSpec::Bytes(64 << 20)),
        &ResizeOptions::default(),
        &mut |_, _| {},
    )
    .unwrap_err();
    assert!(e.to_string().contains("e2fsck -f"), "{e}");
    let opts = ResizeOptions {
        force: true,
        ..ResizeOptions::default()
    };
    resize_image(&img, Some(SizeSpec::Bytes(64 << 20)), &opts, &mut |_, _| {})
        .unwrap_or_else(|e| panic!("forced resize: {e}"));
    let _ = std::process::Command::new("e2fsck").arg("-fy").arg(&img).output();
    assert_fsck_clean(&img).unwrap();
}

/// Runs a resize to `want` blocks (`None`: the device) of `bytes` on a
/// crash device and checks the image a crash at every write leaves.
fn crash_every_write(bytes: Vec<u8>, want: Option<u64>, old_blocks: u64, d: &Path) -> ResizeReport {
    let dev = Arc::new(CrashDevice::with_atomic_unit(bytes, 1024));
    let r = resize(Box::new(dev.clone()), want, &ResizeOptions::default(), &mut |_, _| {}).unwrap();
    assert!(r.journaled);
    let writes = dev.writes();
    let out = d.join("crash");
    let mut seen = (0, 0);
    for (point, s) in common::crash_cases::every_write_from(&dev, 0) {
        // Recovery as at any open (the journal replayed), then e2fsck.
        let mem = Arc::new(MemDevice::new(dev.crash_image(point, s)));
        let fs = Filesystem::open(Box::new(mem.clone()), OpenOptions::default())
            .unwrap_or_else(|e| panic!("crash at write {point} ({s:?}): open: {e}"));
        fs.unmount().unwrap();
        std::fs::write(&out, mem.snapshot()).unwrap();
        let f = e2fsck_fn(&out).unwrap();
        assert!(f.is_clean(), "crash at write {point} of {writes} ({s:?}): {}", f.output);
        let blocks = dumpe2fs_blocks(&out);
        assert!(
            blocks == old_blocks || blocks == r.new_blocks,
            "crash at write {point} ({s:?}): {blocks} blocks"
        );
        if blocks == r.new_blocks {
            seen.1 += 1
        } else {
            seen.0 += 1
        }
    }
    assert!(seen.0 > 0 && seen.1 > 0, "{seen:?}");
    r
}

#[test]
fn crash_at_every_write_of_a_grow_leaves_old_or_new() {
    if !have_all() {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let img = filled(d.path(), &["-b", "1024", "-O", "metadata_csum"], "12M");
    let mut bytes = std::fs::read(&img).unwrap();
    let old = bytes.len() as u64 / 1024;
    bytes.resize(40 << 20, 0);
    crash_every_write(bytes, None, old, d.path());
}

/// The grow opens a second meta group, whose descriptor block (and its
/// copies) lands in new groups while the first meta group's block
/// changes in the transaction.
#[test]
fn crash_at_every_write_of_a_meta_bg_grow_leaves_old_or_new() {
    if !have_all() {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let img = filled(
        d.path(),
        &["-b", "1024", "-O", "metadata_csum,meta_bg,^resize_inode"],
        "12M",
    );
    let mut bytes = std::fs::read(&img).unwrap();
    let old = bytes.len() as u64 / 1024;
    bytes.resize(150 << 20, 0);
    crash_every_write(bytes, None, old, d.path());
}

#[test]
fn crash_at_every_write_of_a_shrink_leaves_old_or_new() {
    if !have_all() {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let img = common::mkfs(d.path(), None, &["-b", "1024", "-O", "metadata_csum"], "12M").unwrap();
    let opts = ResizeOptions::default();
    resize_image(&img, Some(SizeSpec::Bytes(40 << 20)), &opts, &mut |_, _| {}).unwrap();
    let bytes = std::fs::read(&img).unwrap();
    crash_every_write(bytes, Some(16 << 10), 40 << 10, d.path());
}

/// A shrink that moves blocks and renumbers inodes, crashed at every
/// write: the copies go to blocks the old file system leaves free and
/// every reference changes in the one transaction, so each crash leaves
/// the old file system or the new one.
#[test]
fn crash_at_every_write_of_a_moving_shrink_leaves_old_or_new() {
    if !have_all() {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let img = filled_at_the_end(
        d.path(),
        // The journal in the kept part: one that moves cannot carry the switch.
        &["-b", "1024", "-O", "metadata_csum,^flex_bg", "-J", "location=3M"],
        "20M",
    );
    let bytes = std::fs::read(&img).unwrap();
    let old = bytes.len() as u64 / 1024;
    let fs = Filesystem::open(Box::new(MemDevice::new(bytes.clone())), OpenOptions::default()).unwrap();
    let min = ext4kit_engine::resize::minimum_size(&fs);
    drop(fs);
    let r = crash_every_write(bytes, Some(min), old, d.path());
    assert!(r.moved_blocks > 0 && r.moved_inodes > 0, "{r:?}");
}

fn dumpe2fs_blocks(img: &Path) -> u64 {
    let out = run_ok("dumpe2fs", &["-h", img.to_str().unwrap()]).unwrap().stdout;
    let l = out.lines().find(|l| l.starts_with("Block count:")).unwrap();
    l.split(':').nth(1).unwrap().trim().parse().unwrap()
}

/// Grows by ext4kit, then shrinks (ext4kit, and resize2fs on a copy) to
/// sizes whose cut groups hold nothing in use.
fn shrink_and_compare(args: &[&str], size: &str, grow_to: &str, targets: &[&str]) {
    if !have_all() {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let img = common::mkfs(d.path(), None, args, size).unwrap();
    let m = LoopMount::rw(&img, &[]).expect("kernel mount");
    for i in 0..40 {
        std::fs::write(m.path().join(format!("f{i}")), vec![i as u8; 7000 * i]).unwrap();
    }
    m.unmount().unwrap();
    let _ = std::process::Command::new("e2fsck").arg("-fy").arg(&img).output();
    let before = walk(&img);
    let opts = ResizeOptions::default();
    resize_image(&img, Some(parse_size(grow_to).unwrap()), &opts, &mut |_, _| {}).unwrap();
    for t in targets {
        let reference = d.path().join("ref");
        std::fs::copy(&img, &reference).unwrap();
        run_ok("resize2fs", &[reference.to_str().unwrap(), t]).unwrap();
        let r = resize_image(&img, Some(parse_size(t).unwrap()), &opts, &mut |_, _| {}).unwrap();
        assert!(r.new_blocks < r.old_blocks, "{t}: {r:?}");
        assert_fsck_clean(&img).unwrap();
        assert_eq!(
            layout(&img),
            layout(&reference),
            "{args:?} → {t}: layout differs from resize2fs"
        );
        assert_eq!(walk(&img), before, "{args:?} → {t}: files changed");
    }
}

#[test]
fn shrink_cut_4k_flex_bg_like_resize2fs() {
    shrink_and_compare(&["-b", "4096"], "64M", "1G", &["600M", "200M"]);
}

#[test]
fn shrink_cut_1k_metadata_csum_like_resize2fs() {
    shrink_and_compare(&["-b", "1024", "-O", "metadata_csum"], "20M", "300M", &["100M", "30M"]);
}

#[test]
fn shrink_cut_ext2_like_resize2fs() {
    shrink_and_compare(&["-t", "ext2", "-b", "1024"], "16M", "100M", &["50M"]);
}

/// mkfs.ext4 ARGS at SIZE, filled by the kernel with files (some with
/// xattrs, hard links and long symlinks, one directory of many names)
/// until nearly full, then the first three quarters deleted: what is left
/// lies near the end of the device. Then `e2fsck -fy`.
fn filled_at_the_end(dir: &Path, args: &[&str], size: &str) -> PathBuf {
    let img = common::mkfs(dir, None, args, size).expect("mkfs");
    let m = LoopMount::rw(&img, &[]).expect("kernel mount");
    let root = m.path();
    let avail = || {
        let st = run_ok("stat", &["-f", "-c", "%a %S", root.to_str().unwrap()])
            .unwrap()
            .stdout;
        let v: Vec<u64> = st.split_whitespace().map(|x| x.parse().unwrap()).collect();
        v[0] * v[1]
    };
    let chunk = avail() / 40;
    let mut n = 0;
    while avail() > chunk * 5 / 2 {
        let data: Vec<u8> = (0..chunk + n * 37).map(|i| (i * 7 + n) as u8).collect();
        std::fs::write(root.join(format!("f{n:03}")), data).unwrap();
        n += 1;
    }
    for i in 0..n * 3 / 4 {
        std::fs::remove_file(root.join(format!("f{i:03}"))).unwrap();
    }
    // Top-level directories are spread over the groups (Orlov): some
    // land in groups a shrink cuts, with their files.
    for dir in 0..6 {
        let d = root.join(format!("dir{dir}"));
        std::fs::create_dir(&d).unwrap();
        std::fs::create_dir(d.join("sub")).unwrap();
        for i in 0..(if dir == 0 { 300 } else { 20 }) {
            let f = d.join(format!("entry_with_a_long_name_{i:04}"));
            std::fs::write(&f, format!("small {i}").repeat(i % 7 * 100 + 1)).unwrap();
        }
        std::fs::write(d.join("sub/deeper"), vec![dir as u8; 20_000]).unwrap();
        std::fs::hard_link(d.join("sub/deeper"), root.join(format!("link_to_deeper{dir}"))).unwrap();
    }
    for i in n * 3 / 4..n {
        let f = root.join(format!("f{i:03}"));
        if i % 2 == 0 {
            let big = "v".repeat(300 + i as usize);
            run_ok("setfattr", &["-n", "user.big", "-v", &big, f.to_str().unwrap()]).unwrap();
        }
        if i % 3 == 0 {
            std::fs::hard_link(&f, root.join(format!("link{i:03}"))).unwrap();
            // Longer than 60 bytes: a symlink with a data block.
            let target = format!("{}f{i:03}", "./".repeat(40));
            std::os::unix::fs::symlink(target, root.join(format!("sym{i:03}"))).unwrap();
        }
    }
    m.unmount().unwrap();
    let r = std::process::Command::new("e2fsck")
        .arg("-fy")
        .arg(&img)
        .output()
        .unwrap();
    assert!(matches!(r.status.code(), Some(0 | 1)), "e2fsck -fy: {r:?}");
    img
}

/// Shrinks an image whose files lie at the end of the device to each of
/// `targets` (ext4kit, and resize2fs on a copy): blocks are moved, the
/// image is e2fsck-clean, the kernel mounts it and every file (names,
/// contents, modes, links, xattrs) is as before.
fn shrink_moving(args: &[&str], size: &str, targets: &[&str]) -> (u64, u32) {
    if !have_all() {
        return (1, 1);
    }
    let d = tempfile::tempdir().unwrap();
    let img = filled_at_the_end(d.path(), args, size);
    let mut moved = (0, 0);
    let before = walk(&img);
    for t in targets {
        let reference = d.path().join("ref");
        std::fs::copy(&img, &reference).unwrap();
        run_ok("resize2fs", &[reference.to_str().unwrap(), t]).unwrap();
        let opts = ResizeOptions::default();
        let r = resize_image(&img, Some(parse_size(t).unwrap()), &opts, &mut |_, _| {})
            .unwrap_or_else(|e| panic!("{args:?} {size} → {t}: {e}"));
        assert!(r.new_blocks < r.old_blocks, "{t}: {r:?}");
        assert_eq!(
            std::fs::metadata(&img).unwrap().len(),
            std::fs::metadata(&reference).unwrap().len(),
            "{t}: resize2fs cut the file elsewhere"
        );
        assert_fsck_clean(&img).unwrap_or_else(|e| panic!("{args:?} {size} → {t}: {e}"));
        assert_eq!(dumpe2fs_blocks(&img), dumpe2fs_blocks(&reference), "{t}");
        assert_eq!(walk(&img), before, "{args:?} → {t}: files changed");
        moved.0 += r.moved_blocks;
        moved.1 += r.moved_inodes;
    }
    // Then to the minimum resize -P gives, which is resize2fs -P's.
    let theirs = run_ok("resize2fs", &["-P", img.to_str().unwrap()]).unwrap().stdout;
    let theirs: u64 = theirs.rsplit(':').next().unwrap().trim().parse().unwrap();
    let fs = Filesystem::open(
        Box::new(ext4kit_engine::device::FileDevice::open(&img, false).unwrap()),
        OpenOptions::default(),
    )
    .unwrap();
    let ours = ext4kit_engine::resize::minimum_size(&fs);
    drop(fs);
    assert_eq!(ours, theirs, "{args:?}: resize -P");
    let opts = ResizeOptions::default();
    let r = resize_image(&img, Some(SizeSpec::Blocks(ours)), &opts, &mut |_, _| {})
        .unwrap_or_else(|e| panic!("{args:?} → minimum {ours}: {e}"));
    assert_eq!(r.new_blocks, ours);
    assert_fsck_clean(&img).unwrap_or_else(|e| panic!("{args:?} → minimum {ours}: {e}"));
    assert_eq!(walk(&img), before, "{args:?} → minimum {ours}: files changed");
    moved.0 += r.moved_blocks;
    moved.1 += r.moved_inodes;
    moved
}

#[test]
fn shrink_moving_blocks_and_inodes_4k_extents_flex_bg() {
    let (blocks, inodes) = shrink_moving(&["-b", "4096"], "300M", &["250M", "180M", "120M"]);
    assert!(
        blocks > 0 && inodes > 0,
        "nothing moved: {blocks} blocks, {inodes} inodes"
    );
}

#[test]
fn shrink_moving_blocks_and_inodes_1k_metadata_csum() {
    let (blocks, inodes) = shrink_moving(
        &["-b", "1024", "-O", "metadata_csum", "-G", "2"],
        "64M",
        &["48M", "40M", "32M"],
    );
    assert!(
        blocks > 0 && inodes > 0,
        "nothing moved: {blocks} blocks, {inodes} inodes"
    );
}

#[test]
fn shrink_moving_blocks_and_inodes_ext2_block_mapped() {
    let (blocks, inodes) = shrink_moving(&["-t", "ext2", "-b", "1024"], "24M", &["18M", "12M"]);
    assert!(
        blocks > 0 && inodes > 0,
        "nothing moved: {blocks} blocks, {inodes} inodes"
    );
}

#[test]
fn shrink_moving_blocks_and_inodes_ext3_4k() {
    let (blocks, inodes) = shrink_moving(&["-t", "ext3", "-b", "4096"], "300M", &["200M", "130M"]);
    assert!(
        blocks > 0 && inodes > 0,
        "nothing moved: {blocks} blocks, {inodes} inodes"
    );
}

#[test]
fn shrink_moving_blocks_and_inodes_without_a_journal_64bit() {
    let (blocks, inodes) = shrink_moving(&["-b", "4096", "-O", "^has_journal,64bit"], "300M", &["200M"]);
    assert!(
        blocks > 0 && inodes > 0,
        "nothing moved: {blocks} blocks, {inodes} inodes"
    );
}

#[test]
fn shrink_that_does_not_fit_is_refused_and_changes_nothing() {
    if !have_all() {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let img = filled(d.path(), &["-b", "4096"], "64M");
    let bytes = std::fs::read(&img).unwrap();
    let forced = ResizeOptions {
        force: true,
        ..ResizeOptions::default()
    };
    // Below resize -P's estimate, as resize2fs; forced, the blocks to move
    // are counted against the free ones and found too many.
    for (opts, why) in [
        (ResizeOptions::default(), "smaller than the minimum"),
        (forced, "do not fit"),
    ] {
        let e = resize_image(&img, Some(SizeSpec::Bytes(40 << 20)), &opts, &mut |_, _| {}).unwrap_err();
        assert!(e.to_string().contains(why), "{e}");
        assert!(std::fs::read(&img).unwrap() == bytes, "the image changed");
    }
    assert_fsck_clean(&img).unwrap();
}

/// A grow that is refused (an image needing a check; a feature this
/// resize does not handle) leaves the image file byte for byte as it was,
/// its length included: the file is extended only once the resize is
/// planned.
#[test]
fn refused_grow_leaves_the_image_file_unchanged() {
    if !have_all() {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let unclean = common::mkfs(d.path(), None, &["-b", "4096"], "32M").unwrap();
    common::patch_sb(&unclean, |sb| sb.s_state.set(0));
    let big = d.path().join("bigalloc.img");
    run_ok(
        "mkfs.ext4",
        &["-q", "-F", "-O", "bigalloc", big.to_str().unwrap(), "32M"],
    )
    .unwrap();
    for img in [&unclean, &big] {
        let bytes = std::fs::read(img).unwrap();
        let e = resize_image(
            img,
            Some(SizeSpec::Bytes(64 << 20)),
            &ResizeOptions::default(),
            &mut |_, _| {},
        )
        .unwrap_err();
        let now = std::fs::read(img).unwrap();
        assert_eq!(now.len(), bytes.len(), "{}: {e}: the file was extended", img.display());
        assert!(now == bytes, "{}: the image changed", img.display());
    }
    let _ = std::process::Command::new("e2fsck").arg("-fy").arg(&unclean).output();
    assert_fsck_clean(&unclean).unwrap();
    assert_fsck_clean(&big).unwrap();
}

/// meta_bg shrinks: whole meta groups are dropped with their descriptor
/// blocks (a meta group's copies sit in its first, second and last groups
/// by number, so a partial last meta group needs no new copy), and the
/// last kept meta group's descriptor block is rewritten.
#[test]
fn shrink_cut_meta_bg_like_resize2fs() {
    let args = ["-b", "1024", "-O", "meta_bg,^resize_inode"];
    shrink_and_compare(&args, "20M", "300M", &["250M", "200M", "100M", "30M"]);
}

/// Without a resize inode the descriptor table grows past the reserve on
/// the way up (bitmaps and data moved out of its way) and gets shorter on
/// the way down, the tail of each copy freed.
#[test]
fn shrink_cut_no_resize_inode_like_resize2fs() {
    let args = ["-b", "1024", "-O", "^resize_inode,^flex_bg"];
    shrink_and_compare(&args, "20M", "600M", &["300M", "200M", "30M"]);
}

#[test]
fn shrink_moving_meta_bg_1k_64bit_metadata_csum() {
    let args = ["-b", "1024", "-O", "64bit,metadata_csum,meta_bg,^resize_inode"];
    let (blocks, inodes) = shrink_moving(&args, "300M", &["260M", "200M"]);
    assert!(blocks > 0, "moved {blocks} blocks, {inodes} inodes");
}

#[test]
fn crash_at_every_write_of_a_meta_bg_shrink_leaves_old_or_new() {
    if !have_all() {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let args = [
        "-b",
        "1024",
        "-O",
        "64bit,metadata_csum,meta_bg,^resize_inode",
        "-J",
        "location=3M",
    ];
    let img = filled_at_the_end(d.path(), &args, "150M");
    let bytes = std::fs::read(&img).unwrap();
    let old = bytes.len() as u64 / 1024;
    let r = crash_every_write(bytes, Some(100 << 10), old, d.path());
    assert!(r.moved_blocks > 0, "{r:?}");
}

/// Group `g`'s table locations as dumpe2fs prints them: (block bitmap,
/// inode bitmap, first inode-table block).
fn group_tables(img: &Path, g: u32) -> (u64, u64, u64) {
    let out = run_ok("dumpe2fs", &[img.to_str().unwrap()]).unwrap().stdout;
    let head = format!("Group {g}:");
    let mut lines = out.lines().skip_while(|l| !l.starts_with(&head)).skip(1);
    let mut at = |key: &str| -> u64 {
        let l = lines.find(|l| l.trim_start().starts_with(key)).unwrap();
        let n = l.trim_start()[key.len()..].trim_start();
        n[..n.find(|c: char| !c.is_ascii_digit()).unwrap()].parse().unwrap()
    };
    (at("Block bitmap at"), at("Inode bitmap at"), at("Inode table at"))
}

/// A 5-group image whose group 1 (inodes in use) has its bitmaps and
/// inode table in group 4, as a resize that moved them can leave it:
/// the tables copied there, the descriptor repointed with debugfs, the
/// bitmaps settled by `e2fsck -fy`.
fn tables_in_a_cut_group(dir: &Path) -> PathBuf {
    let img = common::mkfs(dir, None, &["-b", "1024", "-N", "80", "-O", "metadata_csum"], "40M").unwrap();
    let m = LoopMount::rw(&img, &[]).expect("kernel mount");
    for i in 1..=40 {
        let data: Vec<u8> = (0..i * 3000).map(|j| (j * 7 + i) as u8).collect();
        std::fs::write(m.path().join(format!("f{i}")), data).unwrap();
    }
    m.unmount().unwrap();
    let (bb, ib, it) = group_tables(&img, 1);
    let mut bytes = std::fs::read(&img).unwrap();
    let to = 33000usize;
    for (from, at, n) in [(it, to, 4), (ib, to + 4, 1), (bb, to + 5, 1)] {
        let (from, n) = (from as usize * 1024, n * 1024);
        let block = bytes[from..from + n].to_vec();
        bytes[at * 1024..at * 1024 + n].copy_from_slice(&block);
    }
    std::fs::write(&img, bytes).unwrap();
    for cmd in [
        format!("set_bg 1 inode_table {to}"),
        format!("set_bg 1 inode_bitmap {}", to + 4),
        format!("set_bg 1 block_bitmap {}", to + 5),
        "set_bg 1 checksum calc".into(),
    ] {
        run_ok("debugfs", &["-w", "-R", &cmd, img.to_str().unwrap()]).unwrap();
    }
    let _ = std::process::Command::new("e2fsck").arg("-fy").arg(&img).output();
    assert_fsck_clean(&img).unwrap();
    assert_eq!(group_tables(&img, 1), (33005, 33004, 33000));
    img
}

/// Shrinking past a kept group's tables moves them below the end, to the
/// blocks resize2fs's `blocks_to_move` picks; its inodes keep their
/// contents.
#[test]
fn shrink_moves_a_kept_groups_tables_like_resize2fs() {
    if !have_all() {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let img = tables_in_a_cut_group(d.path());
    let before = walk(&img);
    let reference = d.path().join("ref");
    std::fs::copy(&img, &reference).unwrap();
    run_ok("resize2fs", &[reference.to_str().unwrap(), "30M"]).unwrap();
    let r = resize_image(
        &img,
        Some(SizeSpec::Bytes(30 << 20)),
        &ResizeOptions::default(),
        &mut |_, _| {},
    )
    .unwrap();
    assert_eq!(r.new_groups, 4, "{r:?}");
    assert_fsck_clean(&img).unwrap();
    let t = group_tables(&img, 1);
    assert!(t.0 < 30720 && t.1 < 30720 && t.2 + 4 <= 30720, "{t:?}");
    assert_eq!(layout(&img), layout(&reference));
    assert_eq!(walk(&img), before, "files changed");
}

#[test]
fn crash_at_every_write_of_a_shrink_moving_tables_leaves_old_or_new() {
    if !have_all() {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let img = tables_in_a_cut_group(d.path());
    let bytes = std::fs::read(&img).unwrap();
    let old = bytes.len() as u64 / 1024;
    crash_every_write(bytes, Some(30720), old, d.path());
}

/// Blocks resize2fs moved, from its `-d 2` (`RESIZE_DEBUG_BMOVE`) lines
/// "Moving N blocks A->B".
fn resize2fs_moving(img: &Path, size: &str) -> u64 {
    let out = run_ok("resize2fs", &["-d", "2", img.to_str().unwrap(), size])
        .unwrap()
        .stdout;
    out.lines()
        .filter_map(|l| l.strip_prefix("Moving "))
        .map(|l| l.split_whitespace().next().unwrap().parse::<u64>().unwrap())
        .sum()
}

/// Grows a kernel-filled image past its reserved GDT blocks to each of
/// `targets` (ext4kit, and resize2fs on a copy): the bitmaps, inode
/// tables and data in the way of the longer descriptor table move. The
/// image is e2fsck-clean, every file as before through a kernel mount,
/// and the dumpe2fs layout is resize2fs's but for group 0's inode table
/// (see docs/resize.md). Returns (ours, resize2fs's) blocks moved per
/// target.
fn grow_past_the_reserve(args: &[&str], size: &str, targets: &[&str]) -> Vec<(u64, u64)> {
    if !have_all() {
        return Vec::new();
    }
    let d = tempfile::tempdir().unwrap();
    let img = filled(d.path(), args, size);
    let before = walk(&img);
    let mut out = Vec::new();
    for t in targets {
        let reference = d.path().join("ref");
        std::fs::copy(&img, &reference).unwrap();
        let theirs = resize2fs_moving(&reference, t);
        let r = resize_image(
            &img,
            Some(parse_size(t).unwrap()),
            &ResizeOptions::default(),
            &mut |_, _| {},
        )
        .unwrap_or_else(|e| panic!("{args:?} {size} → {t}: {e}"));
        assert!(r.new_blocks > r.old_blocks, "{t}: {r:?}");
        assert_fsck_clean(&img).unwrap_or_else(|e| panic!("{args:?} {size} → {t}: {e}"));
        assert_fsck_clean(&reference).unwrap();
        // Free counts aside: a moved file's extent tree is rebuilt whole,
        // in as few blocks as hold it, where resize2fs edits it in place.
        let free = |l: &Vec<String>| l.iter().find(|l| l.starts_with("Free blocks:")).cloned();
        let (mut ours, mut theirs_layout) = (layout(&img), layout(&reference));
        eprintln!(
            "{args:?} {size} → {t}: {:?} against resize2fs's {:?}",
            free(&ours),
            free(&theirs_layout)
        );
        ours.retain(|l| !l.starts_with("Free blocks:"));
        theirs_layout.retain(|l| !l.starts_with("Free blocks:"));
        // Group 0's inode table (the journal inode's) goes only where the
        // old file system keeps nothing, where resize2fs may put it on data.
        let first_itable = |l: &mut Vec<String>| {
            let i = l.iter().position(|x| x.starts_with("  Inode table at")).unwrap();
            l.remove(i)
        };
        let (a, b) = (first_itable(&mut ours), first_itable(&mut theirs_layout));
        if a != b {
            eprintln!("{args:?} {size} → {t}: group 0: ours{a}, resize2fs's{b}");
        }
        let diff: Vec<_> = ours.iter().zip(&theirs_layout).filter(|(a, b)| a != b).collect();
        assert!(
            ours == theirs_layout,
            "{args:?} {size} → {t}: layout differs from resize2fs: {diff:?}"
        );
        assert_eq!(walk(&img), before, "{args:?} → {t}: files changed");
        eprintln!(
            "{args:?} {size} → {t}: moved {} blocks, resize2fs {theirs}",
            r.moved_blocks
        );
        out.push((r.moved_blocks, theirs));
    }
    out
}

#[test]
fn grow_past_the_reserve_1k_no_resize_inode_like_resize2fs() {
    let moved = grow_past_the_reserve(
        &["-b", "1024", "-O", "^resize_inode,^flex_bg"],
        "16M",
        &["300M", "1200M"],
    );
    assert!(moved.iter().all(|m| m.0 > 0 && m.1 > 0), "{moved:?}");
}

#[test]
fn grow_past_the_reserve_4k_flex_bg_like_resize2fs() {
    let moved = grow_past_the_reserve(&["-b", "4096", "-O", "^resize_inode"], "64M", &["9G", "40G"]);
    assert!(moved.iter().all(|m| m.0 > 0 && m.1 > 0), "{moved:?}");
}

#[test]
fn grow_past_the_reserve_1k_used_up_metadata_csum_like_resize2fs() {
    let moved = grow_past_the_reserve(
        &["-b", "1024", "-O", "metadata_csum", "-E", "resize=200000"],
        "16M",
        &["200M", "700M", "1500M"],
    );
    assert!(moved.iter().any(|m| m.0 > 0 && m.1 > 0), "{moved:?}");
}

/// A grow past the reserve (no resize inode) whose longer descriptor
/// table displaces bitmaps, an inode table and data, crashed at every
/// write: the displaced tables and data are copied where the old file
/// system keeps nothing (or, where it has data, in the switch), so each
/// crash leaves the old file system or the new one.
#[test]
fn crash_at_every_write_of_a_grow_past_the_reserve_leaves_old_or_new() {
    if !have_all() {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    // The journal away from group 0's tables: one that moves cannot carry
    // the switch (see the moving shrink's crash test).
    // 512 blocks a group, 16 descriptors a block: from two descriptor
    // blocks to five at 40 MiB, so group 0's inode table is in the way too.
    let features = "64bit,metadata_csum,^resize_inode,^flex_bg";
    let args = ["-b", "1024", "-g", "512", "-O", features, "-J", "location=10M"];
    let img = filled(d.path(), &args, "12M");
    let mut bytes = std::fs::read(&img).unwrap();
    let old = bytes.len() as u64 / 1024;
    bytes.resize(40 << 20, 0);
    let r = crash_every_write(bytes, None, old, d.path());
    assert!(r.moved_blocks > 0, "{r:?}");
}

/// sparse_super2: a shrink moves the second backup to the new last group
/// (`s_backup_bgs`), whose first blocks are emptied first: its tables
/// (without flex_bg) get new homes, data there moves.
#[test]
fn shrink_sparse_super2_moves_the_backup_to_the_new_last_group() {
    let args = ["-b", "1024", "-O", "sparse_super2,^flex_bg"];
    let (blocks, _) = shrink_moving(&args, "40M", &["36M", "33M"]);
    assert!(blocks > 0, "moved {blocks} blocks");
}

#[test]
fn shrink_cut_sparse_super2_4k_like_resize2fs() {
    shrink_and_compare(&["-b", "4096", "-O", "sparse_super2"], "64M", "1G", &["600M", "200M"]);
}
