//! Writing bigalloc images (`-O bigalloc -C N`): the engine allocates in
//! clusters, keeps each block at its logical offset in its cluster, frees
//! a cluster only when no block of it is used any more, and charges
//! `i_blocks` whole clusters. A scripted workload (create, write, append,
//! overwrite, sparse writes, two extents sharing a cluster, truncate and
//! punch inside a cluster, fallocate, xattr blocks, an htree directory,
//! unlink and rm -r) runs on mke2fs images and on one the kernel filled;
//! e2fsck -fn judges each, and the kernel reads back what the engine wrote.

mod common;

use std::collections::BTreeMap;
use std::path::Path;

use common::{mkfs, open_rw};
use ext4kit_engine::{
    AllocOptions, Attr, BlockAllocator, FallocMode, Filesystem, NodeKind, OpenOptions, ROOT_INO, XattrSet,
};
use ext4kit_testkit::mount::{LoopMount, can_loop_mount};
use ext4kit_testkit::tools::assert_fsck_clean;

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

const FILE: Attr = Attr {
    perm: 0o644,
    uid: 0,
    gid: 0,
};
const DIR: Attr = Attr {
    perm: 0o755,
    uid: 0,
    gid: 0,
};

/// The expected contents of every regular file, by path.
type Model = BTreeMap<String, Vec<u8>>;

/// Writes `data` at `off` of `ino` and of its model copy.
fn put(fs: &Filesystem, m: &mut Model, path: &str, ino: u32, off: u64, data: &[u8]) {
    fs.write(ino, off, data).unwrap();
    let body = m.get_mut(path).unwrap();
    let end = off as usize + data.len();
    if body.len() < end {
        body.resize(end, 0);
    }
    body[off as usize..end].copy_from_slice(data);
}

fn new_file(fs: &Filesystem, m: &mut Model, parent: u32, dir: &str, name: &str) -> u32 {
    let ino = fs.create(parent, name.as_bytes(), NodeKind::Regular, FILE).unwrap().ino;
    m.insert(format!("{dir}/{name}"), Vec::new());
    ino
}

fn free(fs: &Filesystem) -> u64 {
    fs.statfs().blocks_free
}

/// The workload; `bs` and `cs`: block and cluster sizes in bytes.
fn workload(fs: &Filesystem, m: &mut Model, bs: u64, cs: u64) {
    let r = cs / bs;
    // Create, write three and a half clusters, append into the last one,
    // overwrite across a cluster boundary.
    let a = new_file(fs, m, ROOT_INO, "", "a");
    put(fs, m, "/a", a, 0, &pattern((cs * 3 + cs / 2) as usize, 1));
    put(fs, m, "/a", a, cs * 3 + cs / 2, &pattern((bs * 3 + 7) as usize, 2));
    put(fs, m, "/a", a, cs - 100, &pattern((bs * 2) as usize, 3));
    // Sparse: two extents sharing a cluster (logical blocks r+5 and r+2,
    // written in that order), a lone block far out, a hole filled up to a
    // mapped block of the next cluster.
    let s = new_file(fs, m, ROOT_INO, "", "sparse");
    put(fs, m, "/sparse", s, (r + 5) * bs, &pattern(bs as usize, 4));
    put(fs, m, "/sparse", s, (r + 2) * bs, &pattern(bs as usize, 5));
    put(fs, m, "/sparse", s, (40 * r + 3) * bs, &pattern(100, 6));
    put(fs, m, "/sparse", s, (r - 1) * bs, &pattern((bs * 2) as usize, 7));
    // Truncate inside a cluster, then grow again by a write past the end.
    let t = new_file(fs, m, ROOT_INO, "", "trunc");
    put(fs, m, "/trunc", t, 0, &pattern((cs * 2) as usize, 8));
    fs.truncate(t, cs + 3 * bs + 11).unwrap();
    m.get_mut("/trunc").unwrap().truncate((cs + 3 * bs + 11) as usize);
    put(fs, m, "/trunc", t, cs * 3, &pattern(10, 9));
    // Punch inside one cluster and across two.
    let p = new_file(fs, m, ROOT_INO, "", "punch");
    put(fs, m, "/punch", p, 0, &pattern((cs * 4) as usize, 10));
    for (off, len) in [(bs * 2, bs * 3), (cs * 2 - bs, cs + 2 * bs)] {
        fs.fallocate(p, off, len, FallocMode::PunchHole).unwrap();
        m.get_mut("/punch").unwrap()[off as usize..(off + len) as usize].fill(0);
    }
    // Punch a whole cluster's blocks in two steps: it is freed by the second.
    let before = free(fs);
    fs.fallocate(p, cs * 3, bs * 2, FallocMode::PunchHole).unwrap();
    assert_eq!(free(fs), before, "a cluster still partly used stays");
    fs.fallocate(p, cs * 3 + bs * 2, cs - bs * 2, FallocMode::PunchHole)
        .unwrap();
    assert_eq!(free(fs), before + r, "the cluster goes with its last block");
    m.get_mut("/punch").unwrap()[(cs * 3) as usize..(cs * 4) as usize].fill(0);
    // Preallocate over a hole beside written blocks of the same cluster,
    // then write into part of it.
    let f = new_file(fs, m, ROOT_INO, "", "falloc");
    put(fs, m, "/falloc", f, bs, &pattern(bs as usize, 11));
    fs.fallocate(f, 0, cs * 2 + bs, FallocMode::Allocate { keep_size: false })
        .unwrap();
    m.get_mut("/falloc").unwrap().resize((cs * 2 + bs) as usize, 0);
    put(fs, m, "/falloc", f, cs + 3, &pattern(50, 12));
    // A directory grown into an htree, files with xattr blocks, removals.
    let d = fs.create(ROOT_INO, b"dir", NodeKind::Directory, DIR).unwrap().ino;
    for i in 0..300 {
        let name = format!("file-with-a-longish-name-{i:04}");
        let ino = new_file(fs, m, d, "/dir", &name);
        put(
            fs,
            m,
            &format!("/dir/{name}"),
            ino,
            0,
            &pattern(100 + i * 37, 100 + i as u64),
        );
        if i % 50 == 0 {
            fs.set_xattr(ino, b"user.big", &pattern(600, i as u64), XattrSet::Any)
                .unwrap();
        }
    }
    for i in (0..300).step_by(3) {
        let name = format!("file-with-a-longish-name-{i:04}");
        fs.unlink(d, name.as_bytes()).unwrap();
        m.remove(&format!("/dir/{name}"));
    }
    // Deleting what was created gives back exactly its clusters. Held
    // pages reserve room for extent-tree blocks they may not need (a
    // cluster each under bigalloc): write them back first.
    fs.sync().unwrap();
    let before = free(fs);
    let sub = fs.create(ROOT_INO, b"gone", NodeKind::Directory, DIR).unwrap().ino;
    for i in 0..40u64 {
        let ino = fs
            .create(sub, format!("f{i}").as_bytes(), NodeKind::Regular, FILE)
            .unwrap()
            .ino;
        fs.write(ino, i * bs, &pattern((bs * (i % 7 + 1)) as usize, i)).unwrap();
        fs.set_xattr(ino, b"user.v", &pattern(700, i), XattrSet::Any).unwrap();
    }
    assert!(free(fs) < before);
    for i in 0..40u64 {
        fs.unlink(sub, format!("f{i}").as_bytes()).unwrap();
    }
    fs.rmdir(ROOT_INO, b"gone").unwrap();
    fs.sync().unwrap();
    assert_eq!(free(fs), before, "unlink and rmdir free every cluster they took");
}

/// What the kernel reads: the model's files, byte for byte.
fn assert_kernel_reads(img: &Path, m: &Model) {
    if let Err(why) = can_loop_mount() {
        ext4kit_testkit::skipped!("kernel read-back: {why}");
        assert!(std::env::var_os("CI").is_none(), "CI must loop mount");
        return;
    }
    let mnt = LoopMount::ro(img).unwrap();
    for (path, want) in m {
        let got = std::fs::read(mnt.path().join(&path[1..])).unwrap();
        assert!(
            got == *want,
            "{path}: the kernel reads {} bytes, {} written",
            got.len(),
            want.len()
        );
    }
    mnt.unmount().unwrap();
}

fn run_workload_on(args: &[&str], size: &str, bs: u64, cs: u64) {
    run_workload_with(args, size, bs, cs, OpenOptions::default());
}

fn run_workload_with(args: &[&str], size: &str, bs: u64, cs: u64, opts: OpenOptions) {
    let dir = tempfile::tempdir().unwrap();
    let Some(img) = mkfs(dir.path(), None, args, size) else {
        return;
    };
    let mut m = Model::new();
    let dev = ext4kit_engine::device::FileDevice::open(&img, true).unwrap();
    let fs = Filesystem::open(Box::new(dev), opts).unwrap();
    workload(&fs, &mut m, bs, cs);
    drop(fs);
    assert_fsck_clean(&img).unwrap();
    assert_kernel_reads(&img, &m);
}

#[test]
fn workload_1k_blocks_16k_clusters() {
    run_workload_on(&["-b", "1024", "-O", "bigalloc", "-C", "16384"], "64M", 1024, 16384);
}

#[test]
fn workload_4k_blocks_64k_clusters() {
    run_workload_on(&["-b", "4096", "-O", "bigalloc", "-C", "65536"], "256M", 4096, 65536);
}

/// Every block policy of [`AllocOptions`] on bigalloc (issue 18: "every
/// allocator policy"): mballoc and the ext3 allocator, each with and
/// without delayed allocation, and mballoc without per-inode windows.
fn policies() -> Vec<(&'static str, AllocOptions)> {
    let with = |blocks, delalloc, inode_prealloc| AllocOptions {
        blocks,
        delalloc,
        inode_prealloc,
        ..AllocOptions::default()
    };
    vec![
        ("mballoc,nodelalloc", with(BlockAllocator::Mballoc, false, true)),
        ("mballoc,no inode prealloc", with(BlockAllocator::Mballoc, true, false)),
        ("ext3", with(BlockAllocator::Ext3, true, true)),
        ("ext3,nodelalloc", with(BlockAllocator::Ext3, false, true)),
    ]
}

#[test]
fn workload_1k_16k_under_every_policy() {
    for (name, alloc) in policies() {
        eprintln!("policy {name}");
        let opts = OpenOptions {
            alloc,
            ..OpenOptions::default()
        };
        run_workload_with(
            &["-b", "1024", "-O", "bigalloc", "-C", "16384"],
            "64M",
            1024,
            16384,
            opts,
        );
    }
}

#[test]
fn workload_4k_64k_under_every_policy() {
    for (name, alloc) in policies() {
        eprintln!("policy {name}");
        let opts = OpenOptions {
            alloc,
            ..OpenOptions::default()
        };
        run_workload_with(
            &["-b", "4096", "-O", "bigalloc", "-C", "65536"],
            "256M",
            4096,
            65536,
            opts,
        );
    }
}

/// Files the kernel wrote (mid-cluster ends, a sparse file, a punched and
/// a preallocated one, a directory of 200 names), then changed by the
/// engine: appends into the kernel's last clusters, a block into a sparse
/// cluster the kernel mapped, truncation and punching inside clusters,
/// deletion of kernel files; then the workload above.
const KERNEL_FILL: &str = r#"
set -e
cd "$1"
mkdir k
cd k
mkdir many
head -c 1000 /dev/urandom > small
head -c 300000 /dev/urandom > big
dd if=/dev/urandom of=sparse bs=1k seek=100 count=3 status=none
head -c 300000 /dev/urandom > punched
fallocate -p -o 5000 -l 100000 punched
fallocate -l 100000 prealloc
for i in $(seq 200); do echo "file $i" > many/f$i; done
"#;

#[test]
fn kernel_filled_image_changed_by_the_engine() {
    if let Err(why) = can_loop_mount() {
        ext4kit_testkit::skipped!("kernel fill: {why}");
        assert!(std::env::var_os("CI").is_none(), "CI must loop mount");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let Some(img) = mkfs(
        dir.path(),
        None,
        &["-b", "1024", "-O", "bigalloc", "-C", "16384"],
        "64M",
    ) else {
        return;
    };
    let mnt = LoopMount::rw(&img, &[]).unwrap();
    let out = std::process::Command::new("sh")
        .args(["-c", KERNEL_FILL, "fill"])
        .arg(mnt.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    mnt.unmount().unwrap();
    let fs = open_rw(&img);
    let mut m = Model::new();
    let ino_of = |path: &str, m: &mut Model| {
        let inode = fs.resolve(path.as_bytes()).unwrap();
        m.insert(path.into(), fs.read_all(&inode, 1 << 30).unwrap());
        inode.ino
    };
    let (small, big, sparse, punched, prealloc) = (
        ino_of("/k/small", &mut m),
        ino_of("/k/big", &mut m),
        ino_of("/k/sparse", &mut m),
        ino_of("/k/punched", &mut m),
        ino_of("/k/prealloc", &mut m),
    );
    for i in (2..=200).step_by(2) {
        ino_of(&format!("/k/many/f{i}"), &mut m);
    }
    put(&fs, &mut m, "/k/small", small, 1000, &pattern(5000, 20));
    put(&fs, &mut m, "/k/sparse", sparse, 97 * 1024 + 5, &pattern(1024, 21));
    put(&fs, &mut m, "/k/sparse", sparse, 3 * 1024, &pattern(10, 22));
    fs.truncate(big, 200_000).unwrap();
    m.get_mut("/k/big").unwrap().truncate(200_000);
    put(&fs, &mut m, "/k/big", big, 250_000, &pattern(3000, 23));
    fs.fallocate(punched, 150_000, 20_000, FallocMode::PunchHole).unwrap();
    m.get_mut("/k/punched").unwrap()[150_000..170_000].fill(0);
    put(&fs, &mut m, "/k/prealloc", prealloc, 40_000, &pattern(2000, 24));
    let many = fs.resolve(b"/k/many").unwrap().ino;
    for i in (1..=200).step_by(2) {
        fs.unlink(many, format!("f{i}").as_bytes()).unwrap();
    }
    workload(&fs, &mut m, 1024, 16384);
    drop(fs);
    assert_fsck_clean(&img).unwrap();
    assert_kernel_reads(&img, &m);
}

/// An xattr value too large for a block goes to a value inode (`ea_inode`):
/// its data takes clusters like a file's, and the owner's charge for it
/// is what e2fsck counts.
#[test]
fn ea_inode_values_on_bigalloc() {
    let dir = tempfile::tempdir().unwrap();
    let args = ["-b", "1024", "-O", "bigalloc,ea_inode", "-C", "16384"];
    let Some(img) = mkfs(dir.path(), None, &args, "64M") else {
        return;
    };
    let fs = open_rw(&img);
    for (i, len) in [3000usize, 20000, 60000].into_iter().enumerate() {
        let ino = fs
            .create(ROOT_INO, format!("x{i}").as_bytes(), NodeKind::Regular, FILE)
            .unwrap()
            .ino;
        fs.write(ino, 0, &pattern(5000, i as u64)).unwrap();
        fs.set_xattr(ino, b"user.big", &pattern(len, 50 + i as u64), XattrSet::Any)
            .unwrap();
    }
    fs.unlink(ROOT_INO, b"x1").unwrap();
    drop(fs);
    assert_fsck_clean(&img).unwrap();
}

/// Filling the image: writes stop with `ENOSPC` on whole clusters, the
/// image stays clean, and deleting everything gives every cluster back.
#[test]
fn full_image_then_everything_deleted() {
    let dir = tempfile::tempdir().unwrap();
    let args = ["-b", "4096", "-O", "bigalloc", "-C", "65536"];
    let Some(img) = mkfs(dir.path(), None, &args, "32M") else {
        return;
    };
    let fs = open_rw(&img);
    let empty = free(&fs);
    let mut made = 0u32;
    'fill: for i in 0u32.. {
        let name = format!("f{i}");
        let ino = match fs.create(ROOT_INO, name.as_bytes(), NodeKind::Regular, FILE) {
            Ok(inode) => inode.ino,
            Err(e) => {
                assert_eq!(e.errno(), libc::ENOSPC, "{e}");
                break;
            }
        };
        made += 1;
        // Odd sizes: every file ends inside a cluster.
        let data = pattern(70_000 + (i as usize % 5) * 30_000, u64::from(i));
        if let Err(e) = fs.write(ino, 0, &data) {
            assert_eq!(e.errno(), libc::ENOSPC, "{e}");
            break 'fill;
        }
    }
    assert!(made > 10, "only {made} files");
    fs.sync().unwrap();
    drop(fs);
    assert_fsck_clean(&img).unwrap();
    let fs = open_rw(&img);
    for i in 0..made {
        fs.unlink(ROOT_INO, format!("f{i}").as_bytes()).unwrap();
    }
    fs.sync().unwrap();
    assert_eq!(free(&fs), empty, "every cluster back");
    drop(fs);
    assert_fsck_clean(&img).unwrap();
}

/// Inline data and bigalloc: a directory and a file leave the inode for
/// their first cluster.
#[test]
fn inline_bodies_leave_the_inode_for_clusters() {
    let dir = tempfile::tempdir().unwrap();
    let args = ["-b", "1024", "-O", "bigalloc,inline_data", "-C", "16384"];
    let Some(img) = mkfs(dir.path(), None, &args, "32M") else {
        return;
    };
    let fs = open_rw(&img);
    let mut m = Model::new();
    let d = fs.create(ROOT_INO, b"d", NodeKind::Directory, DIR).unwrap().ino;
    for i in 0..80 {
        let ino = new_file(&fs, &mut m, d, "/d", &format!("name-{i:03}"));
        put(
            &fs,
            &mut m,
            &format!("/d/name-{i:03}"),
            ino,
            0,
            &pattern(20 + i * 30, i as u64),
        );
    }
    let f = new_file(&fs, &mut m, ROOT_INO, "", "grow");
    put(&fs, &mut m, "/grow", f, 0, &pattern(40, 1));
    put(&fs, &mut m, "/grow", f, 40, &pattern(5000, 2));
    drop(fs);
    assert_fsck_clean(&img).unwrap();
    assert_kernel_reads(&img, &m);
}
