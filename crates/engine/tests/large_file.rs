//! A file growing to 2 GiB or more on an image made without `large_file`
//! turns the feature on in the same transaction, as the kernel does
//! (`ext4_do_update_inode`): otherwise e2fsck reports the image ("contains
//! large files, but lacks LARGE_FILE flag") and older readers would drop
//! the size's high half. Extent-mapped (ext4) and block-mapped (ext2)
//! files, 1 KiB blocks so the resize inode alone does not set it.

mod common;

use common::{mkfs, open_rw};
use ext4kit_engine::{Attr, NodeKind, ROOT_INO};
use ext4kit_testkit::tools::{e2fsck_fn, run};

const ATTR: Attr = Attr {
    perm: 0o644,
    uid: 0,
    gid: 0,
};

fn has_large_file(img: &std::path::Path) -> bool {
    let out = run("dumpe2fs", &["-h", img.to_str().unwrap()]).unwrap();
    out.stdout
        .lines()
        .find(|l| l.starts_with("Filesystem features:"))
        .unwrap_or_default()
        .contains("large_file")
}

#[test]
fn a_file_past_2_gib_turns_large_file_on() {
    for kind in [&["-t", "ext4"][..], &["-t", "ext2"][..]] {
        let tmp = tempfile::tempdir().unwrap();
        let args = [kind, &["-b", "1024", "-O", "^large_file"][..]].concat();
        let Some(img) = mkfs(tmp.path(), None, &args, "64M") else {
            return;
        };
        assert!(!has_large_file(&img), "{kind:?}: mke2fs left large_file on");
        {
            let fs = open_rw(&img);
            let small = fs.create(ROOT_INO, b"small", NodeKind::Regular, ATTR).unwrap().ino;
            fs.write(small, (1 << 31) - 2, b"x").unwrap();
            fs.sync().unwrap();
            drop(fs);
            assert!(
                !has_large_file(&img),
                "{kind:?}: a file just under 2 GiB needs no large_file"
            );
            let fs = open_rw(&img);
            let big = fs.create(ROOT_INO, b"big", NodeKind::Regular, ATTR).unwrap().ino;
            fs.write(big, 3 << 30, b"past two gibibytes").unwrap();
            fs.unmount().unwrap();
        }
        assert!(has_large_file(&img), "{kind:?}: large_file after a 3 GiB file");
        let fsck = e2fsck_fn(&img).unwrap();
        assert!(fsck.is_clean(), "{kind:?}: e2fsck -fn:\n{}", fsck.output);
    }
}

/// The largest file size agrees with the kernel's for each mapping and
/// feature set: the engine accepts a truncate to it and refuses one byte
/// more (and a write there) with EFBIG; a kernel loop mount of the same
/// image does the same to a file of its own, and stats the engine's at
/// that size (the kernel refuses to load an inode past it).
#[test]
fn the_largest_file_is_the_kernels() {
    use ext4kit_engine::Error;
    for (label, args) in [
        (
            "ext4 4k ^huge_file",
            &["-t", "ext4", "-b", "4096", "-O", "^huge_file"][..],
        ),
        ("ext4 1k", &["-t", "ext4", "-b", "1024"][..]),
        ("ext2 4k", &["-t", "ext2", "-b", "4096"][..]),
        ("ext3 1k", &["-t", "ext3", "-b", "1024"][..]),
    ] {
        let tmp = tempfile::tempdir().unwrap();
        let Some(img) = mkfs(tmp.path(), None, args, "64M") else {
            return;
        };
        let limit = {
            let fs = open_rw(&img);
            let f = fs.create(ROOT_INO, b"f", NodeKind::Regular, ATTR).unwrap().ino;
            let limit = fs.max_file_size(&fs.inode(f).unwrap());
            fs.truncate(f, limit)
                .unwrap_or_else(|e| panic!("{label}: truncate to {limit}: {e}"));
            let err = fs.truncate(f, limit + 1).unwrap_err();
            assert!(matches!(err, Error::FileTooBig), "{label}: {err}");
            assert_eq!(err.errno(), libc::EFBIG);
            assert!(matches!(fs.write(f, limit, b"x"), Err(Error::FileTooBig)), "{label}");
            fs.write(f, limit - 1, b"x").unwrap();
            fs.unmount().unwrap();
            limit
        };
        let fsck = e2fsck_fn(&img).unwrap();
        assert!(fsck.is_clean(), "{label}: e2fsck -fn:\n{}", fsck.output);
        if let Err(why) = ext4kit_testkit::mount::can_loop_mount() {
            ext4kit_testkit::skipped!("{label}: the kernel's limit ({why})");
            assert!(std::env::var_os("CI").is_none(), "CI can loop-mount");
            continue;
        }
        let m = ext4kit_testkit::mount::LoopMount::rw(&img, &[]).unwrap();
        assert_eq!(std::fs::metadata(m.path().join("f")).unwrap().len(), limit, "{label}");
        let g = std::fs::File::create(m.path().join("g")).unwrap();
        g.set_len(limit)
            .unwrap_or_else(|e| panic!("{label}: the kernel refuses {limit}: {e}"));
        let e = g.set_len(limit + 1).unwrap_err();
        assert_eq!(
            e.raw_os_error(),
            Some(libc::EFBIG),
            "{label}: the kernel takes {}",
            limit + 1
        );
        drop(g);
        m.unmount().unwrap();
        let fsck = e2fsck_fn(&img).unwrap();
        assert!(
            fsck.is_clean(),
            "{label}: e2fsck -fn after the kernel:\n{}",
            fsck.output
        );
    }
}
