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
