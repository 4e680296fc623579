//! The judges of `ext4kit mount`: the POSIX suite (strict: a skip is a
//! failure), 100,000 verified random operations of the integrity
//! exerciser, four threads changing shared directories at once, and `fio
//! --verify` / `stress-ng` as independent checkers — each on a real FUSE
//! mount, each followed by unmounting and `e2fsck -fn`.
//!
//! The `ext4kit` binary is taken from the same target directory as
//! `ext4kit-posix` (`cargo test --workspace` builds both).

mod common;

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::{chmod_755, lines_starting, posix};
use ext4kit_testkit::fuse::{FuseMount, can_fuse_mount};
use ext4kit_testkit::tools::{assert_fsck_clean, require_tool, skip_unless};

/// The `ext4kit` binary next to `ext4kit-posix`.
fn ext4kit() -> Option<PathBuf> {
    let exe = Path::new(env!("CARGO_BIN_EXE_ext4kit-posix")).with_file_name("ext4kit");
    if exe.exists() {
        return Some(exe);
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "{} is missing: build the workspace (cargo test --workspace)",
        exe.display()
    );
    ext4kit_testkit::skipped!("{} is missing (cargo build -p ext4kit-cli)", exe.display());
    None
}

/// A fresh 4 KiB-block ext4 image of `size` served by `ext4kit mount`.
fn mounted(dir: &Path, size: &str, options: &str) -> Option<(PathBuf, FuseMount)> {
    skip_unless(can_fuse_mount())?;
    skip_unless(require_tool("mkfs.ext4"))?;
    let exe = ext4kit()?;
    let img = dir.join("img.ext4");
    let out = Command::new("mkfs.ext4")
        .args(["-q", "-F", "-b", "4096"])
        .arg(&img)
        .arg(size)
        .output()
        .expect("mkfs.ext4");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let m = FuseMount::start(&exe, &img, options).expect("ext4kit mount");
    chmod_755(m.path());
    Some((img, m))
}

fn finish(img: &Path, m: FuseMount) {
    let status = m.unmount().expect("unmount");
    assert!(status.success(), "the server exited with {status}");
    assert_fsck_clean(img).unwrap();
}

#[test]
fn posix_suite_passes_strictly_on_the_fuse_mount() {
    strict_on("allow_other");
}

/// The same on fuser's transport, which negotiates less (no
/// `FUSE_HANDLE_KILLPRIV_V2`: the kernel drops set-id bits itself there).
#[test]
fn posix_suite_passes_strictly_on_the_fuser_transport() {
    strict_on("allow_other,transport=fuser");
}

fn strict_on(options: &str) {
    let work = tempfile::tempdir().unwrap();
    let Some((img, m)) = mounted(work.path(), "1G", options) else {
        return;
    };
    let out = posix(&[OsStr::new("run"), OsStr::new("--strict"), m.path().as_os_str()]);
    let bad: Vec<_> = lines_starting(&out, "FAIL")
        .into_iter()
        .chain(
            lines_starting(&out, "SKIP")
                .into_iter()
                .filter(|l| !l.contains("not installed")),
        )
        .collect();
    assert!(bad.is_empty(), "on the FUSE mount ({options}):\n{}", bad.join("\n"));
    finish(&img, m);
}

#[test]
fn exerciser_verifies_100k_random_operations() {
    let work = tempfile::tempdir().unwrap();
    let Some((img, m)) = mounted(work.path(), "1G", "") else {
        return;
    };
    let out = posix(&[
        OsStr::new("exercise"),
        m.path().as_os_str(),
        OsStr::new("--ops"),
        OsStr::new("100000"),
        OsStr::new("--seed"),
        OsStr::new("20261122"),
        OsStr::new("--files"),
        OsStr::new("6"),
    ]);
    assert!(out.status.success(), "exerciser failed (see its output above)");
    finish(&img, m);
}

/// What one writer thread leaves behind: name → content.
type Expected = Vec<(PathBuf, Vec<u8>)>;

fn body(thread: usize, i: usize) -> Vec<u8> {
    let len = (i * 7919 + thread * 104_729) % 70_000;
    (0..len)
        .map(|k| (k as u32 ^ (thread as u32 * 31 + i as u32)) as u8)
        .collect()
}

/// Creates, writes, renames across directories, deletes and makes and
/// removes subdirectories in four shared directories.
fn writer(root: &Path, thread: usize, rounds: usize) -> Expected {
    let mut live: Vec<(PathBuf, Vec<u8>)> = Vec::new();
    for i in 0..rounds {
        let dir = root.join(format!("d{}", (i + thread) % 4));
        let p = dir.join(format!("t{thread}-{i}"));
        let b = body(thread, i);
        std::fs::write(&p, &b).unwrap();
        live.push((p, b));
        if i % 3 == 0 {
            let (old, b) = live.pop().unwrap();
            let new = root
                .join(format!("d{}", (i + thread + 1) % 4))
                .join(format!("t{thread}-{i}.r"));
            std::fs::rename(&old, &new).unwrap();
            live.push((new, b));
        }
        if i % 5 == 4 {
            let (gone, _) = live.remove((i * 13) % live.len());
            std::fs::remove_file(gone).unwrap();
        }
        if i % 7 == 0 {
            let sub = dir.join(format!("sub-t{thread}-{i}"));
            std::fs::create_dir(&sub).unwrap();
            std::fs::write(sub.join("x"), b"x").unwrap();
            if i % 14 == 0 {
                std::fs::remove_file(sub.join("x")).unwrap();
                std::fs::remove_dir(&sub).unwrap();
            } else {
                live.push((sub.join("x"), b"x".to_vec()));
            }
        }
    }
    live
}

#[test]
fn four_threads_in_shared_directories_leave_exactly_their_files() {
    let work = tempfile::tempdir().unwrap();
    let Some((img, m)) = mounted(work.path(), "1G", "") else {
        return;
    };
    let root = m.path().to_path_buf();
    for d in 0..4 {
        std::fs::create_dir(root.join(format!("d{d}"))).unwrap();
    }
    let expected: Vec<(PathBuf, Vec<u8>)> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..4)
            .map(|t| {
                s.spawn({
                    let root = root.clone();
                    move || writer(&root, t, 1500)
                })
            })
            .collect();
        hs.into_iter().flat_map(|h| h.join().unwrap()).collect()
    });
    let mut on_disk = Vec::new();
    for d in 0..4 {
        for e in std::fs::read_dir(root.join(format!("d{d}"))).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                on_disk.extend(std::fs::read_dir(&p).unwrap().map(|e| e.unwrap().path()));
            } else {
                on_disk.push(p);
            }
        }
    }
    on_disk.sort();
    let mut want: Vec<PathBuf> = expected.iter().map(|(p, _)| p.clone()).collect();
    want.sort();
    assert_eq!(on_disk, want, "the names left differ from what the threads made");
    for (p, b) in &expected {
        assert_eq!(&std::fs::read(p).unwrap(), b, "{}", p.display());
    }
    finish(&img, m);
}

/// `fio --verify` and `stress-ng`, when installed, as checkers we did not write.
#[test]
fn fio_verify_and_stress_ng_pass() {
    let work = tempfile::tempdir().unwrap();
    let Some((img, m)) = mounted(work.path(), "1G", "") else {
        return;
    };
    if skip_unless(require_tool("fio")).is_some() {
        let out = Command::new("fio")
            .args([
                "--name=verify",
                "--rw=randwrite",
                "--bs=4k",
                "--bsrange=512-256k",
                "--size=96m",
                "--ioengine=psync",
                "--verify=crc32c",
                "--do_verify=1",
                "--numjobs=2",
                "--randrepeat=1",
                "--fallocate=native",
            ])
            .current_dir(m.path())
            .output()
            .unwrap();
        assert!(
            out.status.success() && !String::from_utf8_lossy(&out.stdout).contains("verify: bad"),
            "fio: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    if skip_unless(require_tool("stress-ng")).is_some() {
        let dir = m.path().join("stress");
        std::fs::create_dir(&dir).unwrap();
        let out = Command::new("stress-ng")
            .args(["--temp-path", dir.to_str().unwrap()])
            .args(["--hdd", "2", "--hdd-ops", "400", "--hdd-opts", "wr-rnd,rd-rnd"])
            .args(["--dentry", "1", "--dentry-ops", "2000"])
            .args(["--dir", "1", "--dir-ops", "2000"])
            .args(["--rename", "1", "--rename-ops", "5000"])
            .args(["--verify", "--metrics-brief", "--timeout", "60s"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "stress-ng: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    finish(&img, m);
}
