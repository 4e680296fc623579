//! `open(dir, O_TMPFILE)` through `ext4kit mount` (FUSE_TMPFILE), on the
//! project's transports (`dev`, and `uring` where the kernel offers it):
//! the file has no name and no links while open, `linkat` of
//! `/proc/self/fd/N` names it, one never named gives its inode and blocks
//! back at its last close, `O_EXCL` makes it unnameable, and inside an
//! encrypted directory with its key it is encrypted and named there. The
//! fuser transport refuses it cleanly (EOPNOTSUPP). Each image is
//! `e2fsck -fn` clean afterwards, and the kernel's ext4 reads the named
//! files from it.

use std::io::{Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use ext4kit_testkit::fscrypt;
use ext4kit_testkit::fuse::FuseMount;
use ext4kit_testkit::mount::LoopMount;
use ext4kit_testkit::tools::assert_fsck_clean;
use rustix::fs::{AtFlags, CWD, Mode, OFlags};

const ENABLE_URING: &str = "/sys/module/fuse/parameters/enable_uring";

fn exe() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_ext4kit"))
}

fn ready() -> bool {
    fscrypt::ready(true)
}

/// The project's transports this kernel offers; io_uring is turned on
/// (as root may) or skipped loudly.
fn transports() -> Vec<&'static str> {
    let uring = match std::fs::read_to_string(ENABLE_URING) {
        Ok(v) if v.trim() == "Y" => Ok(()),
        Ok(_) => std::fs::write(ENABLE_URING, "Y").map_err(|e| format!("cannot turn on {ENABLE_URING}: {e}")),
        Err(_) => Err(format!("no {ENABLE_URING}: the kernel has no FUSE over io_uring")),
    };
    match uring {
        Ok(()) => vec!["transport=dev", "transport=uring"],
        Err(why) => {
            ext4kit_testkit::skipped!("transport=uring: {why}");
            assert!(std::env::var_os("CI").is_none(), "CI must run this: {why}");
            vec!["transport=dev"]
        }
    }
}

fn key_file(dir: &Path) -> PathBuf {
    let key = dir.join("key");
    std::fs::write(&key, (0..64u8).map(|i| i.wrapping_mul(11) ^ 0x3c).collect::<Vec<_>>()).unwrap();
    key
}

/// A kernel-made image with an encrypted directory `/enc` (v2 policy of
/// `key`); returns the image and the key's identifier.
fn image(dir: &Path, key: &Path) -> (PathBuf, String) {
    let img = dir.join("img");
    let out = Command::new("mkfs.ext4")
        .args(["-q", "-F", "-O", "encrypt"])
        .arg(&img)
        .arg("64M")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let m = LoopMount::rw(&img, &[]).unwrap();
    let id = fscrypt::ioctl(&["add-key", m.path().to_str().unwrap(), key.to_str().unwrap()]);
    let enc = m.path().join("enc");
    std::fs::create_dir(&enc).unwrap();
    fscrypt::ioctl(&["set-policy", enc.to_str().unwrap(), &id]);
    m.unmount().unwrap();
    (img, id)
}

fn tmpfile(dir: &Path, excl: bool) -> rustix::io::Result<std::fs::File> {
    let mut flags = OFlags::TMPFILE | OFlags::RDWR | OFlags::CLOEXEC;
    if excl {
        flags |= OFlags::EXCL;
    }
    let fd: OwnedFd = rustix::fs::openat(CWD, dir, flags, Mode::from_raw_mode(0o640))?;
    Ok(std::fs::File::from(fd))
}

/// `linkat` of the open file's `/proc/self/fd` entry, as `O_TMPFILE`'s
/// manual page names a file without `CAP_DAC_READ_SEARCH`.
fn name_it(f: &std::fs::File, dest: &Path) -> rustix::io::Result<()> {
    let proc = format!("/proc/self/fd/{}", f.as_raw_fd());
    rustix::fs::linkat(CWD, proc.as_str(), CWD, dest, AtFlags::SYMLINK_FOLLOW)
}

fn free_counts(dir: &Path) -> (u64, u64) {
    let s = rustix::fs::statvfs(dir).unwrap();
    (s.f_bfree, s.f_ffree)
}

/// Waits for the free counts to come back to `want`: the kernel sends a
/// closed file's RELEASE in the background.
fn wait_free(dir: &Path, want: (u64, u64)) -> (u64, u64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let now = free_counts(dir);
        if now == want || Instant::now() > deadline {
            return now;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn body(seed: u32, len: u32) -> Vec<u8> {
    (0..len).map(|i| (i.wrapping_mul(seed) % 251) as u8).collect()
}

/// Makes a tmpfile in `dir`, writes `data`, checks it is nameless, names
/// it `dest` and checks the name reads the data.
fn make_and_name(dir: &Path, dest: &Path, data: &[u8], transport: &str) {
    let mut f = tmpfile(dir, false).unwrap_or_else(|e| panic!("{transport}: O_TMPFILE in {dir:?}: {e}"));
    f.write_all(data).unwrap();
    assert_eq!(
        f.metadata().unwrap().nlink(),
        0,
        "{transport}: no links before the name"
    );
    assert_eq!(f.metadata().unwrap().len(), data.len() as u64);
    let before: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(!before.iter().any(|n| n == dest.file_name().unwrap()), "{transport}");
    name_it(&f, dest).unwrap_or_else(|e| panic!("{transport}: linkat to {dest:?}: {e}"));
    assert_eq!(f.metadata().unwrap().nlink(), 1, "{transport}: one link after");
    let mut back = vec![0u8; data.len()];
    f.read_exact_at(&mut back, 0).unwrap();
    assert_eq!(back, data);
    drop(f);
    assert_eq!(std::fs::read(dest).unwrap(), data, "{transport}: read by its name");
}

#[test]
fn o_tmpfile_is_nameless_until_linked_and_freed_at_close_if_never_named() {
    if !ready() {
        return;
    }
    for transport in transports() {
        let tmp = tempfile::tempdir().unwrap();
        let key = key_file(tmp.path());
        let (img, id) = image(tmp.path(), &key);
        let m = FuseMount::start(exe(), &img, transport).expect("mounted");
        let p = m.path();
        std::fs::create_dir(p.join("d")).unwrap();
        let named = body(7, 300_000);
        make_and_name(&p.join("d"), &p.join("d/named"), &named, transport);

        // Never named: its inode and blocks come back at the last close.
        let start = free_counts(p);
        let mut lost = tmpfile(p, false).unwrap();
        lost.write_all(&body(13, 2 << 20)).unwrap();
        lost.sync_all().unwrap();
        let held = free_counts(p);
        assert!(
            held.0 < start.0 && held.1 < start.1,
            "{transport}: {start:?} → {held:?}"
        );
        drop(lost);
        assert_eq!(wait_free(p, start), start, "{transport}: freed at close");

        // O_EXCL: never linkable (ENOENT, as the kernel's ext4 answers).
        let excl = tmpfile(p, true).unwrap();
        let e = name_it(&excl, &p.join("excl")).unwrap_err();
        assert_eq!(e, rustix::io::Errno::NOENT, "{transport}");
        drop(excl);
        // An unlinked (not tmpfile) open file gets no name either.
        std::fs::write(p.join("gone"), b"x").unwrap();
        let mut gone = std::fs::File::open(p.join("gone")).unwrap();
        std::fs::remove_file(p.join("gone")).unwrap();
        assert_eq!(name_it(&gone, &p.join("back")).unwrap_err(), rustix::io::Errno::NOENT);
        let mut x = String::new();
        gone.read_to_string(&mut x).unwrap();
        drop(gone);

        // Inside an encrypted directory: refused without its key (the
        // file would be encrypted from birth), made and named with it.
        let e = tmpfile(&p.join("enc"), false).unwrap_err();
        assert_eq!(e, rustix::io::Errno::NOKEY, "{transport}");
        let (mp, k) = (p.to_str().unwrap(), key.to_str().unwrap());
        let added = Command::new(exe()).args(["key", "add", mp, k]).output().unwrap();
        assert!(added.status.success(), "{}", String::from_utf8_lossy(&added.stderr));
        let secret = body(29, 70_000);
        make_and_name(&p.join("enc"), &p.join("enc/secret"), &secret, transport);
        assert!(m.unmount().expect("unmount").success());
        assert_fsck_clean(&img).expect("e2fsck -fn clean");

        // The kernel's ext4 reads both names; the secret only with the key.
        let k_mount = LoopMount::rw(&img, &[]).unwrap();
        let kp = k_mount.path();
        assert_eq!(std::fs::read(kp.join("d/named")).unwrap(), named, "{transport}");
        assert!(std::fs::symlink_metadata(kp.join("excl")).is_err());
        assert!(
            std::fs::read(kp.join("enc/secret")).is_err(),
            "{transport}: no key, no plaintext name"
        );
        let again = fscrypt::ioctl(&["add-key", kp.to_str().unwrap(), k]);
        assert_eq!(again, id);
        assert_eq!(std::fs::read(kp.join("enc/secret")).unwrap(), secret, "{transport}");
        k_mount.unmount().unwrap();
        assert_fsck_clean(&img).expect("e2fsck -fn clean after the kernel");
    }
}

#[test]
fn fuser_transport_refuses_o_tmpfile_with_eopnotsupp() {
    if !ready() {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let key = key_file(tmp.path());
    let (img, _) = image(tmp.path(), &key);
    let m = FuseMount::start(exe(), &img, "transport=fuser").expect("mounted");
    for _ in 0..2 {
        // The kernel remembers the refusal after the first (no_tmpfile).
        let e = tmpfile(m.path(), false).unwrap_err();
        assert_eq!(e, rustix::io::Errno::OPNOTSUPP);
    }
    std::fs::write(m.path().join("after"), b"ok").unwrap();
    assert_eq!(std::fs::read(m.path().join("after")).unwrap(), b"ok");
    assert!(m.unmount().expect("unmount").success());
    assert_fsck_clean(&img).expect("e2fsck -fn clean");
}
