//! `ext4kit fsck -fn` on clean images of several layouts: it must exit 0
//! where `e2fsck -fn` does. Also the command's interface: e2fsck's exit
//! codes, the clean shortcut without `-f`, `--json`, refused repairs.

mod fsck_common;

use std::path::Path;
use std::time::Duration;

use fsck_common::*;

const LIMIT: Duration = Duration::from_secs(60);

fn assert_both_clean(image: &Path, what: &str) {
    let e = e2fsck_fn(image, LIMIT);
    assert_eq!(e.code, Some(0), "{what}: e2fsck -fn is not clean:\n{}", e.stdout);
    let k = ext4kit_fsck(&["-fn"], image, LIMIT);
    assert_eq!(
        k.code,
        Some(0),
        "{what}: ext4kit fsck -fn disagrees with e2fsck:\n{}{}",
        k.stdout,
        k.stderr
    );
}

#[test]
fn clean_images_of_every_layout_pass_as_e2fsck_says() {
    if !have_e2fsprogs() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    make_tree(&src);
    let layouts: [(&str, &[&str], &str); 6] = [
        ("mkfs.ext4", &["-b", "4096"], "ext4 4k"),
        ("mkfs.ext4", &["-b", "1024"], "ext4 1k"),
        ("mkfs.ext4", &["-O", "^metadata_csum"], "ext4 without metadata_csum"),
        ("mkfs.ext4", &["-O", "inline_data", "-I", "256"], "ext4 inline_data"),
        ("mkfs.ext3", &[], "ext3"),
        ("mkfs.ext2", &["-b", "1024"], "ext2 1k"),
    ];
    for (i, (prog, args, what)) in layouts.iter().enumerate() {
        let img = dir.path().join(format!("l{i}.img"));
        mkfs_d(prog, args, &src, &img, "24M");
        assert_both_clean(&img, what);
        // e2fsck -fyD indexes the 3,000-entry directory: an htree image.
        let out = std::process::Command::new("e2fsck")
            .args(["-fyD"])
            .arg(&img)
            .output()
            .unwrap();
        assert!(out.status.code().is_some_and(|c| c <= 1), "{what}: e2fsck -fyD failed");
        assert_both_clean(&img, &format!("{what}, htree after e2fsck -D"));
    }
}

#[test]
fn an_itree_image_filled_through_the_library_is_clean() {
    if !have_e2fsprogs() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    make_tree(&src);
    let img = dir.path().join("itree.img");
    let k = env!("CARGO_BIN_EXE_ext4kit");
    let imgs = img.to_str().unwrap();
    let ok = |args: &[&str]| {
        let r = run_timed(k, args, LIMIT);
        assert_eq!(r.code, Some(0), "{args:?}: {}", r.stderr);
    };
    ok(&["mkfs", "-q", "-O", "itree", imgs, "32M"]);
    ok(&["import", imgs, src.to_str().unwrap(), "/"]);
    let r = ext4kit_fsck(&["-fn"], &img, LIMIT);
    assert_eq!(r.code, Some(0), "itree image: {}", r.stdout);
    // A damaged itree node is found (its checksum covers the node).
    let st = run_timed(k, &["stat", imgs, "/huge"], LIMIT);
    assert!(
        st.stdout.contains("INDEX"),
        "the big directory is indexed: {}",
        st.stdout
    );
    // e2fsck does not know the feature: drop it, then both must agree.
    ok(&["tune", "-O", "^itree", imgs]);
    assert_both_clean(&img, "ext4kit image after tune -O ^itree");
}

#[test]
fn a_damaged_itree_node_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    make_tree(&src);
    let img = dir.path().join("itree.img");
    let k = env!("CARGO_BIN_EXE_ext4kit");
    let imgs = img.to_str().unwrap();
    assert_eq!(
        run_timed(k, &["mkfs", "-q", "-O", "itree", "-b", "1024", imgs, "32M"], LIMIT).code,
        Some(0)
    );
    assert_eq!(
        run_timed(k, &["import", imgs, src.to_str().unwrap(), "/"], LIMIT).code,
        Some(0)
    );
    // Blocks pass 5 would call unused if the itree walk did not claim them
    // are the itree's; find them by dropping the feature on a copy.
    let copy = dir.path().join("copy.img");
    std::fs::copy(&img, &copy).unwrap();
    let before = ext4kit_fsck(&["-fn", "--json"], &img, LIMIT);
    assert_eq!(before.code, Some(0), "{}", before.stdout);
    let itree_blocks = itree_blocks(&img, dir.path());
    assert!(!itree_blocks.is_empty(), "the 3,000-name directory has an itree");
    let mut bytes = std::fs::read(&img).unwrap();
    let off = itree_blocks[itree_blocks.len() / 2] as usize * 1024 + 100;
    bytes[off] ^= 0x40;
    std::fs::write(&img, &bytes).unwrap();
    let after = ext4kit_fsck(&["-fn", "--json"], &img, LIMIT);
    assert_eq!(after.code, Some(4), "{}", after.stdout);
    assert!(after.stdout.contains("P2_ITREE_BAD"), "{}", after.stdout);
}

/// The itree's node blocks: the ones a check of a copy whose directory
/// has its itree flag cleared reports as marked in the bitmap but unused.
fn itree_blocks(img: &Path, dir: &Path) -> Vec<u64> {
    use ext4kit_format::group_desc::RawGroupDesc;
    use ext4kit_format::inode::set_inode_checksum;
    use ext4kit_format::superblock::{Geometry, RawSuperblock};
    let k = env!("CARGO_BIN_EXE_ext4kit");
    let st = run_timed(k, &["stat", img.to_str().unwrap(), "/huge"], LIMIT);
    let ino: u32 = st.stdout.split_whitespace().nth(1).unwrap().parse().unwrap();
    let mut bytes = std::fs::read(img).unwrap();
    let sb = RawSuperblock::parse(&bytes[1024..2048]).unwrap();
    let geo = Geometry::from_superblock(&sb).unwrap();
    let bs = geo.block_size as usize;
    let (g, idx) = geo.inode_location(ino).unwrap();
    let gdt = (geo.first_data_block as usize + 1) * bs + g as usize * usize::from(geo.desc_size);
    let gd = RawGroupDesc::parse(&bytes[gdt..], usize::from(geo.desc_size)).unwrap();
    let isz = usize::from(geo.inode_size);
    let at = gd.inode_table() as usize * bs + idx as usize * isz;
    let rec = &mut bytes[at..at + isz];
    rec[0x20 + 2] &= !0x80; // i_flags bit 23: ITREE_FL
    set_inode_checksum(rec, sb.csum_seed(), ino).unwrap();
    let probe = dir.join("probe.img");
    std::fs::write(&probe, &bytes).unwrap();
    let r = ext4kit_fsck(&["-fn", "--json"], &probe, LIMIT);
    let v: serde_json::Value = serde_json::from_str(&r.stdout).unwrap();
    let mut blocks = Vec::new();
    for f in v["report"]["findings"].as_array().unwrap() {
        let name = f["code"]["name"].as_str().unwrap_or("");
        if name == "P5_BLOCK_UNUSED" || name == "P5_BLOCK_RANGE_UNUSED" {
            let msg = f["message"].as_str().unwrap();
            let range = msg.split_whitespace().nth(1).unwrap();
            let mut it = range.split('-').map(|x| x.parse::<u64>().unwrap());
            let a = it.next().unwrap();
            let b = it.next().unwrap_or(a);
            blocks.extend(a..=b);
        }
    }
    blocks
}

#[test]
fn interface_follows_e2fsck() {
    if !have_e2fsprogs() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    std::fs::create_dir(&src).unwrap();
    std::fs::write(src.join("a"), b"a").unwrap();
    let img = dir.path().join("i.img");
    mkfs_d("mkfs.ext4", &[], &src, &img, "8M");
    // Clean superblock, no -f: the superblock check only.
    let r = ext4kit_fsck(&["-n"], &img, LIMIT);
    assert_eq!(r.code, Some(0));
    assert!(r.stdout.contains("clean"), "{}", r.stdout);
    // A repair of a clean image changes nothing, byte for byte, forced or
    // not; usage errors are 16.
    let before = std::fs::read(&img).unwrap();
    for flags in [&["-p"][..], &["-y"], &["-fp"], &["-fy"]] {
        let r = ext4kit_fsck(flags, &img, LIMIT);
        assert_eq!(r.code, Some(0), "{flags:?}: {}{}", r.stdout, r.stderr);
        assert!(
            std::fs::read(&img).unwrap() == before,
            "{flags:?} changed a clean image"
        );
    }
    assert_eq!(ext4kit_fsck(&["-n", "-y"], &img, LIMIT).code, Some(16));
    assert_eq!(ext4kit_fsck(&["-n", "-E", "bogus"], &img, LIMIT).code, Some(16));
    assert_eq!(ext4kit_fsck(&["-n", "--no-such-flag"], &img, LIMIT).code, Some(16));
    // Not a file system: operational error.
    let junk = dir.path().join("junk.img");
    std::fs::write(&junk, vec![0u8; 1 << 20]).unwrap();
    assert_eq!(ext4kit_fsck(&["-fn"], &junk, LIMIT).code, Some(8));
    // -E journal_only with -n reports the journal and stops.
    let r = ext4kit_fsck(&["-n", "-E", "journal_only"], &img, LIMIT);
    assert_eq!(r.code, Some(0));
    assert!(r.stdout.contains("journal"), "{}", r.stdout);
    // --json: the report, e2fsck's numbers.
    let r = ext4kit_fsck(&["-fn", "--json", "-C", "0"], &img, LIMIT);
    assert_eq!(r.code, Some(0));
    let json = r
        .stdout
        .lines()
        .skip_while(|l| !l.starts_with('{'))
        .collect::<Vec<_>>()
        .join("\n");
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["exit_code"], 0);
    assert!(v["report"]["findings"].as_array().unwrap().is_empty());
    // An unknown incompatible feature is refused, naming it.
    let mut bytes = std::fs::read(&img).unwrap();
    let mut sb = ext4kit_format::superblock::RawSuperblock::parse(&bytes[1024..2048]).unwrap();
    sb.s_feature_incompat.set(sb.s_feature_incompat.get() | 1 << 30);
    sb.set_checksum();
    bytes[1024..2048].copy_from_slice(&sb.encode());
    std::fs::write(&img, &bytes).unwrap();
    let r = ext4kit_fsck(&["-fn"], &img, LIMIT);
    assert_eq!(r.code, Some(8));
    assert!(
        r.stderr.contains("FEATURE_I30") || r.stdout.contains("FEATURE_I30"),
        "{}{}",
        r.stdout,
        r.stderr
    );
}

/// An image of `args` (blocks of 4 KiB or less) whose journal holds one committed transaction
/// (written by debugfs `jo`/`jw`/`jc`) over the free block `free`, so
/// that recovery is the only thing a check has to do.
fn journal_to_replay(dir: &Path, tag: &str, args: &[&str], free: u64) -> std::path::PathBuf {
    let img = dir.join(format!("{tag}.img"));
    let mut a = vec!["-q", "-F"];
    a.extend_from_slice(args);
    a.extend([img.to_str().unwrap(), "32M"]);
    let out = std::process::Command::new("mkfs.ext4").args(&a).output().unwrap();
    assert!(out.status.success(), "mkfs.ext4 {a:?}");
    let data = dir.join(format!("{tag}.data"));
    // debugfs writes nothing for a file shorter than a block.
    let mut block = b"journalled block\n".to_vec();
    block.resize(4096, 0);
    std::fs::write(&data, &block).unwrap();
    let cmds = dir.join(format!("{tag}.cmds"));
    std::fs::write(&cmds, format!("jo\njw -b {free} {}\njc\n", data.display())).unwrap();
    let out = std::process::Command::new("debugfs")
        .arg("-w")
        .arg("-f")
        .arg(&cmds)
        .arg(&img)
        .output()
        .unwrap();
    assert!(out.status.success(), "debugfs journal writes");
    let sb = std::process::Command::new("dumpe2fs")
        .arg("-h")
        .arg(&img)
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&sb.stdout).contains("needs_recovery"),
        "{tag}: debugfs left no transaction to replay"
    );
    img
}

/// A clean journal replay is not a change to e2fsck: it re-opens the image
/// after replaying and exits 0 unless the check then fixes something. The
/// exit status of every mode (-p, -n, -y, with and without -f) equals
/// e2fsck 1.47's on the same image, and each repair leaves it replayed
/// and clean.
#[test]
fn a_pure_journal_replay_exits_as_e2fsck_does() {
    if !have_e2fsprogs() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let cases: [(&str, &[&str], u64); 2] = [("j4k", &["-b", "4096"], 6000), ("j1k", &["-b", "1024"], 22000)];
    for (tag, args, free) in cases {
        let base = journal_to_replay(dir.path(), tag, args, free);
        for mode in ["-p", "-n", "-y", "-fp", "-fn", "-fy"] {
            let (theirs, ours) = (dir.path().join("e2.img"), dir.path().join("k.img"));
            std::fs::copy(&base, &theirs).unwrap();
            std::fs::copy(&base, &ours).unwrap();
            let e = run_timed("e2fsck", &[mode, theirs.to_str().unwrap()], LIMIT);
            let k = ext4kit_fsck(&[mode], &ours, LIMIT);
            assert_eq!(
                k.code, e.code,
                "{tag} {mode}: ext4kit fsck exits {:?}, e2fsck {:?}\n{}{}",
                k.code, e.code, k.stdout, k.stderr
            );
            if mode.ends_with('n') {
                continue;
            }
            let fsck = e2fsck_fn(&ours, LIMIT);
            assert_eq!(
                fsck.code,
                Some(0),
                "{tag} {mode}: not clean after the replay:\n{}",
                fsck.stdout
            );
            let blk = |p: &Path| {
                let bs = if args[1] == "4096" { 4096 } else { 1024 };
                std::fs::read(p).unwrap()[(free * bs) as usize..][..17].to_vec()
            };
            assert_eq!(
                blk(&ours),
                b"journalled block\n",
                "{tag} {mode}: the block was not replayed"
            );
            assert_eq!(blk(&ours), blk(&theirs));
        }
    }
}

/// A journal the kernel left dirty (the image copied while mounted, after
/// `sync`): the replayed superblock keeps the free counts of the mount,
/// which the kernel tracked only in memory. e2fsck sets them silently when
/// it skips the full check (exit 0) and fixes them in pass 5 with `-f`
/// (exit 1); every mode's exit status equals e2fsck's, and a forced
/// repair leaves the counts e2fsck leaves.
#[test]
fn a_kernel_dirty_journal_exits_as_e2fsck_does() {
    if !have_e2fsprogs() {
        return;
    }
    if ext4kit_testkit::tools::skip_unless(ext4kit_testkit::mount::can_loop_mount()).is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    for bs in ["4096", "1024"] {
        let img = dir.path().join(format!("k{bs}.img"));
        let out = std::process::Command::new("mkfs.ext4")
            .args(["-q", "-F", "-b", bs])
            .arg(&img)
            .arg("64M")
            .output()
            .unwrap();
        assert!(out.status.success());
        let dirty = dir.path().join(format!("dirty{bs}.img"));
        {
            let m = ext4kit_testkit::mount::LoopMount::rw(&img, &[]).expect("kernel mount");
            for i in 0..40u32 {
                std::fs::write(m.path().join(format!("f{i}")), vec![i as u8; 5000]).unwrap();
            }
            assert!(std::process::Command::new("sync").status().unwrap().success());
            std::fs::copy(&img, &dirty).unwrap();
            m.unmount().expect("unmount");
        }
        for mode in ["-p", "-n", "-y", "-fp", "-fn", "-fy"] {
            let (theirs, ours) = (dir.path().join("e2.img"), dir.path().join("k.img"));
            std::fs::copy(&dirty, &theirs).unwrap();
            std::fs::copy(&dirty, &ours).unwrap();
            let e = run_timed("e2fsck", &[mode, theirs.to_str().unwrap()], LIMIT);
            let k = ext4kit_fsck(&[mode], &ours, LIMIT);
            assert_eq!(
                k.code, e.code,
                "{bs} {mode}: ext4kit fsck exits {:?}, e2fsck {:?}\n{}{}\n{}",
                k.code, e.code, k.stdout, k.stderr, e.stdout
            );
            if mode.ends_with('n') {
                continue;
            }
            let fsck = e2fsck_fn(&ours, LIMIT);
            assert_eq!(fsck.code, Some(0), "{bs} {mode}: not clean:\n{}", fsck.stdout);
            if mode.starts_with("-f") {
                let counts = |p: &Path| {
                    let out = run_timed("dumpe2fs", &["-h", p.to_str().unwrap()], LIMIT).stdout;
                    out.lines()
                        .filter(|l| l.starts_with("Free blocks:") || l.starts_with("Free inodes:"))
                        .map(str::to_string)
                        .collect::<Vec<_>>()
                };
                assert_eq!(counts(&ours), counts(&theirs), "{bs} {mode}: free counts");
            }
        }
    }
}
