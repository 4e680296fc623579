//! `ext4kit debug -w` writing commands against `debugfs -w`: the same
//! commands on two copies of an image mke2fs populated must damage them
//! the same way — e2fsck's report is line for line the same, and so are
//! the superblock and the edited inode. Where debugfs leaves checksums
//! stale (a group descriptor after `set_bg`, bitmaps after `setb`),
//! ext4kit's commit recomputes them, so debugfs's script ends with
//! `set_bg … checksum calc` and e2fsck's bitmap-padding note is left out.
//! Each image is then repaired by `e2fsck -fy` and checked clean.

use std::path::Path;
use std::process::Command;

use ext4kit_testkit::tools::{assert_fsck_clean, debugfs, require_tools, run, skip_unless};

const SCRIPT: &[&str] = &[
    "ssv mnt_count 7",
    "ssv volume_name hello",
    "ssv lastcheck 20200101",
    "ssv state 0",
    "sif /a mode 0100600",
    "sif /a mtime @2147483648",
    "sif /a uid 70000",
    "sif /d links_count 5",
    "set_bg 1 itable_unused 5",
    "set_bg 1 free_inodes_count 100",
    "freeb 5000 3",
    "setb 6000 2",
    "seti <20>",
    "freei /c",
    "link /a /d/newname",
    "unlink /b",
];

/// `ext4kit debug [-w] IMAGE CMD…`.
fn ours(img: &Path, write: bool, cmd: &str) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_ext4kit"))
        .arg("debug")
        .args(write.then_some("-w"))
        .arg(img)
        .args(cmd.split_whitespace())
        .output()
        .unwrap()
}

fn ours_ok(img: &Path, cmd: &str) {
    let out = ours(img, true, cmd);
    assert!(out.status.success(), "{cmd}: {}", String::from_utf8_lossy(&out.stderr));
}

/// An image mke2fs populated from a small tree.
fn image(dir: &Path) -> Option<std::path::PathBuf> {
    skip_unless(require_tools(&["mke2fs", "e2fsck", "debugfs"]))?;
    let src = dir.join("src");
    std::fs::create_dir_all(src.join("d")).unwrap();
    for (n, body) in [("a", "hello\n"), ("b", "bee\n"), ("c", "sea\n")] {
        std::fs::write(src.join(n), body).unwrap();
    }
    let img = dir.join("base.img");
    std::fs::File::create(&img).unwrap().set_len(64 << 20).unwrap();
    let out = run(
        "mke2fs",
        &[
            "-q",
            "-F",
            "-t",
            "ext4",
            "-d",
            src.to_str().unwrap(),
            img.to_str().unwrap(),
        ],
    )
    .unwrap();
    assert!(out.success(), "{}", out.combined());
    Some(img)
}

/// e2fsck -fn's report without its version line and debugfs's own misses.
fn report(img: &Path) -> Vec<String> {
    let out = run("e2fsck", &["-fn", img.to_str().unwrap()]).unwrap();
    out.combined()
        .lines()
        .filter(|l| !l.starts_with("e2fsck 1.") && !l.contains("Padding at end of inode bitmap"))
        .map(str::to_string)
        .collect()
}

fn repaired_clean(img: &Path) {
    run("e2fsck", &["-fy", img.to_str().unwrap()]).unwrap();
    assert_fsck_clean(img).unwrap();
}

#[test]
fn write_commands_damage_as_debugfs_does() {
    let dir = tempfile::tempdir().unwrap();
    let Some(base) = image(dir.path()) else { return };
    let (o, t) = (dir.path().join("ours.img"), dir.path().join("theirs.img"));
    std::fs::copy(&base, &o).unwrap();
    std::fs::copy(&base, &t).unwrap();
    for cmd in SCRIPT {
        ours_ok(&o, cmd);
    }
    let script = dir.path().join("cmds");
    std::fs::write(&script, format!("{}\nset_bg 1 checksum calc\n", SCRIPT.join("\n"))).unwrap();
    let out = run("debugfs", &["-w", "-f", script.to_str().unwrap(), t.to_str().unwrap()]).unwrap();
    assert!(out.success(), "{}", out.combined());
    let ours_report = report(&o);
    assert!(
        ours_report
            .iter()
            .any(|l| l.contains("Inode 12 ref count is 1, should be 2")),
        "{ours_report:#?}"
    );
    assert!(
        ours_report.iter().any(|l| l.contains("Unattached inode")),
        "{ours_report:#?}"
    );
    assert_eq!(ours_report, report(&t));
    let keep = |s: String| -> Vec<String> {
        s.lines()
            .filter(|l| !l.to_lowercase().contains("checksum") && !l.contains("Journal") && !l.contains("write time"))
            .map(str::to_string)
            .collect()
    };
    for req in ["stats -h", "stat /a", "stat /d"] {
        assert_eq!(
            keep(debugfs(&o, req).unwrap()),
            keep(debugfs(&t, req).unwrap()),
            "{req}"
        );
    }
    repaired_clean(&o);
}

/// Writing needs `-w`; unknown fields, bad values, groups and inodes past
/// the last, and checksums the commit recomputes are refused by name,
/// with the image unchanged. An inode checksum given as a number is
/// stored as given (what tests of checksum repair need).
#[test]
fn refusals_and_a_chosen_inode_checksum() {
    let dir = tempfile::tempdir().unwrap();
    let Some(img) = image(dir.path()) else { return };
    let before = std::fs::read(&img).unwrap();
    let no_w = ours(&img, false, "ssv mnt_count 3");
    assert!(!no_w.status.success());
    assert!(String::from_utf8_lossy(&no_w.stderr).contains("debug -w"));
    for (cmd, says) in [
        ("ssv no_such_field 1", "no such field"),
        ("ssv mnt_count 70000", "too large"),
        ("ssv checksum 0x1234", "only `calc`"),
        ("set_bg 9999 flags 0", "no group 9999"),
        ("sif <99999> mode 0", "99999"),
        ("unlink /nothing", "nothing"),
    ] {
        let out = ours(&img, true, cmd);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && stderr.contains(says), "{cmd}: {stderr}");
    }
    assert!(
        std::fs::read(&img).unwrap() == before,
        "a refused edit changed the image"
    );
    ours_ok(&img, "sif /a checksum 0x1234");
    let r = report(&img);
    assert!(
        r.iter()
            .any(|l| l.contains("Inode 12 passes checks, but checksum does not match")),
        "{r:#?}"
    );
    repaired_clean(&img);
}
