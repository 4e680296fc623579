//! ext4's own reserve (`s_resv_clusters`: 2% of the clusters, at most
//! 4096): ordinary allocations leave it, so a full file system can still
//! split an extent. Filled to ENOSPC by the engine and by the kernel (a
//! loop mount of a copy of the same mkfs'd image), both stop with the same
//! files and the reserve still free; at that point a new directory is
//! refused by both, and punching a hole that splits an extent (the
//! inode's four-extent root then grows a leaf) succeeds in both.

mod common;

use std::io::Write;
use std::path::Path;
use std::process::Command;

use ext4kit_engine::{Attr, Error, FallocMode, Filesystem, NodeKind, ROOT_INO};
use ext4kit_testkit::mount::{LoopMount, can_loop_mount};
use ext4kit_testkit::tools::{assert_fsck_clean, require_tool, skip_unless};

const ATTR: Attr = Attr {
    perm: 0o644,
    uid: 0,
    gid: 0,
};
const DIR_ATTR: Attr = Attr {
    perm: 0o755,
    uid: 0,
    gid: 0,
};
const BS: u64 = 4096;
/// Each filler file: 16 blocks.
const FILE: usize = 64 << 10;
/// The four-extent file's extents: 4 blocks at every 8th block.
const RUNS: [u64; 4] = [0, 8, 16, 24];

/// What a fill ended with: whole filler files, free blocks as `statfs`
/// says after a sync.
#[derive(Debug, PartialEq, Eq)]
struct Filled {
    files: usize,
    /// Blocks of the file written a block at a time after the last whole
    /// filler was refused.
    tail: u64,
    free: u64,
}

fn engine_fill(img: &Path) -> Filled {
    let fs = common::open_rw(img);
    let frag = fs.create(ROOT_INO, b"frag", NodeKind::Regular, ATTR).unwrap().ino;
    for r in RUNS {
        fs.write(frag, r * BS, &[7u8; 4 * BS as usize]).unwrap();
    }
    fs.sync().unwrap();
    let mut files = 0;
    loop {
        let name = format!("f{files}");
        let f = match fs.create(ROOT_INO, name.as_bytes(), NodeKind::Regular, ATTR) {
            Ok(i) => i.ino,
            Err(Error::NoSpace) => break,
            Err(e) => panic!("create {name}: {e}"),
        };
        match fs.write(f, 0, &[files as u8; FILE]) {
            Ok(n) if n == FILE => files += 1,
            Ok(_) | Err(Error::NoSpace) => break,
            Err(e) => panic!("write {name}: {e}"),
        }
    }
    let t = fs.create(ROOT_INO, b"tail", NodeKind::Regular, ATTR).unwrap().ino;
    let mut tail = 0;
    while fs.write(t, tail * BS, &[1u8; BS as usize]).is_ok() {
        tail += 1;
        fs.sync().unwrap();
    }
    fs.sync().unwrap();
    let free = fs.statfs().blocks_free;
    // A directory needs a block an ordinary allocation may not take.
    let mkdir = fs.create(ROOT_INO, b"d", NodeKind::Directory, DIR_ATTR);
    assert!(matches!(mkdir, Err(Error::NoSpace)), "mkdir at ENOSPC: {mkdir:?}");
    // Splitting an extent of a full root takes a leaf from the reserve.
    fs.fallocate(frag, BS, BS, FallocMode::PunchHole)
        .unwrap_or_else(|e| panic!("punch at ENOSPC ({free} free): {e}"));
    let depth = fs.inode(frag).unwrap().raw.i_block[6..8].to_vec();
    assert_eq!(depth, [1, 0], "the split grew the tree a level");
    fs.unmount().unwrap();
    Filled { files, tail, free }
}

fn kernel_fill(img: &Path) -> Filled {
    let mnt = LoopMount::rw(img, &[]).unwrap();
    let frag = mnt.path().join("frag");
    let f = std::fs::File::create(&frag).unwrap();
    for r in RUNS {
        use std::os::unix::fs::FileExt;
        f.write_all_at(&[7u8; 4 * BS as usize], r * BS).unwrap();
    }
    f.sync_all().unwrap();
    drop(f);
    let mut files = 0;
    loop {
        let p = mnt.path().join(format!("f{files}"));
        let Ok(mut f) = std::fs::File::create(&p) else { break };
        if f.write_all(&[files as u8; FILE]).and_then(|()| f.sync_all()).is_err() {
            break;
        }
        files += 1;
    }
    let mut t = std::fs::File::create(mnt.path().join("tail")).unwrap();
    let mut tail = 0;
    while t.write_all(&[1u8; BS as usize]).and_then(|()| t.sync_all()).is_ok() {
        tail += 1;
    }
    drop(t);
    sync(mnt.path());
    let free = common::run("stat", &["-f", "-c", "%f", mnt.path().to_str().unwrap()])
        .trim()
        .parse()
        .unwrap();
    let mkdir = std::fs::create_dir(mnt.path().join("d"));
    assert_eq!(
        mkdir.map_err(|e| e.raw_os_error()),
        Err(Some(libc::ENOSPC)),
        "kernel mkdir"
    );
    let out = Command::new("fallocate")
        .args(["-p", "-o", &BS.to_string(), "-l", &BS.to_string()])
        .arg(&frag)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "kernel punch: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    mnt.unmount().unwrap();
    Filled { files, tail, free }
}

fn sync(dir: &Path) {
    std::fs::File::open(dir).unwrap().sync_all().unwrap();
    Command::new("sync").status().unwrap();
}

/// How many extent-tree blocks (`ETB`) debugfs lists for `/frag`.
fn frag_tree_blocks(img: &Path) -> usize {
    let out = common::run("debugfs", &["-R", "stat /frag", img.to_str().unwrap()]);
    out.matches("(ETB").count()
}

#[test]
fn filled_to_enospc_the_engine_and_the_kernel_keep_the_reserve() {
    let d = tempfile::tempdir().unwrap();
    let Some(img) = common::mkfs(d.path(), None, &["-b", "4096"], "32M") else {
        return;
    };
    if skip_unless(require_tool("fallocate")).is_none() || skip_unless(require_tool("debugfs")).is_none() {
        return;
    }
    let twin = d.path().join("twin");
    std::fs::copy(&img, &twin).unwrap();
    let resv = {
        let fs: Filesystem = common::open(&img, Default::default()).unwrap();
        let s = fs.statfs();
        let blocks = fs.geometry().blocks_count;
        assert_eq!(s.blocks_free - s.blocks_available, blocks / 50 + root_reserve(&fs));
        blocks / 50
    };
    let ours = engine_fill(&img);
    assert_fsck_clean(&img).unwrap();
    eprintln!(
        "engine: {ours:?}, reserve {resv}, frag tree blocks {}",
        frag_tree_blocks(&img)
    );
    assert_eq!(ours.free, resv, "data stops at the reserve, whole: {ours:?}");
    if let Err(why) = can_loop_mount() {
        ext4kit_testkit::skipped!("kernel comparison ({why})");
        return;
    }
    let theirs = kernel_fill(&twin);
    assert_fsck_clean(&twin).unwrap();
    eprintln!("kernel: {theirs:?}, frag tree blocks {}", frag_tree_blocks(&twin));
    assert_eq!(ours, theirs, "filled by the engine and by the kernel");
    assert_eq!(frag_tree_blocks(&img), frag_tree_blocks(&twin));
}

fn root_reserve(fs: &Filesystem) -> u64 {
    let sb = fs.superblock();
    u64::from(sb.s_r_blocks_count_lo.get()) | (u64::from(sb.s_r_blocks_count_hi.get()) << 32)
}
