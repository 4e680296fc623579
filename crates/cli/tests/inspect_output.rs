//! What `info`, `ls -l` and `stat` print for people (issue 19): dumpe2fs's
//! fields, names and dates for the superblock, ls's time styles. dumpe2fs
//! is the oracle; `TZ=UTC` makes the dates comparable.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

fn run(cmd: &str, args: &[&str]) -> String {
    let out = Command::new(cmd)
        .env("TZ", "UTC")
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{cmd}: {e}"));
    assert!(
        out.status.success(),
        "{cmd} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn ext4kit(args: &[&str]) -> String {
    run(env!("CARGO_BIN_EXE_ext4kit"), args)
}

/// "Label: value" lines, whitespace around the value dropped.
fn fields(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect()
}

/// A 64 MiB image (made by mke2fs at a fixed time) holding `/f`, whose
/// mtime is 2026-01-01 12:00:00 UTC and atime 2020-01-01 00:00:00 UTC.
fn image(dir: &Path) -> String {
    let img = dir.join("i.img");
    let img = img.to_str().unwrap();
    let out = Command::new("mkfs.ext4")
        .env("E2FSPROGS_FAKE_TIME", "1700000000")
        .args(["-q", "-F", "-L", "photos", img, "64M"])
        .output()
        .expect("mkfs.ext4 (e2fsprogs)");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    ext4kit(&["write", img, "/f"]);
    for set in [
        "sif /f mtime @1767268800",
        "sif /f mtime_extra 0",
        "sif /f atime @1577836800",
        "sif /f atime_extra 0",
    ] {
        run("debugfs", &["-w", "-R", set, img]);
    }
    img.to_string()
}

#[test]
fn info_shows_what_dumpe2fs_shows() {
    let dir = tempfile::tempdir().unwrap();
    let img = image(dir.path());
    let ours = fields(&ext4kit(&["info", "-H", &img]));
    let theirs = fields(&run("dumpe2fs", &["-h", &img]));
    let same = [
        "Filesystem volume name",
        "Filesystem UUID",
        "Filesystem magic number",
        "Filesystem revision #",
        "Filesystem features",
        "Filesystem flags",
        "Default mount options",
        "Filesystem state",
        "Errors behavior",
        "Filesystem OS type",
        "Inode count",
        "Block count",
        "Reserved block count",
        "Free blocks",
        "Free inodes",
        "Block size",
        "Group descriptor size",
        "Reserved GDT blocks",
        "Inodes per group",
        "Inode blocks per group",
        "Flex block group size",
        "Filesystem created",
        "Last mount time",
        "Last write time",
        "Mount count",
        "Maximum mount count",
        "Last checked",
        "Check interval",
        "First inode",
        "Inode size",
        "Journal inode",
        "Default directory hash",
        "Directory Hash Seed",
        "Checksum type",
        "Checksum",
        "Journal features",
        "Total journal size",
        "Total journal blocks",
        "Journal sequence",
        "Journal start",
    ];
    for key in same {
        assert_eq!(ours.get(key), theirs.get(key), "{key}");
    }
    assert_eq!(ours["Filesystem created"], "Tue Nov 14 22:13:20 2023");
    assert!(
        !ours.contains_key("Served read-only because"),
        "info opens read-only by itself"
    );
}

#[test]
fn ls_and_stat_print_dates_in_ls_styles() {
    let dir = tempfile::tempdir().unwrap();
    let img = image(dir.path());
    let line = |style: &str| {
        let out = ext4kit(&["ls", "-l", "--time-style", style, &img, "/"]);
        out.lines()
            .find(|l| l.ends_with(" f"))
            .unwrap_or_else(|| panic!("{out}"))
            .to_string()
    };
    assert!(
        line("full-iso").contains(" 2026-01-01 12:00:00.000000000 +0000 f"),
        "{}",
        line("full-iso")
    );
    assert!(line("long-iso").contains(" 2026-01-01 12:00 f"), "{}", line("long-iso"));
    assert!(line("epoch").contains(" 1767268800.000000000 f"), "{}", line("epoch"));
    let full = ext4kit(&["ls", "--full-time", &img, "/"]);
    assert!(full.contains(" 2026-01-01 12:00:00.000000000 +0000 f"), "{full}");
    let stat = ext4kit(&["stat", &img, "/f"]);
    assert!(stat.contains(" mtime: 2026-01-01 12:00:00.000000000 +0000"), "{stat}");
    assert!(stat.contains(" atime: 2020-01-01 00:00:00.000000000 +0000"), "{stat}");
    let old = ext4kit(&["stat", "--time-style", "locale", &img, "/f"]);
    assert!(old.contains(" atime: Jan  1  2020"), "{old}");
}
