//! Pass 3, pass 4 and orphan-list repairs on images the engine writes,
//! damaged precisely with `debugfs -w` (an entry unlinked without touching
//! the link count, a link count changed, an orphan list planted): the
//! repair leaves nothing for `ext4kit` or `e2fsck -fn` to find, and what
//! should survive does.

mod support;

use support::*;

use std::process::Command;

use ext4kit_engine::{NodeKind, ROOT_INO};
use ext4kit_fsck::repair::Outcome;

/// An image with `/file` (20000 bytes), `/dir/inner` and `/lost+found`;
/// returns the bytes and the inodes of file and dir.
fn build() -> (Vec<u8>, u32, u32) {
    let (dev, fs) = engine_fs(8 << 20, 9, |_| {});
    let file = fs.create(ROOT_INO, b"file", NodeKind::Regular, ATTR).unwrap().ino;
    fs.write(file, 0, &vec![0xab; 20_000]).unwrap();
    let dir = fs.create(ROOT_INO, b"dir", NodeKind::Directory, ATTR).unwrap().ino;
    fs.create(dir, b"inner", NodeKind::Regular, ATTR).unwrap();
    fs.unmount().expect("unmount");
    (dev.snapshot(), file, dir)
}

/// Runs debugfs `-w` requests on the image.
fn debugfs(bytes: &[u8], requests: &[&str]) -> Vec<u8> {
    let f = temp_image(bytes);
    for r in requests {
        let out = Command::new("debugfs")
            .args(["-w", "-R", r])
            .arg(f.path())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "debugfs {r}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    std::fs::read(f.path()).unwrap()
}

fn assert_clean(out: &Outcome, bytes: &[u8]) {
    assert_eq!(out.verdict.unfixed_errors(), 0, "left: {:?}", out.verdict.findings);
    let f = temp_image(bytes);
    let e2 = Command::new("e2fsck").arg("-fn").arg(f.path()).output().unwrap();
    assert_eq!(
        e2.status.code(),
        Some(0),
        "e2fsck -fn: {}",
        String::from_utf8_lossy(&e2.stdout)
    );
}

#[test]
fn a_wrong_link_count_is_set_to_the_references() {
    let (bytes, file, _) = build();
    let bad = debugfs(&bytes, &[&format!("sif <{file}> links_count 7")]);
    let (out, fixed) = repair_yes(&bad);
    assert!(codes(&out).contains(&"P4_BAD_REF_COUNT"), "{:?}", codes(&out));
    assert_clean(&out, &fixed);
    assert!(debugfs_out(&fixed, &format!("stat <{file}>")).contains("Links: 1"));
}

#[test]
fn an_unattached_file_goes_to_lost_found() {
    let (bytes, file, _) = build();
    let bad = debugfs(&bytes, &["unlink /file"]);
    let (out, fixed) = repair_yes(&bad);
    assert!(codes(&out).contains(&"P4_UNATTACHED_INODE"), "{:?}", codes(&out));
    assert_clean(&out, &fixed);
    let ls = debugfs_out(&fixed, "ls -l /lost+found");
    assert!(ls.contains(&format!("#{file}")), "{ls}");
    assert!(ls.contains("20000"), "{ls}");
}

#[test]
fn an_unconnected_directory_goes_to_lost_found_with_its_dotdot() {
    let (bytes, _, dir) = build();
    let bad = debugfs(&bytes, &["unlink /dir"]);
    let (out, fixed) = repair_yes(&bad);
    let c = codes(&out);
    assert!(c.contains(&"P3_UNCONNECTED_DIR"), "{c:?}");
    assert_clean(&out, &fixed);
    let ls = debugfs_out(&fixed, &format!("ls /lost+found/#{dir}"));
    assert!(ls.contains("inner"), "{ls}");
    let lf = debugfs_out(&fixed, "stat /lost+found");
    assert!(lf.contains("Links: 3"), "{lf}");
}

#[test]
fn an_orphan_being_truncated_is_released_and_the_list_cleared() {
    let (bytes, file, _) = build();
    let bad = debugfs(&bytes, &[&format!("ssv last_orphan {file}")]);
    let (out, fixed) = repair_yes(&bad);
    assert!(codes(&out).contains(&"P0_ORPHAN_CLEAR_INODE"), "{:?}", codes(&out));
    assert_clean(&out, &fixed);
    let sb = debugfs_out(&fixed, "stats");
    assert!(!sb.contains("First orphan inode"), "s_last_orphan left set");
    let st = debugfs_out(&fixed, &format!("stat <{file}>"));
    assert!(st.contains("Size: 20000"), "{st}");
}

#[test]
fn a_bad_orphan_list_head_is_dropped() {
    let (bytes, _, _) = build();
    let bad = debugfs(&bytes, &["ssv last_orphan 5"]);
    let (out, fixed) = repair_yes(&bad);
    assert!(
        codes(&out).contains(&"P0_ORPHAN_ILLEGAL_HEAD_INODE"),
        "{:?}",
        codes(&out)
    );
    assert_clean(&out, &fixed);
}
