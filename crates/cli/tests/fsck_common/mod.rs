//! Helpers shared by the `ext4kit fsck` tests: running a command under a
//! time limit, and e2fsck's verdict.

#![allow(dead_code)]

use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// What a run produced. `code` is `None` when it was killed at the time
/// limit (a hang) or by a signal.
pub struct Ran {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    pub timed_out: bool,
}

/// Runs `program args` with a time limit; output is read on threads so a
/// chatty child cannot block on a full pipe.
pub fn run_timed(program: &str, args: &[&str], limit: Duration) -> Ran {
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {program}: {e}"));
    let mut so = child.stdout.take().expect("stdout");
    let mut se = child.stderr.take().expect("stderr");
    let t1 = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = so.read_to_string(&mut s);
        s
    });
    let t2 = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = se.read_to_string(&mut s);
        s
    });
    let start = Instant::now();
    let (code, timed_out) = loop {
        if let Some(st) = child.try_wait().expect("wait") {
            break (st.code(), false);
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            break (None, true);
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    Ran {
        code,
        stdout: t1.join().unwrap_or_default(),
        stderr: t2.join().unwrap_or_default(),
        timed_out,
    }
}

/// `ext4kit fsck ARGS IMAGE`.
pub fn ext4kit_fsck(args: &[&str], image: &Path, limit: Duration) -> Ran {
    let mut a = vec!["fsck"];
    a.extend_from_slice(args);
    let img = image.to_str().expect("utf-8 path");
    a.push(img);
    run_timed(env!("CARGO_BIN_EXE_ext4kit"), &a, limit)
}

/// `e2fsck -fn IMAGE` under a time limit (some corpus images make e2fsck
/// 1.47.0 loop for minutes).
pub fn e2fsck_fn(image: &Path, limit: Duration) -> Ran {
    run_timed("e2fsck", &["-fn", image.to_str().expect("utf-8 path")], limit)
}

/// True when `e2fsck` and `mkfs.ext4` are installed; says so loudly when not.
pub fn have_e2fsprogs() -> bool {
    let ok = ["e2fsck", "mkfs.ext4", "debugfs"]
        .iter()
        .all(|t| Command::new(t).arg("-V").output().is_ok());
    if !ok {
        ext4kit_testkit::skipped!("e2fsprogs (e2fsck, mkfs.ext4, debugfs) not installed");
        assert!(std::env::var_os("CI").is_none(), "CI must have e2fsprogs");
    }
    ok
}

/// A small tree with files, directories, a symlink, a hard link, an xattr
/// and a 3,000-entry directory.
pub fn make_tree(root: &Path) {
    use std::fs;
    fs::create_dir_all(root.join("d1/d2")).unwrap();
    for i in 0..20 {
        fs::write(root.join(format!("f{i}")), format!("hello {i}\n")).unwrap();
    }
    fs::write(root.join("big"), vec![0x5au8; 300 * 1024]).unwrap();
    std::os::unix::fs::symlink("f1", root.join("sym")).unwrap();
    std::os::unix::fs::symlink("x".repeat(100), root.join("longsym")).unwrap();
    fs::hard_link(root.join("f2"), root.join("d1/hard")).unwrap();
    let _ = xattr::set(root.join("f3"), "user.test", b"value");
    fs::create_dir(root.join("huge")).unwrap();
    for i in 0..3000 {
        fs::write(root.join(format!("huge/name_{i:05}")), b"").unwrap();
    }
}

/// `mkfs.ext4`-family `program` with `args` over `src` into a fresh image.
pub fn mkfs_d(program: &str, args: &[&str], src: &Path, image: &Path, size: &str) {
    let mut a: Vec<&str> = vec!["-q", "-F"];
    a.extend_from_slice(args);
    a.extend(["-d", src.to_str().unwrap(), image.to_str().unwrap(), size]);
    let out = Command::new(program).args(&a).output().expect("mkfs");
    assert!(
        out.status.success(),
        "{program} {a:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The e2fsprogs `f_*` images, decompressed into this test target's cache;
/// `None` when the corpus is absent, which is said, and fails under CI.
pub fn f_images() -> Option<Vec<ext4kit_testkit::peer::PeerImage>> {
    let cache = Path::new(env!("CARGO_TARGET_TMPDIR")).join("ext4kit-peer");
    let images: Vec<_> = ext4kit_testkit::peer::e2fsprogs_images_in(&cache)
        .into_iter()
        .filter(|i| i.test.starts_with("f_"))
        .collect();
    if images.is_empty() {
        ext4kit_testkit::skipped!("the e2fsprogs test images (../shared/peer-data/e2fsprogs-tests) are not present");
        assert!(std::env::var_os("CI").is_none(), "CI must have the e2fsprogs corpus");
        return None;
    }
    Some(images)
}

/// `f` over `items` on two threads (the machine's cores), results in the
/// items' order.
pub fn map_two_threads<T: Sync, R: Send>(items: &[T], f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let next = AtomicUsize::new(0);
    let out = Mutex::new(Vec::with_capacity(items.len()));
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(item) = items.get(i) else { break };
                    let r = f(item);
                    out.lock().unwrap().push((i, r));
                }
            });
        }
    });
    let mut out = out.into_inner().unwrap();
    out.sort_by_key(|(i, _)| *i);
    out.into_iter().map(|(_, r)| r).collect()
}
