//! `ea_inode` values written, replaced, removed and released through the
//! engine, and values libext2fs wrote read and released: after each step
//! `e2fsck -fn` finds the image clean (no value inode leaked, no reference
//! count or hash wrong) and `debugfs` reads what the engine wrote.

mod common;

use std::path::Path;

use common::{mkfs, open_rw, run};
use ext4kit_engine::{Attr, NodeKind, ROOT_INO, XattrSet};
use ext4kit_testkit::tools::e2fsck_fn;

const ATTR: Attr = Attr {
    perm: 0o644,
    uid: 0,
    gid: 0,
};

/// The tests of this file one at a time: an image opened for writing is
/// refused while the kernel may still hold another test's loop device.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn value(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

fn assert_clean(img: &Path, what: &str) {
    let r = e2fsck_fn(img).expect("e2fsck");
    assert!(r.is_clean(), "{what}: {}", r.output);
}

/// Inodes in use, from the superblock's count (`dumpe2fs -h`).
fn inodes_in_use(img: &Path) -> u64 {
    let out = run("dumpe2fs", &["-h", img.to_str().unwrap()]);
    let field = |k: &str| -> u64 {
        out.lines()
            .find_map(|l| l.strip_prefix(k))
            .and_then(|v| v.trim_start_matches(':').trim().parse().ok())
            .unwrap()
    };
    field("Inode count") - field("Free inodes")
}

/// The kernel, which checks the value inode's hash as it reads
/// (`ext4_xattr_inode_verify_hashes`), returns the same bytes.
fn kernel_reads(img: &Path, file: &str, name: &str, want: &[u8]) {
    if let Err(why) = ext4kit_testkit::mount::can_loop_mount() {
        ext4kit_testkit::skipped!("kernel read of the value: {why}");
        assert!(std::env::var_os("CI").is_none(), "CI must run the kernel check: {why}");
        return;
    }
    let m = ext4kit_testkit::mount::LoopMount::ro(img).expect("loop mount");
    let got = xattr::get(m.path().join(file), name)
        .expect("getxattr")
        .expect("the attribute");
    assert!(
        got == want,
        "the kernel reads {} bytes, not the {} written",
        got.len(),
        want.len()
    );
}

#[test]
fn values_larger_than_a_block_live_in_value_inodes_and_are_released() {
    let _one = serial();
    let dir = tempfile::tempdir().unwrap();
    let Some(img) = mkfs(dir.path(), None, &["-b", "4096", "-O", "ea_inode"], "64M") else {
        return;
    };
    let base = inodes_in_use(&img);
    let fs = open_rw(&img);
    let f = fs.create(ROOT_INO, b"f", NodeKind::Regular, ATTR).unwrap().ino;
    let big = value(10_000, 1);
    fs.set_xattr(f, b"user.big", &big, XattrSet::Create).unwrap();
    let small = value(100, 2);
    fs.set_xattr(f, b"user.small", &small, XattrSet::Create).unwrap();
    let inode = fs.inode(f).unwrap();
    assert!(fs.xattr(&inode, b"user.big").unwrap() == big, "the value reads back");
    fs.unmount().unwrap();
    assert_clean(&img, "a 10,000-byte value");
    assert_eq!(inodes_in_use(&img), base + 2, "the file and one value inode");
    let got = run("debugfs", &["-R", "ea_get /f user.big", img.to_str().unwrap()]);
    assert!(
        got.len() > 10_000,
        "debugfs reads the value: {} bytes of output",
        got.len()
    );
    kernel_reads(&img, "f", "user.big", &big);

    // Replaced by another large value: the old value inode goes.
    let fs = open_rw(&img);
    let bigger = value(30_000, 3);
    fs.set_xattr(f, b"user.big", &bigger, XattrSet::Replace).unwrap();
    assert!(
        fs.xattr(&fs.inode(f).unwrap(), b"user.big").unwrap() == bigger,
        "the new value reads back"
    );
    fs.unmount().unwrap();
    assert_clean(&img, "replaced");
    assert_eq!(inodes_in_use(&img), base + 2);

    // Removed: so is its value inode.
    let fs = open_rw(&img);
    fs.remove_xattr(f, b"user.big").unwrap();
    fs.set_xattr(f, b"user.again", &value(9_000, 4), XattrSet::Create)
        .unwrap();
    fs.unmount().unwrap();
    assert_clean(&img, "removed, then another");
    assert_eq!(inodes_in_use(&img), base + 2);

    // The file deleted: nothing left behind.
    let fs = open_rw(&img);
    fs.unlink(ROOT_INO, b"f").unwrap();
    fs.unmount().unwrap();
    assert_clean(&img, "the file deleted");
    assert_eq!(inodes_in_use(&img), base, "no value inode leaked");
}

#[test]
fn values_libext2fs_wrote_are_read_and_released() {
    let _one = serial();
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    std::fs::create_dir(&src).unwrap();
    std::fs::write(src.join("g"), b"data").unwrap();
    let Some(img) = mkfs(dir.path(), Some(&src), &["-b", "4096", "-O", "ea_inode"], "64M") else {
        return;
    };
    // debugfs 1.47.0 takes at most one block from the file.
    let big = value(4096, 7);
    let vfile = dir.path().join("value");
    std::fs::write(&vfile, &big).unwrap();
    let cmd = format!("ea_set -f {} /g user.big", vfile.display());
    run("debugfs", &["-w", "-R", &cmd, img.to_str().unwrap()]);
    // debugfs 1.47.0 leaves the owner's i_blocks without the value's
    // blocks, which e2fsck then adds: let it, so the image starts clean.
    let _ = std::process::Command::new("e2fsck").arg("-fy").arg(&img).output();
    assert_clean(&img, "as debugfs wrote it, repaired");
    let base = inodes_in_use(&img);
    let fs = open_rw(&img);
    let g = fs.resolve(b"/g").unwrap();
    let got = fs.xattr(&g, b"user.big").unwrap();
    assert!(
        got == big,
        "read {} bytes, want the {} debugfs wrote",
        got.len(),
        big.len()
    );
    fs.set_xattr(g.ino, b"user.other", b"x", XattrSet::Create).unwrap();
    fs.unlink(ROOT_INO, b"g").unwrap();
    fs.unmount().unwrap();
    assert_clean(&img, "deleted through the engine");
    assert_eq!(inodes_in_use(&img), base - 2, "the file and its value inode are gone");
}

/// The live value inodes among the first inodes of `img` and their
/// reference counts, as `debugfs stat` shows them: the `EA_INODE` flag
/// (0x200000) and, for a count below 2^32, `i_version_lo` as the low half
/// of "Version".
fn value_inodes(img: &Path) -> Vec<(u32, u64)> {
    let cmds: String = (12..64).map(|n| format!("stat <{n}>\n")).collect();
    let file = img.with_extension("cmds");
    std::fs::write(&file, cmds).unwrap();
    let out = run("debugfs", &["-f", file.to_str().unwrap(), img.to_str().unwrap()]);
    let mut found = Vec::new();
    for part in out.split("Inode: ").skip(1) {
        let field = |k: &str| part.split(k).nth(1).and_then(|v| v.split_whitespace().next());
        let ino: u32 = part.split_whitespace().next().unwrap().parse().unwrap();
        let flags = u32::from_str_radix(field("Flags: 0x").unwrap(), 16).unwrap();
        let links: u32 = field("Links: ").unwrap().parse().unwrap();
        let version = field("Version: 0x").unwrap();
        let lo = u64::from_str_radix(version.rsplit(':').next().unwrap(), 16).unwrap();
        if flags & 0x20_0000 != 0 && links > 0 {
            found.push((ino, lo));
        }
    }
    found
}

#[test]
fn equal_values_share_one_value_inode() {
    let _one = serial();
    let dir = tempfile::tempdir().unwrap();
    let Some(img) = mkfs(dir.path(), None, &["-b", "4096", "-O", "ea_inode"], "64M") else {
        return;
    };
    let base = inodes_in_use(&img);
    let big = value(20_000, 9);
    let fs = open_rw(&img);
    let f1 = fs.create(ROOT_INO, b"f1", NodeKind::Regular, ATTR).unwrap().ino;
    let f2 = fs.create(ROOT_INO, b"f2", NodeKind::Regular, ATTR).unwrap().ino;
    fs.set_xattr(f1, b"user.big", &big, XattrSet::Create).unwrap();
    fs.set_xattr(f2, b"user.big", &big, XattrSet::Create).unwrap();
    fs.unmount().unwrap();
    assert_clean(&img, "one value in two files");
    assert_eq!(inodes_in_use(&img), base + 3, "two files, one value inode");
    let shared = value_inodes(&img);
    assert_eq!(shared.len(), 1, "one value inode: {shared:?}");
    assert_eq!(shared[0].1, 2, "referenced twice");
    kernel_reads(&img, "f1", "user.big", &big);
    kernel_reads(&img, "f2", "user.big", &big);

    // A later session meets the value inode by reading the value; a
    // second name of f2 and a third file take references on it too.
    let fs = open_rw(&img);
    assert!(fs.xattr(&fs.inode(f1).unwrap(), b"user.big").unwrap() == big);
    fs.set_xattr(f2, b"user.twin", &big, XattrSet::Create).unwrap();
    let f3 = fs.create(ROOT_INO, b"f3", NodeKind::Regular, ATTR).unwrap().ino;
    fs.set_xattr(f3, b"user.big", &big, XattrSet::Create).unwrap();
    fs.unmount().unwrap();
    assert_clean(&img, "four references");
    assert_eq!(value_inodes(&img), vec![(shared[0].0, 4)]);
    kernel_reads(&img, "f2", "user.twin", &big);

    // References dropped one by one: by removal, by replacement, by
    // deleting the file; the last one frees the value inode.
    let fs = open_rw(&img);
    fs.remove_xattr(f1, b"user.big").unwrap();
    fs.unmount().unwrap();
    assert_clean(&img, "removed from f1");
    assert_eq!(value_inodes(&img), vec![(shared[0].0, 3)]);
    let fs = open_rw(&img);
    fs.set_xattr(f2, b"user.twin", &value(20_000, 10), XattrSet::Replace)
        .unwrap();
    fs.unlink(ROOT_INO, b"f3").unwrap();
    fs.unmount().unwrap();
    assert_clean(&img, "replaced in f2, f3 deleted");
    assert_eq!(inodes_in_use(&img), base + 4, "f1, f2 and two value inodes");
    let fs = open_rw(&img);
    fs.remove_xattr(f2, b"user.big").unwrap();
    fs.unmount().unwrap();
    assert_clean(&img, "removed from f2");
    assert_eq!(inodes_in_use(&img), base + 3, "the shared value inode is freed");

    // The largest value the VFS passes is accepted, and one byte more is not.
    let fs = open_rw(&img);
    let max = value(65_536, 11);
    fs.set_xattr(f1, b"user.max", &max, XattrSet::Create).unwrap();
    assert!(
        fs.set_xattr(f1, b"user.over", &value(65_537, 11), XattrSet::Create)
            .is_err()
    );
    fs.unmount().unwrap();
    assert_clean(&img, "a 64 KiB value");
    kernel_reads(&img, "f1", "user.max", &max);
}

/// The kernel shares one xattr block between two files with the same
/// attributes (`h_refcount` 2), the block naming one value inode: the
/// engine's changes copy the block for the file changed, the value inode
/// gains the copy's reference, and deleting both frees everything.
#[test]
fn kernel_shared_xattr_blocks_naming_value_inodes() {
    let _one = serial();
    if let Err(why) = ext4kit_testkit::mount::can_loop_mount() {
        ext4kit_testkit::skipped!("kernel-made shared xattr block: {why}");
        assert!(std::env::var_os("CI").is_none(), "CI must run the kernel check: {why}");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // 128-byte inodes: every attribute goes to the block.
    let Some(img) = mkfs(dir.path(), None, &["-b", "4096", "-I", "128", "-O", "ea_inode"], "32M") else {
        return;
    };
    let big = value(9_000, 5);
    {
        let m = ext4kit_testkit::mount::LoopMount::rw(&img, &[]).unwrap();
        for f in ["a", "b"] {
            let p = m.path().join(f);
            std::fs::write(&p, b"x").unwrap();
            xattr::set(&p, "user.small", &[b's'; 50]).unwrap();
            xattr::set(&p, "user.big", &big).unwrap();
        }
        m.unmount().unwrap();
    }
    let acl = |f: &str| {
        run("debugfs", &["-R", &format!("stat /{f}"), img.to_str().unwrap()])
            .split("File ACL: ")
            .nth(1)
            .unwrap()
            .split_whitespace()
            .next()
            .unwrap()
            .to_string()
    };
    assert_eq!(acl("a"), acl("b"), "the kernel shares the block");
    assert_eq!(value_inodes(&img).len(), 1);
    let base = inodes_in_use(&img);

    let fs = open_rw(&img);
    let a = fs.resolve(b"/a").unwrap().ino;
    fs.set_xattr(a, b"user.more", b"m", XattrSet::Create).unwrap();
    fs.unmount().unwrap();
    assert_clean(&img, "a's attributes changed");
    assert_ne!(acl("a"), acl("b"), "a has its own copy");
    let shared = value_inodes(&img);
    assert_eq!(shared.len(), 1, "still one value inode: {shared:?}");
    assert_eq!(shared[0].1, 2, "one reference per block");
    kernel_reads(&img, "a", "user.big", &big);
    kernel_reads(&img, "b", "user.big", &big);

    let fs = open_rw(&img);
    fs.unlink(ROOT_INO, b"b").unwrap();
    fs.unlink(ROOT_INO, b"a").unwrap();
    fs.unmount().unwrap();
    assert_clean(&img, "both deleted");
    assert_eq!(inodes_in_use(&img), base - 3, "both files and the value inode are gone");
}
