//! `ext4kit fsck -p`, `-y` and `-z` on images `mkfs.ext4 -d` builds and
//! `debugfs` damages: the repair is written, leaves data alone and the
//! image e2fsck-clean; `e2undo` puts the damaged image back byte for byte;
//! preen repairs only what e2fsck's preen repairs and otherwise changes
//! nothing and says to run fsck by hand.

mod fsck_common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use fsck_common::{e2fsck_fn, ext4kit_fsck, have_e2fsprogs, make_tree, mkfs_d};

const LIMIT: Duration = Duration::from_secs(60);

fn debugfs_w(img: &Path, cmds: &[&str]) {
    for c in cmds {
        let out = Command::new("debugfs")
            .args(["-w", "-R", c])
            .arg(img)
            .output()
            .expect("debugfs");
        assert!(
            out.status.success(),
            "debugfs {c}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

fn ext4kit_cat(img: &Path, path: &str) -> Vec<u8> {
    let out = Command::new(env!("CARGO_BIN_EXE_ext4kit"))
        .args(["cat", img.to_str().unwrap(), path])
        .output()
        .expect("ext4kit cat");
    assert!(
        out.status.success(),
        "cat {path}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// A 32 MiB image of the test tree with its group summaries damaged:
/// blocks of `/big` marked free, free blocks marked used, counts off.
fn damaged(dir: &Path, features: &[&str]) -> std::path::PathBuf {
    let src = dir.join("src");
    make_tree(&src);
    let img = dir.join("d.img");
    mkfs_d("mkfs.ext4", features, &src, &img, "32M");
    let out = Command::new("debugfs")
        .args(["-R", "bmap /big 3"])
        .arg(&img)
        .output()
        .unwrap();
    let blk = String::from_utf8_lossy(&out.stdout).trim().to_string();
    debugfs_w(
        &img,
        &[
            &format!("freeb {blk} 20"),
            "setb 7000 30",
            "set_bg 1 free_blocks_count 17",
            "set_bg 2 used_dirs_count 9",
        ],
    );
    assert_eq!(e2fsck_fn(&img, LIMIT).code, Some(4), "the damage is real");
    img
}

#[test]
fn a_repair_is_written_keeps_the_data_and_e2undo_takes_it_back() {
    if !have_e2fsprogs() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let img = damaged(dir.path(), &[]);
    let before = std::fs::read(&img).unwrap();
    let undo = dir.path().join("fsck.undo");
    let r = ext4kit_fsck(&["-fy", "-z", undo.to_str().unwrap()], &img, LIMIT);
    assert_eq!(r.code, Some(1), "repaired: {}{}", r.stdout, r.stderr);
    assert!(r.stdout.contains("FILE SYSTEM WAS MODIFIED"), "{}", r.stdout);
    let e = e2fsck_fn(&img, LIMIT);
    assert_eq!(e.code, Some(0), "e2fsck after the repair:\n{}", e.stdout);
    assert_eq!(ext4kit_fsck(&["-fn"], &img, LIMIT).code, Some(0));
    assert_eq!(ext4kit_cat(&img, "/big"), vec![0x5au8; 300 * 1024]);
    assert_eq!(ext4kit_cat(&img, "/d1/hard"), b"hello 2\n");
    // A second repair finds nothing and writes nothing.
    let repaired = std::fs::read(&img).unwrap();
    assert_eq!(ext4kit_fsck(&["-fy"], &img, LIMIT).code, Some(0));
    assert!(std::fs::read(&img).unwrap() == repaired, "a clean image was rewritten");
    // e2undo replays the undo file: the damaged image, byte for byte.
    std::fs::write(&img, &repaired).unwrap();
    let out = Command::new("e2undo")
        .arg(&undo)
        .arg(&img)
        .output()
        .expect("e2undo (e2fsprogs)");
    assert!(
        out.status.success(),
        "e2undo: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        std::fs::read(&img).unwrap() == before,
        "e2undo did not restore the image"
    );
    assert_eq!(e2fsck_fn(&img, LIMIT).code, Some(4), "the damage is back");
}

#[test]
fn preen_repairs_what_is_safe_and_stops_at_the_rest() {
    if !have_e2fsprogs() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let img = damaged(dir.path(), &["-O", "^metadata_csum"]);
    let r = ext4kit_fsck(&["-fp"], &img, LIMIT);
    assert_eq!(
        r.code,
        Some(1),
        "summaries are preen's to repair: {}{}",
        r.stdout,
        r.stderr
    );
    assert_eq!(e2fsck_fn(&img, LIMIT).code, Some(0));
    // An entry naming an inode past the end is not preen's to repair
    // (e2fsck -p: "UNEXPECTED INCONSISTENCY"): nothing is written.
    let out = Command::new("debugfs")
        .args(["-R", "bmap / 0"])
        .arg(&img)
        .output()
        .unwrap();
    let root_blk: u64 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
    let mut bytes = std::fs::read(&img).unwrap();
    let bs = 1024usize << u32::from_le_bytes(bytes[1024 + 24..1024 + 28].try_into().unwrap());
    let at = root_blk as usize * bs;
    let block = &bytes[at..at + bs];
    let name = block.windows(4).position(|w| w == b"f10\0").expect("entry f10") - 8;
    bytes[at + name..at + name + 4].copy_from_slice(&0x7fff_fff0u32.to_le_bytes());
    std::fs::write(&img, &bytes).unwrap();
    let r = ext4kit_fsck(&["-fp"], &img, LIMIT);
    assert_eq!(r.code, Some(4), "{}{}", r.stdout, r.stderr);
    assert!(r.stdout.contains("UNEXPECTED INCONSISTENCY"), "{}", r.stdout);
    assert!(
        std::fs::read(&img).unwrap() == bytes,
        "preen changed an image it could not repair"
    );
    assert_eq!(
        e2fsck_fn(&img, LIMIT).code,
        Some(4),
        "still damaged, as e2fsck -p leaves it"
    );
}

/// `-D` on a clean image from `mkfs.ext4 -d` (whose 3,000-entry `/huge`
/// is linear): every directory is rebuilt, `/huge` is indexed, e2fsck
/// finds the result clean and ext4kit nothing more to repair; `-n` with
/// `-D` is a usage error, as in e2fsck.
#[test]
fn dash_d_indexes_a_large_linear_directory() {
    if !have_e2fsprogs() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    make_tree(&src);
    let img = dir.path().join("c.img");
    mkfs_d("mkfs.ext4", &[], &src, &img, "32M");
    let r = ext4kit_fsck(&["-nD"], &img, LIMIT);
    assert_eq!(r.code, Some(16), "-n and -D: {}", r.stderr);
    let r = ext4kit_fsck(&["-fyD"], &img, LIMIT);
    assert_eq!(r.code, Some(1), "rebuilt: {}{}", r.stdout, r.stderr);
    assert!(r.stdout.contains("P3A_OPTIMIZE_DIR"), "{}", r.stdout);
    let e = e2fsck_fn(&img, LIMIT);
    assert_eq!(e.code, Some(0), "e2fsck -fn: {}", e.stdout);
    let dump = Command::new("debugfs")
        .args(["-R", "htree_dump /huge"])
        .arg(&img)
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&dump.stdout).contains("Root node dump"),
        "/huge is indexed"
    );
    let again = ext4kit_fsck(&["-fy"], &img, LIMIT);
    assert_eq!(again.code, Some(0), "nothing left: {}", again.stdout);
}
