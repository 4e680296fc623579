//! The reading commands on bigalloc images made by mke2fs: `info` shows
//! dumpe2fs's cluster fields and per-group free clusters, `cat` gives the
//! files back, and an editing command (`mkdir`) works, e2fsck -fn clean.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Output};

fn run(cmd: &str, args: &[&str]) -> Output {
    Command::new(cmd)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{cmd}: {e}"))
}

fn ok(cmd: &str, args: &[&str]) -> String {
    let out = run(cmd, args);
    assert!(
        out.status.success(),
        "{cmd} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

const EXE: &str = env!("CARGO_BIN_EXE_ext4kit");

fn fields(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect()
}

/// The "N free clusters" figure of every group paragraph.
fn free_per_group(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| l.trim().split_once(" free clusters,"))
        .map(|(n, _)| n.to_string())
        .collect()
}

/// A sparse image of three groups or more (`size` = 1,200 MiB with 4 KiB
/// blocks, 300 with 1 KiB) holding `/f`, 100,000 bytes.
fn image(dir: &Path, args: &[&str]) -> Option<String> {
    if Command::new("mkfs.ext4").arg("-V").output().is_err() {
        eprintln!("SKIPPED: mkfs.ext4 is not installed (apt-get install e2fsprogs)");
        assert!(std::env::var_os("CI").is_none(), "CI has e2fsprogs");
        return None;
    }
    let src = dir.join("src");
    std::fs::create_dir_all(&src).unwrap();
    let data: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
    std::fs::write(src.join("f"), &data).unwrap();
    let img = dir.join("img").display().to_string();
    let mut a = vec!["-q", "-F", "-d", src.to_str().unwrap()];
    a.extend_from_slice(args);
    let size = if args.contains(&"4096") { "1200M" } else { "300M" };
    a.extend_from_slice(&[&img, size]);
    ok("mkfs.ext4", &a);
    Some(img)
}

#[test]
fn info_and_cat_read_bigalloc_as_dumpe2fs_and_the_source_do() {
    for args in [
        &["-b", "1024", "-O", "bigalloc", "-C", "16384"][..],
        &["-b", "4096", "-O", "bigalloc", "-C", "16384"],
    ] {
        let dir = tempfile::tempdir().unwrap();
        let Some(img) = image(dir.path(), args) else {
            return;
        };
        let ours_text = ok(EXE, &["info", &img]);
        let theirs_text = ok("dumpe2fs", &[&img]);
        let ours = fields(&ok(EXE, &["info", "-H", &img]));
        let theirs = fields(&ok("dumpe2fs", &["-h", &img]));
        for key in [
            "Block count",
            "Overhead clusters",
            "Free blocks",
            "First block",
            "Block size",
            "Cluster size",
            "Blocks per group",
            "Clusters per group",
        ] {
            assert_eq!(ours.get(key), theirs.get(key), "{key} with {args:?}");
        }
        let groups = free_per_group(&theirs_text);
        assert!(groups.len() > 1, "{args:?}: several groups");
        assert_eq!(free_per_group(&ours_text), groups, "{args:?}");
        let f = run(EXE, &["cat", &img, "/f"]).stdout;
        assert_eq!(f, std::fs::read(dir.path().join("src/f")).unwrap());
        let made = run(EXE, &["mkdir", &img, "/new"]);
        assert!(made.status.success(), "{}", String::from_utf8_lossy(&made.stderr));
        let ls = run(EXE, &["ls", &img, "/"]);
        assert!(String::from_utf8_lossy(&ls.stdout).contains("new"));
        let fsck = run("e2fsck", &["-fn", &img]);
        assert!(fsck.status.success(), "{}", String::from_utf8_lossy(&fsck.stdout));
    }
}
