//! Bigalloc images (`-O bigalloc -C N`): block bitmaps and descriptor
//! counts in clusters, files mapped per block as without it. The engine
//! reads them exactly — trees from mke2fs's `-d` and trees the kernel wrote
//! through a loop mount, compared file by file with the kernel's own view
//! (writing is `bigalloc_write.rs`'s).

mod common;

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use common::{mkfs, open, run};
use ext4kit_engine::device::FileDevice;
use ext4kit_engine::{Attr, BIGALLOC_NO_EXTENTS, Error, Filesystem, NodeKind, OpenOptions, ROOT_INO};
use ext4kit_format::features::RoCompatFeatures;
use ext4kit_testkit::mount::{LoopMount, can_loop_mount};
use ext4kit_testkit::tools::{assert_fsck_clean, skip_unless};

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

/// What a path holds, as both the engine and the host can report it:
/// kind and permissions, size, links, 512-byte blocks (whole clusters),
/// contents or link target, and xattrs.
#[derive(Debug, PartialEq, Eq)]
struct Entry {
    mode: u32,
    size: u64,
    nlink: u64,
    blocks: u64,
    body: Vec<u8>,
    xattrs: BTreeMap<String, Vec<u8>>,
}

/// Every path under the root as the engine reads it (directory sizes and
/// bodies left out: the host's copy of a directory is laid out its own way).
fn engine_view(fs: &Filesystem) -> BTreeMap<String, Entry> {
    let mut out = BTreeMap::new();
    let mut stack = vec![(String::new(), fs.inode(ROOT_INO).unwrap())];
    let huge = fs.geometry().features.ro_compat.contains(RoCompatFeatures::HUGE_FILE);
    while let Some((path, dir)) = stack.pop() {
        for e in fs.read_dir(&dir).unwrap() {
            if e.name == b"." || e.name == b".." {
                continue;
            }
            let p = format!("{path}/{}", String::from_utf8_lossy(&e.name));
            let inode = fs.inode(e.ino).unwrap();
            let mode = u32::from(inode.raw.i_mode.get());
            let body = match mode & 0o170000 {
                0o040000 => {
                    stack.push((p.clone(), inode.clone()));
                    Vec::new()
                }
                0o120000 => fs.read_link(&inode).unwrap(),
                _ => fs.read_all(&inode, 64 << 20).unwrap(),
            };
            let xattrs = fs
                .xattrs(&inode)
                .unwrap()
                .into_iter()
                .map(|x| (String::from_utf8_lossy(&x.name).into_owned(), x.value))
                .collect();
            out.insert(
                p,
                Entry {
                    mode,
                    size: if inode.is_dir() { 0 } else { inode.size() },
                    nlink: u64::from(inode.raw.links()),
                    blocks: inode.raw.blocks_512(huge, fs.geometry().block_size),
                    body,
                    xattrs,
                },
            );
        }
    }
    out
}

/// The same, read through the kernel's mount at `root`.
fn host_view(root: &Path) -> BTreeMap<String, Entry> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let path = e.unwrap().path();
            let md = std::fs::symlink_metadata(&path).unwrap();
            let body = if md.is_dir() {
                stack.push(path.clone());
                Vec::new()
            } else if md.file_type().is_symlink() {
                std::fs::read_link(&path).unwrap().into_os_string().into_encoded_bytes()
            } else {
                std::fs::read(&path).unwrap()
            };
            let xattrs = if md.file_type().is_symlink() {
                BTreeMap::new()
            } else {
                ext4kit_testkit::compare::read_xattrs(&path).unwrap()
            };
            let rel = format!("/{}", path.strip_prefix(root).unwrap().display());
            let entry = Entry {
                mode: md.mode(),
                size: if md.is_dir() { 0 } else { md.size() },
                nlink: md.nlink(),
                blocks: md.blocks(),
                body,
                xattrs,
            };
            out.insert(rel, entry);
        }
    }
    out
}

fn assert_same_view(fs: &Filesystem, root: &Path) {
    let (ours, kernel) = (engine_view(fs), host_view(root));
    assert_eq!(
        ours.keys().collect::<Vec<_>>(),
        kernel.keys().collect::<Vec<_>>(),
        "the same paths"
    );
    for (path, want) in &kernel {
        let got = &ours[path];
        assert!(
            got == want,
            "{path}: engine {:?} kernel {:?}",
            summary(got),
            summary(want)
        );
    }
}

fn summary(e: &Entry) -> String {
    format!(
        "mode {:o} size {} nlink {} blocks {} body {} bytes xattrs {:?}",
        e.mode,
        e.size,
        e.nlink,
        e.blocks,
        e.body.len(),
        e.xattrs.keys().collect::<Vec<_>>()
    )
}

/// Writes a tree for mke2fs's `-d`: files that end mid-cluster, span
/// several clusters, and a sparse one whose data shares no cluster.
fn source_tree(src: &Path) {
    std::fs::create_dir_all(src.join("d/sub")).unwrap();
    for (i, n) in [0usize, 1, 1000, 16384, 16385, 70_000, 1 << 20].iter().enumerate() {
        std::fs::write(src.join(format!("f{i}")), pattern(*n, i as u64)).unwrap();
    }
    std::fs::write(src.join("d/sub/deep"), pattern(33_333, 99)).unwrap();
    std::os::unix::fs::symlink("../f2", src.join("d/link")).unwrap();
}

/// mke2fs (`-d`) copies a tree into bigalloc images of 1 KiB blocks with
/// 16 KiB clusters (descriptors after the superblock's block 1, not after
/// `s_first_data_block` 0) and 4 KiB blocks with 64 KiB clusters; the engine
/// reads every file back and reports `statfs` in blocks.
#[test]
fn mke2fs_trees_read_back() {
    for args in [
        &["-b", "1024", "-O", "bigalloc", "-C", "16384"][..],
        &["-b", "4096", "-O", "bigalloc", "-C", "65536"],
    ] {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("src");
        source_tree(&src);
        let Some(img) = mkfs(dir.path(), Some(&src), args, "64M") else {
            return;
        };
        let fs = open(&img, OpenOptions::default()).unwrap();
        for i in 0..7 {
            let want = std::fs::read(src.join(format!("f{i}"))).unwrap();
            let inode = fs.resolve(format!("/f{i}").as_bytes()).unwrap();
            assert_eq!(fs.read_all(&inode, 64 << 20).unwrap(), want, "f{i} with {args:?}");
        }
        let deep = fs.resolve(b"/d/sub/deep").unwrap();
        assert_eq!(fs.read_all(&deep, 1 << 20).unwrap(), pattern(33_333, 99));
        assert_eq!(fs.read_link(&fs.resolve(b"/d/link").unwrap()).unwrap(), b"../f2");
        let dump = run("dumpe2fs", &["-h", img.to_str().unwrap()]);
        let field = |name: &str| -> u64 {
            let line = dump.lines().find(|l| l.starts_with(name)).unwrap();
            line[name.len()..].trim().parse().unwrap()
        };
        let st = fs.statfs();
        assert_eq!(st.blocks_free, field("Free blocks:"), "{args:?}");
        let ratio = field("Cluster size:") / field("Block size:");
        assert_eq!(
            st.blocks,
            field("Block count:") - field("Overhead clusters:") * ratio,
            "{args:?}"
        );
        drop(fs);
        assert_fsck_clean(&img).unwrap();
    }
}

/// Bigalloc needs extents for writing (the cluster rule cannot be kept in
/// block maps): an image without the extents feature opens read-only,
/// saying why, and every write is refused with `EROFS`, the image as it was.
#[test]
fn writable_open_without_extents_is_read_only_and_says_why() {
    let dir = tempfile::tempdir().unwrap();
    let Some(img) = mkfs(dir.path(), None, &["-O", "bigalloc", "-C", "16384"], "32M") else {
        return;
    };
    let extents = ext4kit_format::features::IncompatFeatures::EXTENTS.0;
    common::patch_sb(&img, |sb| {
        sb.s_feature_incompat.set(sb.s_feature_incompat.get() & !extents)
    });
    let before = std::fs::read(&img).unwrap();
    let dev = FileDevice::open(&img, true).unwrap();
    let fs = Filesystem::open(Box::new(dev), OpenOptions::default()).unwrap();
    assert_eq!(fs.read_only_reason(), Some(BIGALLOC_NO_EXTENTS));
    let attr = Attr {
        perm: 0o644,
        uid: 0,
        gid: 0,
    };
    let err = fs.create(ROOT_INO, b"new", NodeKind::Regular, attr).unwrap_err();
    assert!(matches!(err, Error::ReadOnly), "{err:?}");
    drop(fs);
    assert!(
        std::fs::read(&img).unwrap() == before,
        "a refused open wrote to the image"
    );
    common::patch_sb(&img, |sb| {
        sb.s_feature_incompat.set(sb.s_feature_incompat.get() | extents)
    });
    assert_fsck_clean(&img).unwrap();
}

/// Runs the kernel workload: files ending mid-cluster, a sparse file, holes
/// punched inside and across clusters, preallocation, truncation, hard and
/// symbolic links, xattrs in the inode and in a block, 300 small files.
fn kernel_fill(root: &Path) {
    let script = r#"
set -e
cd "$1"
mkdir -p d/sub big many
head -c 1000 /dev/urandom > small
head -c 5000000 /dev/urandom > big/f5m
head -c 70000 /dev/urandom > mid
dd if=/dev/urandom of=sparse bs=1k seek=100 count=3 status=none
dd if=/dev/urandom of=sparse bs=1k seek=1000 count=5 conv=notrunc status=none
head -c 300000 /dev/urandom > punched
fallocate -p -o 5000 -l 100000 punched
fallocate -p -o 200704 -l 16384 punched
fallocate -l 100000 prealloc
head -c 40000 /dev/urandom > trunc
truncate -s 12345 trunc
ln small d/hardlink
ln -s ../small d/sym
ln -s $(printf 'x%.0s' $(seq 200)) longsym
setfattr -n user.a -v hello small
setfattr -n user.big -v $(head -c 800 /dev/zero | tr '\0' v) mid
for i in $(seq 300); do echo "file $i" > many/f$i; done
head -c 17000 /dev/urandom > d/sub/x
"#;
    let out = std::process::Command::new("sh")
        .args(["-c", script, "fill"])
        .arg(root)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "workload: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The kernel fills bigalloc images; the engine's view of every path
/// (kind, size, links, i_blocks, data, link targets, xattrs) and its
/// `statfs` equal the kernel's through a read-only loop mount.
#[test]
fn kernel_filled_images_read_as_the_kernel_reads_them() {
    if skip_unless(can_loop_mount()).is_none() {
        return;
    }
    if skip_unless(ext4kit_testkit::tools::require_tools(&["setfattr", "fallocate"])).is_none() {
        return;
    }
    for args in [
        &["-b", "1024", "-O", "bigalloc", "-C", "16384"][..],
        &["-b", "4096", "-O", "bigalloc", "-C", "65536"],
    ] {
        let dir = tempfile::tempdir().unwrap();
        let Some(img) = mkfs(dir.path(), None, args, "128M") else {
            return;
        };
        let mnt = LoopMount::rw(&img, &[]).expect("mount rw");
        kernel_fill(mnt.path());
        mnt.unmount().expect("unmount");
        assert_fsck_clean(&img).unwrap();
        let fs = open(&img, OpenOptions::default()).unwrap();
        let mnt = LoopMount::ro(&img).expect("mount ro");
        assert_same_view(&fs, mnt.path());
        let st = fs.statfs();
        let vfs = statvfs_blocks(mnt.path());
        assert_eq!((st.blocks, st.blocks_free, st.blocks_available), vfs, "{args:?}");
        mnt.unmount().expect("unmount");
        free_space_in_clusters(&fs, &img);
    }
}

/// `free_space` (what `ext4kit frag` prints) reads a bitmap bit as a
/// cluster: its free blocks are the superblock's count, and it finds as
/// many runs as dumpe2fs lists "Free blocks:" ranges (one group: no run
/// crosses a group's end, where dumpe2fs would split it).
fn free_space_in_clusters(fs: &Filesystem, img: &Path) {
    let free = fs.free_space().unwrap();
    assert_eq!(free.free_blocks, fs.statfs().blocks_free);
    let dump = run("dumpe2fs", &[img.to_str().unwrap()]);
    let starts: Vec<&str> = dump
        .lines()
        .filter_map(|l| l.strip_prefix("  Free blocks: "))
        .flat_map(|l| l.split(", "))
        .map(|r| r.split('-').next().unwrap())
        .collect();
    assert_eq!(free.free_runs, starts.len() as u64, "{starts:?}");
}

/// `statvfs` of a mount point: total, free and available blocks.
fn statvfs_blocks(p: &Path) -> (u64, u64, u64) {
    let out = run("stat", &["-f", "-c", "%b %f %a", p.to_str().unwrap()]);
    let v: Vec<u64> = out.split_whitespace().map(|x| x.parse().unwrap()).collect();
    (v[0], v[1], v[2])
}

/// Without `s_overhead_clusters` (mke2fs before 1.46 left it 0) the kernel
/// counts the clusters that hold metadata itself, each once; the engine's
/// `statfs` gives the same totals as the kernel's mount.
#[test]
fn overhead_counted_in_clusters_when_the_superblock_has_none() {
    if skip_unless(can_loop_mount()).is_none() {
        return;
    }
    let layouts: [&[&str]; 3] = [
        &["-b", "1024", "-O", "bigalloc", "-C", "16384"],
        &["-b", "4096", "-O", "bigalloc", "-C", "16384"],
        &["-b", "4096", "-O", "bigalloc,^flex_bg", "-C", "65536"],
    ];
    for args in layouts {
        let dir = tempfile::tempdir().unwrap();
        let Some(img) = mkfs(dir.path(), None, args, "1200M") else {
            return;
        };
        common::patch_sb(&img, |sb| sb.s_overhead_clusters.set(0));
        let fs = open(&img, OpenOptions::default()).unwrap();
        let st = fs.statfs();
        let mnt = LoopMount::ro(&img).expect("mount ro");
        let vfs = statvfs_blocks(mnt.path());
        mnt.unmount().expect("unmount");
        assert_eq!((st.blocks, st.blocks_free, st.blocks_available), vfs, "{args:?}");
    }
}
