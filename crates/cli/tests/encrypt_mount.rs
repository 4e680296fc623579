//! fscrypt keys and policies on a running `ext4kit mount`, on both
//! transports: directories the kernel encrypted are mounted without keys;
//! `ext4kit key add` shows their plaintext at once (the kernel's cached
//! no-key names and listings are dropped), `key remove` brings the no-key
//! names back at once while files open under the key keep reading
//! (`key status` says "incompletely removed" until they close), and
//! `key set-policy` on a mounted directory makes directories the kernel
//! reads back with the key. Every image ends `e2fsck -fn` clean.

use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use ext4kit_testkit::fscrypt;
use ext4kit_testkit::fuse::FuseMount;
use ext4kit_testkit::mount::LoopMount;
use ext4kit_testkit::tools::assert_fsck_clean;

const DESC: &str = "0123456789abcdef";
const TRANSPORTS: [&str; 2] = ["transport=dev", "transport=fuser"];

fn exe() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_ext4kit"))
}

fn ext4kit(args: &[&str]) -> Output {
    Command::new(exe()).args(args).output().unwrap()
}

fn ok(args: &[&str]) -> String {
    let out = ext4kit(args);
    assert!(
        out.status.success(),
        "ext4kit {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

fn ready() -> bool {
    fscrypt::ready(true)
}

fn write_key(dir: &Path) -> PathBuf {
    let key = dir.join("key");
    std::fs::write(&key, (0..64u8).map(|i| i.wrapping_mul(7) ^ 0x5a).collect::<Vec<_>>()).unwrap();
    key
}

fn mkfs(dir: &Path) -> PathBuf {
    let img = dir.join("img");
    let out = Command::new("mkfs.ext4")
        .args(["-q", "-F", "-O", "encrypt"])
        .arg(&img)
        .arg("32M")
        .output()
        .unwrap();
    assert!(out.status.success());
    img
}

/// A kernel-made image whose /v1 and /v2 hold `small` ("hello\n"),
/// `sub/deep` and `link` (→ "small"); returns it, the key file and the v2
/// identifier.
fn image(dir: &Path) -> (PathBuf, PathBuf, String) {
    let img = mkfs(dir);
    let key = write_key(dir);
    let m = LoopMount::rw(&img, &[]).unwrap();
    let (mp, k) = (m.path().to_str().unwrap(), key.to_str().unwrap());
    fscrypt::ioctl(&["add-key", mp, k, DESC]);
    let id = fscrypt::ioctl(&["add-key", mp, k]);
    for (d, policy) in [("v1", DESC), ("v2", id.as_str())] {
        let p = m.path().join(d);
        std::fs::create_dir(&p).unwrap();
        fscrypt::ioctl(&["set-policy", p.to_str().unwrap(), policy]);
        std::fs::write(p.join("small"), b"hello\n").unwrap();
        std::fs::create_dir(p.join("sub")).unwrap();
        std::fs::write(p.join("sub/deep"), vec![7u8; 9000]).unwrap();
        std::os::unix::fs::symlink("small", p.join("link")).unwrap();
    }
    m.unmount().unwrap();
    (img, key, id)
}

fn names(dir: &Path) -> Vec<Vec<u8>> {
    let mut v: Vec<Vec<u8>> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().as_bytes().to_vec())
        .collect();
    v.sort();
    v
}

fn plaintext() -> Vec<Vec<u8>> {
    vec![b"link".to_vec(), b"small".to_vec(), b"sub".to_vec()]
}

/// Checks `dir` as a process without the key sees it: three no-key names,
/// no plaintext one, the file refused (ENOKEY) unless it is `open` under a
/// removed key (then it is still the same file), the link's no-key target.
fn looks_keyless(dir: &Path, open: bool) {
    let listed = names(dir);
    assert_eq!(listed.len(), 3, "{listed:?}");
    assert!(!listed.contains(&b"small".to_vec()), "{listed:?}");
    assert!(std::fs::symlink_metadata(dir.join("small")).is_err());
    for n in &listed {
        let p = dir.join(std::ffi::OsStr::from_bytes(n));
        let meta = std::fs::symlink_metadata(&p).unwrap();
        if meta.is_file() && !open {
            let e = std::fs::File::open(&p).unwrap_err();
            assert_eq!(e.raw_os_error(), Some(libc::ENOKEY), "{e}");
        } else if meta.file_type().is_symlink() {
            assert_ne!(std::fs::read_link(&p).unwrap(), Path::new("small"));
        }
    }
}

fn looks_keyed(dir: &Path) {
    assert_eq!(names(dir), plaintext());
    assert_eq!(std::fs::read(dir.join("small")).unwrap(), b"hello\n");
    assert_eq!(std::fs::read_link(dir.join("link")).unwrap(), Path::new("small"));
    assert_eq!(std::fs::read(dir.join("sub/deep")).unwrap(), vec![7u8; 9000]);
}

#[test]
fn key_add_remove_and_status_take_effect_at_once() {
    if !ready() {
        return;
    }
    for transport in TRANSPORTS {
        let tmp = tempfile::tempdir().unwrap();
        let (img, key, id) = image(tmp.path());
        let m = FuseMount::start(exe(), &img, transport).expect("mounted");
        let mp = m.path().to_str().unwrap();
        let (v1, v2) = (m.path().join("v1"), m.path().join("v2"));
        let k = key.to_str().unwrap();
        let v1_key = format!("{DESC}={k}");
        assert_eq!(ok(&["key", "status", mp, &id]), "absent");
        looks_keyless(&v1, false);
        looks_keyless(&v2, false);

        // What the kernel cached without the key goes at once.
        assert_eq!(ok(&["key", "add", mp, k]), id, "{transport}: add prints the identifier");
        assert_eq!(ok(&["key", "status", mp, k]), "present");
        looks_keyed(&v2);
        ok(&["key", "add", mp, &v1_key]);
        assert_eq!(ok(&["key", "status", mp, DESC]), "present");
        looks_keyed(&v1);

        // Open files keep their key; everything else loses it at once.
        let held = std::fs::File::open(v2.join("small")).unwrap();
        let deep = std::fs::File::open(v2.join("sub/deep")).unwrap();
        let said = ok(&["key", "remove", mp, &id]);
        assert!(said.contains("incompletely removed (2 files open)"), "{said}");
        assert_eq!(ok(&["key", "status", mp, &id]), "incompletely removed (2 files open)");
        looks_keyless(&v2, true);
        looks_keyed(&v1);
        let mut buf = [0u8; 6];
        std::os::unix::fs::FileExt::read_exact_at(&held, &mut buf, 0).unwrap();
        assert_eq!(&buf, b"hello\n", "{transport}: an open file reads on");
        let mut tail = [0u8; 100];
        std::os::unix::fs::FileExt::read_exact_at(&deep, &mut tail, 8900).unwrap();
        assert_eq!(tail, [7u8; 100]);
        drop(held);
        assert_eq!(ok(&["key", "status", mp, &id]), "incompletely removed (1 files open)");
        drop(deep);
        assert_eq!(ok(&["key", "status", mp, &id]), "absent", "{transport}");
        looks_keyless(&v2, false);
        let again = ext4kit(&["key", "remove", mp, &id]);
        assert!(!again.status.success());
        assert!(String::from_utf8_lossy(&again.stderr).contains("does not have that key"));

        // v1, by descriptor, with nothing open: removed whole.
        assert_eq!(ok(&["key", "remove", mp, &v1_key]), "");
        assert_eq!(ok(&["key", "status", mp, DESC]), "absent");
        looks_keyless(&v1, false);
        ok(&["key", "add", mp, k]);
        looks_keyed(&v2);
        std::fs::write(v2.join("new"), b"after re-adding\n").unwrap();
        m.unmount().expect("unmount");
        assert_fsck_clean(&img).expect("e2fsck -fn clean");
    }
}

#[test]
fn key_set_policy_on_a_mounted_directory_is_what_the_kernel_reads() {
    if !ready() {
        return;
    }
    for transport in TRANSPORTS {
        let tmp = tempfile::tempdir().unwrap();
        let img = mkfs(tmp.path());
        let key = write_key(tmp.path());
        let k = key.to_str().unwrap();
        let v1_key = format!("{DESC}={k}");
        let m = FuseMount::start(exe(), &img, transport).expect("mounted");
        let (secret, v1, full) = (m.path().join("secret"), m.path().join("v1"), m.path().join("full"));
        for d in [&secret, &v1, &full] {
            std::fs::create_dir(d).unwrap();
        }
        std::fs::write(full.join("x"), b"x").unwrap();
        let refused = ext4kit(&["key", "set-policy", full.to_str().unwrap(), "--key", k]);
        assert!(
            String::from_utf8_lossy(&refused.stderr).contains("not empty"),
            "{refused:?}"
        );
        let s = secret.to_str().unwrap();
        ok(&["key", "set-policy", s, "--key", k]);
        ok(&["key", "set-policy", s, "--key", k]);
        let other = ext4kit(&["key", "set-policy", s, "--key", &v1_key]);
        assert!(
            String::from_utf8_lossy(&other.stderr).contains("another policy"),
            "{other:?}"
        );
        ok(&[
            "key",
            "set-policy",
            v1.to_str().unwrap(),
            "--key",
            &v1_key,
            "--padding",
            "16",
        ]);
        let body: Vec<u8> = (0..10_000u32).map(|n| (n * 31 % 251) as u8).collect();
        for d in [&secret, &v1] {
            std::fs::write(d.join("a file name"), &body).unwrap();
            std::fs::create_dir(d.join("sub")).unwrap();
            std::os::unix::fs::symlink("a file name", d.join("sub/link")).unwrap();
        }
        m.unmount().expect("unmount");
        assert_fsck_clean(&img).expect("e2fsck -fn clean");

        let m = LoopMount::ro(&img).unwrap();
        let mp = m.path().to_str().unwrap();
        fscrypt::ioctl(&["add-key", mp, k, DESC]);
        let id = fscrypt::ioctl(&["add-key", mp, k]);
        for (d, policy) in [("secret", format!("2 1 4 3 {id}")), ("v1", format!("0 1 4 2 {DESC}"))] {
            let p = m.path().join(d);
            assert_eq!(
                fscrypt::ioctl(&["get-policy", p.to_str().unwrap()]),
                policy,
                "{transport}"
            );
            assert_eq!(names(&p), [b"a file name".to_vec(), b"sub".to_vec()]);
            assert!(
                std::fs::read(p.join("a file name")).unwrap() == body,
                "contents of /{d}"
            );
            assert_eq!(
                std::fs::read_link(p.join("sub/link")).unwrap(),
                Path::new("a file name")
            );
        }
        m.unmount().unwrap();
    }
}
