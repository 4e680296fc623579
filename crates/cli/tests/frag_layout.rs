//! `ext4kit frag` and `ext4kit layout` against the oracles: the free-space
//! histogram is e2freefrag's, row for row, on an image whose free space
//! was cut up by removing every other file; the layout of 20 files of
//! 12 KiB written one after the other shows them packed with no gaps
//! (seed 001, figure 3), and the plot is written.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

use ext4kit_testkit::tools::{e2fsck_fn, require_tool, skip_unless};

fn ext4kit(args: &[&str], stdin: Option<&[u8]>) -> String {
    let mut child = Command::new(env!("CARGO_BIN_EXE_ext4kit"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn ext4kit");
    let mut input = child.stdin.take().expect("stdin");
    if let Some(data) = stdin {
        input.write_all(data).expect("feed stdin");
    }
    drop(input);
    let out = child.wait_with_output().expect("wait");
    assert!(
        out.status.success(),
        "ext4kit {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// An image with 20 files of 12 KiB and one of 3 MB written in order.
fn image(dir: &Path) -> String {
    let img = dir.join("a.img").to_str().unwrap().to_string();
    ext4kit(&["mkfs", "-q", "-t", "ext4", &img, "64M"], None);
    for i in 0..20u8 {
        ext4kit(&["write", &img, &format!("/f{i:02}")], Some(&[i; 12288]));
    }
    ext4kit(&["write", &img, "/big"], Some(&vec![7; 3_000_000]));
    img
}

/// e2freefrag's histogram rows as (free extents, free blocks).
fn e2freefrag(img: &str) -> Vec<(u64, u64)> {
    let out = Command::new("e2freefrag").arg(img).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .skip_while(|l| !l.starts_with("Extent Size Range"))
        .skip(1)
        .filter_map(|l| {
            let (_, counts) = l.split_once(':')?;
            let mut f = counts.split_whitespace();
            Some((f.next()?.parse().ok()?, f.next()?.parse().ok()?))
        })
        .collect()
}

#[test]
fn free_space_histogram_matches_e2freefrag() {
    if skip_unless(require_tool("e2freefrag")).is_none() {
        assert!(
            std::env::var_os("CI").is_none(),
            "e2freefrag (e2fsprogs) is missing under CI"
        );
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let img = image(dir.path());
    for i in (0..20).step_by(2) {
        ext4kit(&["rm", &img, &format!("/f{i:02}")], None);
    }
    let report: serde_json::Value = serde_json::from_str(&ext4kit(&["frag", &img, "--json"], None)).unwrap();
    let ours: Vec<(u64, u64)> = report["free"]["histogram"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| (b["runs"].as_u64().unwrap(), b["blocks"].as_u64().unwrap()))
        .collect();
    let theirs = e2freefrag(&img);
    assert!(ours.len() >= 3, "{ours:?}");
    // The ten 12-block holes are a row of their own (8–15 blocks).
    assert!(ours.contains(&(10, 120)), "{ours:?}");
    assert_eq!(ours, theirs);
    let files = report["files"].as_array().unwrap();
    assert_eq!(files.len(), 11);
    assert!(files.iter().all(|f| f["extents"] == 1 && f["score"] == 0), "{files:?}");
    assert_clean(&img);
}

fn assert_clean(img: &str) {
    let fsck = e2fsck_fn(Path::new(img)).unwrap();
    assert!(fsck.is_clean(), "{}", fsck.output);
}

#[test]
fn small_files_written_in_sequence_are_packed() {
    let dir = tempfile::tempdir().unwrap();
    let img = image(dir.path());
    let paths: Vec<String> = (0..20).map(|i| format!("/f{i:02}")).collect();
    let plot = dir.path().join("layout.png");
    let mut args = vec!["layout", img.as_str()];
    args.extend(paths.iter().map(String::as_str));
    args.extend(["--plot", plot.to_str().unwrap()]);
    let out = ext4kit(&args, None);
    // "  0..11 -> P..Q (12 blocks)" once per file.
    let runs: Vec<(u64, u64)> = out
        .lines()
        .filter_map(|l| {
            let (_, phys) = l.split_once("-> ")?;
            let (a, rest) = phys.split_once("..")?;
            let b = rest.split_whitespace().next()?;
            Some((a.parse().ok()?, b.parse().ok()?))
        })
        .collect();
    assert_eq!(runs.len(), 20, "{out}");
    for w in runs.windows(2) {
        assert_eq!(w[0].1 + 1, w[1].0, "a gap between files: {out}");
    }
    assert_eq!(&std::fs::read(&plot).unwrap()[..8], b"\x89PNG\r\n\x1a\n");
    assert_clean(&img);
}
