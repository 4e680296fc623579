//! The mount's judges with the image on the network: the POSIX suite
//! (strict) on an image served by nbdkit's file plugin, and the integrity
//! exerciser and four writer threads in shared directories on one served
//! by qemu-nbd, each over a Unix socket, through `ext4kit mount
//! nbd+unix:///?socket=…`; then unmounting, stopping the server, and
//! `e2fsck -fn` on the backing file. Smaller runs than `fuse_mount.rs`
//! (every block crosses a socket), but the same checks.

mod common;

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::{chmod_755, lines_starting, posix};
use ext4kit_testkit::fuse::{FuseMount, can_fuse_mount};
use ext4kit_testkit::nbd::{Listen, NbdServer, servers_missing};
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

/// Which server fronts the backing file.
#[derive(Clone, Copy)]
enum Server {
    QemuNbd,
    NbdkitFile,
}

/// A mounted image served over NBD, and what to check after.
struct Served {
    img: PathBuf,
    server: NbdServer,
    mount: FuseMount,
}

/// A fresh 4 KiB-block ext4 image of `size` (mkfs.ext4 on the backing
/// file), served by `server` on a Unix socket in `dir`, mounted by
/// `ext4kit mount URI` with `options`.
fn served(dir: &Path, size: &str, server: Server, options: &str) -> Option<Served> {
    skip_unless(can_fuse_mount())?;
    skip_unless(require_tool("mkfs.ext4"))?;
    if let Some(why) = servers_missing() {
        ext4kit_testkit::skipped!("NBD servers missing: {why}");
        return None;
    }
    let exe = ext4kit()?;
    let img = dir.join("backing.img");
    let out = Command::new("mkfs.ext4")
        .args(["-q", "-F", "-b", "4096"])
        .arg(&img)
        .arg(size)
        .output()
        .expect("mkfs.ext4");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let listen = Listen::Unix(dir.join("nbd.sock"));
    let server = match server {
        Server::QemuNbd => NbdServer::qemu_nbd(&img, "", &listen),
        Server::NbdkitFile => NbdServer::nbdkit(&["file", &format!("file={}", img.display())], &listen),
    }
    .expect("start the NBD server");
    let mount = FuseMount::start(&exe, Path::new(&server.uri("")), options).expect("ext4kit mount over NBD");
    chmod_755(mount.path());
    Some(Served { img, server, mount })
}

impl Served {
    fn path(&self) -> &Path {
        self.mount.path()
    }

    /// Unmounts (the server must close the image cleanly), stops the NBD
    /// server, and checks the backing file.
    fn finish(self) {
        let status = self.mount.unmount().expect("unmount");
        assert!(status.success(), "the mount server exited with {status}");
        drop(self.server);
        assert_fsck_clean(&self.img).unwrap();
    }
}

#[test]
fn posix_suite_passes_strictly_over_nbd() {
    let work = tempfile::tempdir().unwrap();
    let Some(s) = served(work.path(), "1G", Server::NbdkitFile, "allow_other") else {
        return;
    };
    let out = posix(&[OsStr::new("run"), OsStr::new("--strict"), s.path().as_os_str()]);
    let bad: Vec<_> = lines_starting(&out, "FAIL")
        .into_iter()
        .chain(
            lines_starting(&out, "SKIP")
                .into_iter()
                .filter(|l| !l.contains("not installed")),
        )
        .collect();
    assert!(bad.is_empty(), "on the mount over NBD:\n{}", bad.join("\n"));
    s.finish();
}

#[test]
fn exerciser_verifies_random_operations_over_nbd() {
    let work = tempfile::tempdir().unwrap();
    let Some(s) = served(work.path(), "256M", Server::QemuNbd, "") else {
        return;
    };
    let out = posix(&[
        OsStr::new("exercise"),
        s.path().as_os_str(),
        OsStr::new("--ops"),
        OsStr::new("10000"),
        OsStr::new("--seed"),
        OsStr::new("20261128"),
        OsStr::new("--files"),
        OsStr::new("4"),
    ]);
    assert!(out.status.success(), "exerciser failed (see its output above)");
    s.finish();
}

/// Four threads create, write, rename and delete in shared directories;
/// the names and bytes left are exactly what they made.
#[test]
fn four_threads_over_nbd_leave_exactly_their_files() {
    let work = tempfile::tempdir().unwrap();
    let Some(s) = served(work.path(), "256M", Server::QemuNbd, "") else {
        return;
    };
    let root = s.path().to_path_buf();
    for d in 0..4 {
        std::fs::create_dir(root.join(format!("d{d}"))).unwrap();
    }
    let expected: Vec<(PathBuf, Vec<u8>)> = std::thread::scope(|sc| {
        let hs: Vec<_> = (0..4)
            .map(|t| {
                let root = root.clone();
                sc.spawn(move || writer(&root, t, 300))
            })
            .collect();
        hs.into_iter().flat_map(|h| h.join().unwrap()).collect()
    });
    let mut on_disk: Vec<PathBuf> = Vec::new();
    for d in 0..4 {
        for e in std::fs::read_dir(root.join(format!("d{d}"))).unwrap() {
            on_disk.push(e.unwrap().path());
        }
    }
    on_disk.sort();
    let mut want: Vec<PathBuf> = expected.iter().map(|(p, _)| p.clone()).collect();
    want.sort();
    assert_eq!(on_disk, want, "the names left differ from what the threads made");
    for (p, b) in &expected {
        assert_eq!(&std::fs::read(p).unwrap(), b, "{}", p.display());
    }
    s.finish();
}

/// Creates, writes, renames into the next directory and deletes; returns
/// what it left.
fn writer(root: &Path, thread: usize, rounds: usize) -> Vec<(PathBuf, Vec<u8>)> {
    let mut live: Vec<(PathBuf, Vec<u8>)> = Vec::new();
    for i in 0..rounds {
        let dir = root.join(format!("d{}", (i + thread) % 4));
        let p = dir.join(format!("t{thread}-{i}"));
        let len = (i * 7919 + thread * 104_729) % 70_000;
        let b: Vec<u8> = (0..len)
            .map(|k| (k as u32 ^ (thread as u32 * 31 + i as u32)) as u8)
            .collect();
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
    }
    live
}
