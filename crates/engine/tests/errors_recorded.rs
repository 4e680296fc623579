//! Corruption met by a read is recorded in the superblock as the kernel's
//! `ext4_error` records it — `s_state` says "with errors", `s_error_count`,
//! the first and last error's function, inode and block — on the device at
//! once, so `e2fsck -p` checks the image; nothing else of the image is
//! written. A read-only open records it in memory only.

mod common;

use std::path::{Path, PathBuf};

use common::{mkfs, run};
use ext4kit_engine::device::FileDevice;
use ext4kit_engine::{Filesystem, OpenOptions};
use ext4kit_testkit::tools::{e2fsck_fn, require_tools, skip_unless};

/// A line of `dumpe2fs -h` (the value after `key:`), trimmed.
fn dumpe2fs_field(img: &Path, key: &str) -> Option<String> {
    let out = run("dumpe2fs", &["-h", img.to_str().unwrap()]);
    out.lines()
        .find_map(|l| l.strip_prefix(key).and_then(|r| r.strip_prefix(':')))
        .map(|v| v.trim().to_string())
}

/// An image holding `/f` (three blocks of data), `/g` and a directory
/// `/d`, damaged by the `debugfs -w` request `damage`; the inode of `path`.
fn damaged_image(dir: &Path, damage: &str, path: &str) -> Option<(PathBuf, u32)> {
    skip_unless(require_tools(&["mkfs.ext4", "debugfs", "dumpe2fs", "e2fsck"]))?;
    let src = dir.join("src");
    std::fs::create_dir_all(src.join("d")).unwrap();
    std::fs::write(src.join("f"), vec![7u8; 12288]).unwrap();
    std::fs::write(src.join("g"), b"intact").unwrap();
    std::fs::write(src.join("d/inside"), b"x").unwrap();
    let img = mkfs(dir, Some(&src), &[], "32M")?;
    let img_s = img.to_str().unwrap();
    let ino: u32 = run("debugfs", &["-R", &format!("stat {path}"), img_s])
        .split_whitespace()
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    run("debugfs", &["-w", "-R", damage, img_s]);
    Some((img, ino))
}

/// `/f` with its extent header's magic broken.
const BAD_EXTENT_HEADER: &str = "sif /f block[0] 0x1234";

/// The blocks of the journal inode (8): a session writes there.
fn journal_blocks(img: &Path) -> Vec<u64> {
    run("debugfs", &["-R", "blocks <8>", img.to_str().unwrap()])
        .split_whitespace()
        .map(|b| b.parse().unwrap())
        .collect()
}

/// The blocks of `bs` bytes at which `a` and `b` differ.
fn changed_blocks(a: &[u8], b: &[u8], bs: usize) -> Vec<u64> {
    a.chunks(bs)
        .zip(b.chunks(bs))
        .enumerate()
        .filter(|(_, (x, y))| x != y)
        .map(|(i, _)| i as u64)
        .collect()
}

fn open(img: &Path, writable: bool) -> Filesystem {
    Filesystem::open(
        Box::new(FileDevice::open(img, writable).unwrap()),
        OpenOptions::default(),
    )
    .unwrap()
}

/// `e2fsck -p` refuses to skip the image; then `-fy` repairs the damage we
/// made and nothing else is wrong.
fn assert_checked_and_repairable(img: &Path) {
    let out = std::process::Command::new("e2fsck")
        .arg("-p")
        .arg(img)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(
        text.contains("contains a file system with errors, check forced"),
        "{text}"
    );
    let _ = std::process::Command::new("e2fsck")
        .arg("-fy")
        .arg(img)
        .output()
        .unwrap();
    let r = e2fsck_fn(img).unwrap();
    assert!(r.is_clean(), "after e2fsck -fy: {}", r.output);
}

#[test]
fn a_read_records_a_bad_extent_header_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let Some((img, ino)) = damaged_image(dir.path(), BAD_EXTENT_HEADER, "/f") else {
        return;
    };
    assert_eq!(dumpe2fs_field(&img, "Filesystem state").as_deref(), Some("clean"));
    let before = std::fs::read(&img).unwrap();
    let fs = open(&img, true);
    let f = fs.resolve(b"/f").unwrap();
    let e = fs.read_all(&f, 1 << 20).unwrap_err();
    assert_eq!(e.errno(), libc::EUCLEAN, "{e}");
    assert_eq!(fs.read_all(&fs.resolve(b"/g").unwrap(), 100).unwrap(), b"intact");

    // On the device before the session ends (the kernel commits the
    // superblock at once).
    assert_eq!(
        dumpe2fs_field(&img, "Filesystem state").as_deref(),
        Some("clean with errors")
    );
    assert_eq!(dumpe2fs_field(&img, "FS Error count").as_deref(), Some("1"));
    assert_eq!(
        dumpe2fs_field(&img, "First error inode #").as_deref(),
        Some(&*ino.to_string())
    );
    let func = dumpe2fs_field(&img, "First error function").unwrap();
    assert!(!func.is_empty());
    assert!(dumpe2fs_field(&img, "First error time").is_some());
    assert!(dumpe2fs_field(&img, "First error err").is_some_and(|v| v == "EFSCORRUPTED"));

    // A second error counts, and is the last one.
    fs.read_all(&f, 1 << 20).unwrap_err();
    fs.unmount().unwrap();
    assert_eq!(
        dumpe2fs_field(&img, "Filesystem state").as_deref(),
        Some("clean with errors")
    );
    assert_eq!(dumpe2fs_field(&img, "FS Error count").as_deref(), Some("2"));
    assert_eq!(dumpe2fs_field(&img, "First error function"), Some(func.clone()));
    assert_eq!(dumpe2fs_field(&img, "Last error function"), Some(func));
    assert_eq!(
        dumpe2fs_field(&img, "Last error inode #").as_deref(),
        Some(&*ino.to_string())
    );

    // Nothing but the superblock and the journal was written.
    let after = std::fs::read(&img).unwrap();
    let journal = journal_blocks(&img);
    let bs: usize = dumpe2fs_field(&img, "Block size").unwrap().parse().unwrap();
    let superblock = (1024 / bs) as u64;
    let others: Vec<u64> = changed_blocks(&before, &after, bs)
        .into_iter()
        .filter(|b| *b != superblock && !journal.contains(b))
        .collect();
    assert!(
        others.is_empty(),
        "blocks written besides the superblock and the journal: {others:?}"
    );
    assert_checked_and_repairable(&img);
}

#[test]
fn a_damaged_directory_block_is_recorded_with_its_block() {
    let dir = tempfile::tempdir().unwrap();
    // The first entry's `rec_len` of the directory's first block.
    let Some((img, ino)) = damaged_image(dir.path(), "zap_block -f /d -o 4 -l 2 -p 0xff 0", "/d") else {
        return;
    };
    let block = run("debugfs", &["-R", "blocks /d", img.to_str().unwrap()]);
    let block = block.split_whitespace().next().unwrap().to_string();
    let fs = open(&img, true);
    let d = fs.inode(ino).unwrap();
    let e = fs.read_dir(&d).unwrap_err();
    assert!([libc::EUCLEAN, libc::EBADMSG].contains(&e.errno()), "{e}");
    drop(fs);
    assert_eq!(dumpe2fs_field(&img, "FS Error count").as_deref(), Some("1"));
    assert_eq!(
        dumpe2fs_field(&img, "First error inode #").as_deref(),
        Some(&*ino.to_string())
    );
    assert_eq!(dumpe2fs_field(&img, "First error block #"), Some(block));
    assert_checked_and_repairable(&img);
}

#[test]
fn a_read_only_open_records_in_memory_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let Some((img, ino)) = damaged_image(dir.path(), BAD_EXTENT_HEADER, "/f") else {
        return;
    };
    let before = std::fs::read(&img).unwrap();
    let fs = open(&img, false);
    let f = fs.inode(ino).unwrap();
    fs.read_all(&f, 1 << 20).unwrap_err();
    let sb = fs.superblock();
    assert_eq!(sb.s_error_count.get(), 1);
    assert_ne!(sb.s_state.get() & 2, 0, "EXT2_ERROR_FS in memory");
    assert_eq!(sb.s_first_error_ino.get(), ino);
    fs.unmount().unwrap();
    assert!(
        std::fs::read(&img).unwrap() == before,
        "a read-only open wrote the image"
    );
    assert_eq!(dumpe2fs_field(&img, "Filesystem state").as_deref(), Some("clean"));
}

#[test]
fn an_error_found_inside_a_write_is_counted_once() {
    let dir = tempfile::tempdir().unwrap();
    let Some((img, ino)) = damaged_image(dir.path(), BAD_EXTENT_HEADER, "/f") else {
        return;
    };
    let fs = open(&img, true);
    let e = fs.truncate(ino, 1).unwrap_err();
    assert_eq!(e.errno(), libc::EUCLEAN, "{e}");
    fs.unmount().unwrap();
    assert_eq!(dumpe2fs_field(&img, "FS Error count").as_deref(), Some("1"));
    assert_eq!(
        dumpe2fs_field(&img, "First error inode #").as_deref(),
        Some(&*ino.to_string())
    );
    assert_checked_and_repairable(&img);
}

/// Lists `dir` through a directory stream, as the mount's readdir does.
fn list(fs: &Filesystem, dir: &ext4kit_engine::Inode) -> ext4kit_engine::Result<Vec<Vec<u8>>> {
    let mut stream = fs.dir_stream(dir)?;
    let mut names = Vec::new();
    fs.read_dir_from(dir, &mut stream, 0, |e, _| {
        names.push(e.name.clone());
        Ok(true)
    })?;
    Ok(names)
}

#[test]
fn a_directory_whose_first_block_is_a_hole_is_corrupt_not_empty() {
    let dir = tempfile::tempdir().unwrap();
    // The only extent of /d now starts at logical block 1 (i_block[3] is
    // the first extent's ee_block): block 0, where "." and ".." live, is a hole.
    let Some((img, ino)) = damaged_image(dir.path(), "sif /d block[3] 1", "/d") else {
        return;
    };
    let fs = open(&img, true);
    let d = fs.resolve(b"/d").unwrap();
    let e = list(&fs, &d).unwrap_err();
    assert_eq!(e.errno(), libc::EUCLEAN, "{e}");
    let msg = e.to_string();
    assert!(msg.contains("block 0") && msg.contains("hole"), "{e}");
    let root = fs.resolve(b"/").unwrap();
    assert!(
        list(&fs, &root).unwrap().contains(&b"g".to_vec()),
        "the rest still lists"
    );
    fs.unmount().unwrap();
    assert_eq!(
        dumpe2fs_field(&img, "First error inode #").as_deref(),
        Some(&*ino.to_string())
    );
    assert_checked_and_repairable(&img);
}

#[test]
fn flags_the_file_system_lacks_make_the_inode_corrupt() {
    // CASEFOLD | EXTENTS, then INLINE_DATA | EXTENTS: neither feature is on.
    for flags in ["0x40080000", "0x10080000"] {
        let dir = tempfile::tempdir().unwrap();
        let Some((img, ino)) = damaged_image(dir.path(), &format!("sif /g flags {flags}"), "/g") else {
            return;
        };
        let fs = open(&img, true);
        let e = fs.resolve(b"/g").unwrap_err();
        assert_eq!(e.errno(), libc::EUCLEAN, "{flags}: {e}");
        assert!(e.to_string().contains(&format!("inode {ino}")), "{flags}: {e}");
        assert_eq!(
            fs.read_all(&fs.resolve(b"/f").unwrap(), 12288).unwrap(),
            vec![7u8; 12288]
        );
        fs.unmount().unwrap();
        assert_eq!(
            dumpe2fs_field(&img, "First error inode #").as_deref(),
            Some(&*ino.to_string()),
            "{flags}"
        );
        assert_checked_and_repairable(&img);
    }
}
