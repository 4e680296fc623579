//! Every corrupted image of the e2fsprogs test suite, opened and walked
//! completely by `ext4kit info` and `ext4kit export` (with and without
//! checksum verification): each run must either succeed or fail with an
//! error that says what is corrupt — never panic, hang or run out of memory.
//! Each run is a child process under a time limit and an address-space cap.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use ext4kit_testkit::peer::{PeerImage, e2fsprogs_images_in};

const TIME_LIMIT: Duration = Duration::from_secs(30);
/// Address-space cap of each run, in KiB (`ulimit -v`).
const MEMORY_KIB: u64 = 4 << 20;

/// Outcome of one run.
enum Outcome {
    Ok,
    Error(String),
    Bad(String),
}

fn run(args: &[&str]) -> Outcome {
    let bin = env!("CARGO_BIN_EXE_ext4kit");
    let script = format!("ulimit -v {MEMORY_KIB}; exec \"$0\" \"$@\"");
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(script)
        .arg(bin)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn ext4kit");
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            let mut err = String::new();
            use std::io::Read;
            child.stderr.take().map(|mut s| s.read_to_string(&mut err));
            return match status.code() {
                Some(0) => Outcome::Ok,
                Some(1) if err.starts_with("ext4kit: ") => Outcome::Error(err),
                code => Outcome::Bad(format!("exit {code:?}: {err}")),
            };
        }
        if start.elapsed() > TIME_LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            return Outcome::Bad(format!("no answer within {TIME_LIMIT:?} (hang)"));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn walk(img: &PeerImage, scratch: &Path, extra: &[&str]) -> Vec<(String, Outcome)> {
    let image = img.path.to_str().expect("utf-8 path");
    let dest = scratch.join("out");
    let _ = std::fs::remove_dir_all(&dest);
    let dest_s = dest.to_str().expect("utf-8 path");
    let mut info = vec!["info", "--json", "--ignore-journal", image];
    info.extend_from_slice(extra);
    let mut export = vec!["export", "-q", "--ignore-journal", image, "/", dest_s];
    export.extend_from_slice(extra);
    let out = vec![("info".to_string(), run(&info)), ("export".to_string(), run(&export))];
    let _ = std::fs::remove_dir_all(&dest);
    out
}

#[test]
fn corrupt_e2fsprogs_images_never_panic_hang_or_blow_up() {
    let images = e2fsprogs_images_in(
        std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join("ext4kit-peer")
            .as_path(),
    );
    if images.is_empty() {
        ext4kit_testkit::skipped!("the e2fsprogs test images (../shared/peer-data/e2fsprogs-tests) are not present");
        return;
    }
    let scratch = tempfile::tempdir().expect("tempdir");
    let (mut ok, mut errors, mut bad) = (0, 0, Vec::new());
    for img in &images {
        for extra in [&[][..], &["--ignore-checksums"][..]] {
            for (what, outcome) in walk(img, scratch.path(), extra) {
                match outcome {
                    Outcome::Ok => ok += 1,
                    Outcome::Error(e) => {
                        errors += 1;
                        assert!(!e.trim().is_empty(), "{}: {what}: empty error", img.test);
                    }
                    Outcome::Bad(b) => bad.push(format!("{} {what} {extra:?}: {b}", img.test)),
                }
            }
        }
    }
    eprintln!(
        "{} images: {ok} runs succeeded, {errors} ended with a located error",
        images.len()
    );
    assert!(
        bad.is_empty(),
        "{} runs panicked, hung or crashed:\n{}",
        bad.len(),
        bad.join("\n")
    );
    assert!(
        images.len() >= 150,
        "expected the whole corpus, found {} images",
        images.len()
    );
}
