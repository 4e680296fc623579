//! Reading through every body format against the source tree mke2fs copied
//! in: extent trees, ext2 block maps up to double indirection, 64 KiB
//! blocks, inline data, and htree lookups that touch only the leaf they need.

mod common;

use std::path::Path;

use common::{mkfs, open, run};
use ext4kit_engine::{Error, Filesystem, OpenOptions};

/// Deterministic pseudo-random bytes.
fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn read_file(fs: &Filesystem, path: &str) -> Vec<u8> {
    let inode = fs.resolve(path.as_bytes()).unwrap();
    // Odd-sized chunks cross block and run boundaries.
    let mut out = Vec::new();
    let mut buf = vec![0u8; 70_001];
    loop {
        let n = fs.read_at(&inode, out.len() as u64, &mut buf).unwrap();
        if n == 0 {
            break;
        }
        out.extend_from_slice(&buf[..n]);
    }
    out
}

fn files(src: &Path) -> Vec<(String, Vec<u8>)> {
    let sizes = [0usize, 1, 1023, 1024, 1025, 12 * 1024, 13 * 1024, 300 * 1024, 3 << 20];
    sizes
        .iter()
        .enumerate()
        .map(|(i, &n)| {
            let name = format!("f{i}_{n}");
            let data = pattern(n, i as u64);
            std::fs::write(src.join(&name), &data).unwrap();
            (name, data)
        })
        .collect()
}

fn check_formats(args: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    std::fs::create_dir(&src).unwrap();
    let want = files(&src);
    let Some(img) = mkfs(dir.path(), Some(&src), args, "32M") else {
        return;
    };
    let fs = open(&img, OpenOptions::default()).unwrap();
    for (name, data) in &want {
        assert_eq!(&read_file(&fs, &format!("/{name}")), data, "{name} with {args:?}");
    }
}

#[test]
fn ext2_block_maps_single_and_double_indirect() {
    check_formats(&["-t", "ext2", "-b", "1024"]);
}

#[test]
fn ext3_block_maps() {
    check_formats(&["-t", "ext3", "-b", "4096"]);
}

#[test]
fn ext4_extents_1k_and_64k_blocks() {
    check_formats(&["-b", "1024"]);
    check_formats(&["-b", "65536"]);
}

#[test]
fn inline_data_files_and_directories() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    std::fs::create_dir_all(src.join("d")).unwrap();
    std::fs::write(src.join("tiny"), b"hello").unwrap();
    let spill = pattern(100, 7);
    std::fs::write(src.join("spill"), &spill).unwrap();
    std::fs::write(src.join("d/a"), b"a").unwrap();
    let Some(img) = mkfs(dir.path(), Some(&src), &["-O", "inline_data", "-I", "256"], "8M") else {
        return;
    };
    let fs = open(&img, OpenOptions::default()).unwrap();
    assert!(fs.resolve(b"/tiny").unwrap().has_inline_data());
    assert_eq!(read_file(&fs, "/tiny"), b"hello");
    assert_eq!(read_file(&fs, "/spill"), spill);
    let d = fs.resolve(b"/d").unwrap();
    assert!(d.has_inline_data());
    let names: Vec<_> = fs.read_dir(&d).unwrap().into_iter().map(|e| e.name).collect();
    assert_eq!(names, vec![b".".to_vec(), b"..".to_vec(), b"a".to_vec()]);
    assert_eq!(read_file(&fs, "/d/a"), b"a");
}

/// Builds an indexed directory of `n` entries (mke2fs -d writes linear
/// directories; `e2fsck -fyD` indexes them).
fn indexed_dir(dir: &Path, n: usize) -> Option<std::path::PathBuf> {
    let src = dir.join("src");
    std::fs::create_dir_all(src.join("big")).unwrap();
    for i in 0..n {
        std::fs::write(src.join(format!("big/entry-with-a-longer-name-{i:06}")), i.to_string()).unwrap();
    }
    let img = mkfs(dir, Some(&src), &["-b", "1024"], "64M")?;
    let out = std::process::Command::new("e2fsck")
        .args(["-fyD"])
        .arg(&img)
        .output()
        .unwrap();
    assert!(
        out.status.code().is_some_and(|c| c <= 1),
        "e2fsck -D: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    let htree = run("debugfs", &["-R", "htree /big", img.to_str().unwrap()]);
    assert!(
        htree.contains("Indirect levels: 1"),
        "expected a 2-level htree:\n{}",
        &htree[..htree.len().min(400)]
    );
    Some(img)
}

#[test]
fn htree_lookup_finds_every_name_of_a_two_level_index() {
    let dir = tempfile::tempdir().unwrap();
    let Some(img) = indexed_dir(dir.path(), 6000) else {
        return;
    };
    let fs = open(&img, OpenOptions::default()).unwrap();
    let big = fs.resolve(b"/big").unwrap();
    let entries = fs.read_dir(&big).unwrap();
    assert_eq!(entries.len(), 6002);
    for e in &entries {
        assert_eq!(
            fs.lookup(&big, &e.name).unwrap(),
            e.ino,
            "{}",
            String::from_utf8_lossy(&e.name)
        );
    }
    assert!(matches!(
        fs.lookup(&big, b"entry-with-a-longer-name-x"),
        Err(Error::NotFound(_))
    ));
    assert!(matches!(fs.lookup(&big, &[b'a'; 256]), Err(Error::NameTooLong(_))));
}

#[test]
fn htree_lookup_reads_only_the_leaf_it_needs() {
    use std::os::unix::fs::FileExt;
    let dir = tempfile::tempdir().unwrap();
    let Some(img) = indexed_dir(dir.path(), 3000) else {
        return;
    };
    let fs = open(&img, OpenOptions::default()).unwrap();
    let big = fs.resolve(b"/big").unwrap();
    let bs = fs.block_size() as u64;
    // e2fsck -D writes the leaves in hash order from logical block 1 on and
    // the index nodes after them. Take a name from leaf 2...
    let leaf2 = fs.map_range(&big, 2, 1).unwrap()[0].physical;
    let mut buf = vec![0u8; bs as usize];
    std::fs::File::open(&img)
        .unwrap()
        .read_exact_at(&mut buf, leaf2 * bs)
        .unwrap();
    let name_len = buf[6] as usize;
    let name = buf[8..8 + name_len].to_vec();
    // ...and corrupt leaf 1, where a scan would stop.
    let leaf1 = fs.map_range(&big, 1, 1).unwrap()[0].physical;
    let f = std::fs::OpenOptions::new().write(true).open(&img).unwrap();
    f.write_all_at(&[0xFF; 16], leaf1 * bs + 4).unwrap();
    drop(fs);
    let fs = open(&img, OpenOptions::default()).unwrap();
    let big = fs.resolve(b"/big").unwrap();
    assert!(fs.read_dir(&big).is_err(), "the scan must hit the corrupt leaf");
    assert!(
        fs.lookup(&big, &name).is_ok(),
        "the index must go straight to the last leaf"
    );
}

/// Directories the kernel indexed itself (written through a loop mount):
/// every name is found through the index.
#[test]
fn htree_lookup_in_kernel_written_directories() {
    use ext4kit_testkit::mount::{LoopMount, can_loop_mount};
    if let Err(why) = can_loop_mount() {
        ext4kit_testkit::skipped!("kernel-written htree ({why})");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    for args in [&["-b", "1024"][..], &["-b", "4096", "-O", "^metadata_csum"][..]] {
        let Some(img) = mkfs(dir.path(), None, args, "64M") else {
            return;
        };
        let mnt = LoopMount::rw(&img, &[]).unwrap();
        std::fs::create_dir(mnt.path().join("k")).unwrap();
        for i in 0..5000 {
            std::fs::write(mnt.path().join(format!("k/kernel-made-name-{i}")), b"").unwrap();
        }
        mnt.unmount().unwrap();
        let htree = run("debugfs", &["-R", "htree /k", img.to_str().unwrap()]);
        assert!(
            htree.contains("Root node dump"),
            "{args:?}: the kernel did not index /k"
        );
        let fs = open(&img, OpenOptions::default()).unwrap();
        let k = fs.resolve(b"/k").unwrap();
        for i in 0..5000 {
            fs.lookup(&k, format!("kernel-made-name-{i}").as_bytes()).unwrap();
        }
        assert!(matches!(fs.lookup(&k, b"kernel-made-name-x"), Err(Error::NotFound(_))));
    }
}

/// A directory without an index spread over many blocks: every name is
/// found in whichever block holds it, a missing one is `NotFound`, and the
/// same holds for a directory small enough to sit inline in its inode.
#[test]
fn linear_lookup_finds_names_in_every_block_and_inline() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    let (big, small) = (src.join("big"), src.join("small"));
    std::fs::create_dir_all(&big).unwrap();
    std::fs::create_dir_all(&small).unwrap();
    let names: Vec<String> = (0..600).map(|i| format!("entry-with-a-long-name-{i:05}")).collect();
    for n in &names {
        std::fs::write(big.join(n), b"").unwrap();
    }
    std::fs::write(small.join("only"), b"").unwrap();
    let args = ["-O", "^dir_index,inline_data", "-b", "1024"];
    let Some(img) = mkfs(dir.path(), Some(&src), &args, "16M") else {
        return;
    };
    let fs = open(&img, OpenOptions::default()).unwrap();
    let big = fs.resolve(b"/big").unwrap();
    assert!(big.size() > 20 * 1024, "the directory spans many blocks");
    for n in &names {
        let ino = fs.lookup(&big, n.as_bytes()).unwrap();
        assert_eq!(fs.resolve(format!("/big/{n}").as_bytes()).unwrap().ino, ino);
    }
    assert!(matches!(
        fs.lookup(&big, b"entry-with-a-long-name-00600"),
        Err(Error::NotFound(_))
    ));
    let small = fs.resolve(b"/small").unwrap();
    assert!(small.has_inline_data(), "mke2fs put the small directory inline");
    assert!(fs.lookup(&small, b"only").unwrap() > 0);
    assert!(matches!(fs.lookup(&small, b"other"), Err(Error::NotFound(_))));
}
