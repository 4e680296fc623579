//! Images mke2fs makes, altered with `debugfs -w`: the check-only verdict
//! agrees with `e2fsck -fn` (exit status 0 or 4), each problem is reported
//! once, and `fsck -y` leaves nothing for e2fsck.

mod support;

use support::*;

use std::process::Command;

use ext4kit_engine::device::MemDevice;
use ext4kit_fsck::{Mode, Options, Report};

/// `mkfs.ext4 -q -F <args> <img> <size>`, then each debugfs `-w` request;
/// the image's bytes, or `None` (said loudly) without e2fsprogs.
fn made(args: &[&str], size: &str, requests: &[&str]) -> Option<Vec<u8>> {
    if Command::new("mkfs.ext4").arg("-V").output().is_err() {
        ext4kit_testkit::skipped!("mkfs.ext4 is not installed (apt-get install e2fsprogs)");
        assert!(std::env::var_os("CI").is_none(), "CI has e2fsprogs");
        return None;
    }
    let f = tempfile::NamedTempFile::new().unwrap();
    let out = Command::new("mkfs.ext4")
        .args(["-q", "-F"])
        .args(args)
        .arg(f.path())
        .arg(size)
        .env("MKE2FS_CONFIG", "/etc/mke2fs.conf")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "mkfs.ext4: {}",
        String::from_utf8_lossy(&out.stderr)
    );
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
    Some(std::fs::read(f.path()).unwrap())
}

/// `fsck -fn` in process.
fn check(bytes: &[u8]) -> Report {
    let dev = MemDevice::new(bytes.to_vec());
    let opts = Options {
        force: true,
        mode: Mode::Check,
        ..Options::default()
    };
    ext4kit_fsck::check(&dev, &opts, &mut |_| {}).expect("the check runs")
}

/// The check-only verdict is e2fsck's: clean exactly when `e2fsck -fn` exits 0.
fn assert_verdict_agrees(bytes: &[u8], what: &str) -> Report {
    let rep = check(bytes);
    let (code, text) = e2fsck_fn(bytes);
    let ours = if rep.errors() > 0 { 4 } else { 0 };
    assert_eq!(Some(ours), code, "{what}: ours {:?}\ne2fsck -fn:\n{text}", rep.findings);
    rep
}

fn count(rep: &Report, code: &str) -> usize {
    rep.findings.iter().filter(|f| f.code.name == code).count()
}

#[test]
fn descriptors_of_128_bytes_are_checked_and_rewritten() {
    let Some(clean) = made(
        &["-b", "1024", "-O", "64bit,metadata_csum", "-E", "desc_size=128"],
        "16M",
        &[],
    ) else {
        return;
    };
    assert_verdict_agrees(&clean, "fresh");
    let bad = made(
        &["-b", "1024", "-O", "64bit,metadata_csum", "-E", "desc_size=128"],
        "16M",
        &["set_bg 1 free_blocks_count 5", "set_bg 1 checksum calc"],
    )
    .unwrap();
    let rep = assert_verdict_agrees(&bad, "a wrong free count");
    assert_eq!(count(&rep, "P5_FREE_BLOCK_COUNT_GROUP"), 1, "{:?}", rep.findings);
    let (out, fixed) = repair_yes(&bad);
    assert!(
        fixed_codes(&out).contains(&"P5_FREE_BLOCK_COUNT_GROUP"),
        "{:?}",
        codes(&out)
    );
    e2fsck_clean(&fixed);
}

#[test]
fn a_resize_inode_left_without_the_feature_is_reported_once() {
    let Some(bad) = made(
        &["-b", "1024", "-g", "1024", "-O", "resize_inode"],
        "16M",
        &["feature -resize_inode"],
    ) else {
        return;
    };
    let rep = assert_verdict_agrees(&bad, "resize_inode cleared");
    assert_eq!(count(&rep, "P0_CLEAR_RESIZE_INODE"), 1, "{:?}", rep.findings);
    let (_, fixed) = repair_yes(&bad);
    e2fsck_clean(&fixed);
}

#[test]
fn an_inline_directory_size_is_what_it_holds() {
    let Some(bad) = made(
        &["-b", "1024", "-O", "inline_data"],
        "8M",
        &["mkdir d", "sif d size 56"],
    ) else {
        return;
    };
    let rep = assert_verdict_agrees(&bad, "inline dir of size 56");
    assert_eq!(count(&rep, "P1_BAD_I_SIZE"), 1, "{:?}", rep.findings);
    let (out, fixed) = repair_yes(&bad);
    assert!(fixed_codes(&out).contains(&"P1_BAD_I_SIZE"), "{:?}", codes(&out));
    e2fsck_clean(&fixed);
    assert_eq!(check(&fixed).findings.len(), 0);
}

#[test]
fn group_flags_cleared_with_debugfs_agree_with_e2fsck() {
    for g in ["1", "2"] {
        let req = format!("set_bg {g} flags 0");
        let Some(bad) = made(&[], "64M", &[&req]) else {
            return;
        };
        assert_verdict_agrees(&bad, &req);
        let (_, fixed) = repair_yes(&bad);
        e2fsck_clean(&fixed);
    }
    let script = "set_bg 2 itable_unused 0\nset_bg 2 flags 0\nset_bg 2 checksum calc\n";
    let f = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(f.path(), format!("seti <16384>\nfreei <16384>\n{script}")).unwrap();
    let Some(img) = made(&[], "64M", &[]) else { return };
    let t = temp_image(&img);
    let out = Command::new("debugfs")
        .args(["-w", "-f"])
        .arg(f.path())
        .arg(t.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let rep = assert_verdict_agrees(&std::fs::read(t.path()).unwrap(), "INODE_UNINIT cleared");
    assert_eq!(rep.errors(), 0, "{:?}", rep.findings);
}

/// e2fsck answers the superblock checks before it marks the file system
/// valid: left unrepaired, a too-big `s_first_meta_bg` leaves `-n` clean,
/// and the blocks the meta_bg layout reserves stay reserved.
#[test]
fn a_first_meta_bg_too_big_leaves_a_check_clean() {
    let Some(dir) = ext4kit_testkit::peer::peer_data_dir() else {
        ext4kit_testkit::skipped!("the e2fsprogs test images are not present");
        assert!(std::env::var_os("CI").is_none(), "CI has the peer data");
        return;
    };
    let gz = dir.join("f_first_meta_bg_too_big/image.gz");
    let out = Command::new("zcat").arg(&gz).output().unwrap();
    assert!(out.status.success(), "zcat {}", gz.display());
    let rep = assert_verdict_agrees(&out.stdout, "f_first_meta_bg_too_big");
    assert_eq!(count(&rep, "P0_FIRST_META_BG_TOO_BIG"), 1, "{:?}", rep.findings);
    assert_eq!(rep.findings.len(), 1, "{:?}", rep.findings);
    let (_, fixed) = repair_yes(&out.stdout);
    e2fsck_clean(&fixed);
}

/// A casefold htree directory hashes folded names: the check agrees with
/// e2fsck that one ext4kit filled is clean (unfolded hashes would put
/// names outside their leaves' ranges).
#[test]
fn a_casefold_htree_directory_is_clean() {
    use ext4kit_engine::{NodeKind, ROOT_INO};
    let (dev, fs) = engine_fs(32 << 20, 0x3c, |o| o.feature_edits.push(("casefold".into(), true)));
    let d = fs.create(ROOT_INO, b"d", NodeKind::Directory, ATTR).unwrap();
    let cf = ext4kit_format::inode::flags::CASEFOLD;
    fs.set_flags(d.ino, d.raw.flags() | cf, false).unwrap();
    for i in 0..600 {
        fs.create(d.ino, format!("Größe_Σ_{i}").as_bytes(), NodeKind::Regular, ATTR)
            .unwrap();
    }
    fs.unmount().expect("unmount");
    let rep = assert_verdict_agrees(&dev.snapshot(), "casefold htree");
    assert_eq!(rep.errors(), 0, "{:?}", rep.findings);
}
