//! `ext4kit --version` names the source revision, and the completion
//! scripts and man pages that `ext4kit completions` and `ext4kit man` make
//! from the command-line definition cover every command.

use std::path::Path;
use std::process::Command;

fn ext4kit(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_ext4kit"))
        .args(args)
        .output()
        .expect("run ext4kit");
    assert!(
        out.status.success(),
        "ext4kit {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8 output")
}

/// The subcommands `ext4kit --help` lists (its "Commands:" section).
fn subcommands() -> Vec<String> {
    let help = ext4kit(&["--help"]);
    let listed = help
        .split_once("Commands:\n")
        .expect("a Commands section")
        .1
        .lines()
        .take_while(|l| !l.trim().is_empty());
    let names: Vec<String> = listed
        .filter(|l| l.starts_with("  ") && !l.starts_with("   "))
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect();
    for expected in ["fsck", "mount", "bench", "completions", "man"] {
        assert!(names.iter().any(|n| n == expected), "{expected} not in {names:?}");
    }
    names
}

#[test]
fn version_names_the_crate_version_and_a_revision() {
    let v = ext4kit(&["--version"]);
    let v = v.trim();
    let rest = v
        .strip_prefix(&format!("ext4kit {} (", env!("CARGO_PKG_VERSION")))
        .unwrap_or_else(|| panic!("{v:?}"));
    let revision = rest.strip_suffix(')').unwrap_or_else(|| panic!("{v:?}"));
    if revision == "unknown revision" {
        return;
    }
    let (hash, date) = revision.split_once(", ").unwrap_or_else(|| panic!("{v:?}"));
    let hash = hash.strip_suffix("-dirty").unwrap_or(hash);
    assert!(hash.len() >= 7 && hash.bytes().all(|b| b.is_ascii_hexdigit()), "{v:?}");
    let d: Vec<&str> = date.split('-').collect();
    assert!(
        d.len() == 3 && d.iter().all(|p| p.bytes().all(|b| b.is_ascii_digit())),
        "{v:?}"
    );
}

#[test]
fn bash_completion_mentions_every_subcommand() {
    let script = ext4kit(&["completions", "bash"]);
    let words: Vec<&str> = script.split(|c: char| !(c.is_alphanumeric() || c == '-')).collect();
    for name in subcommands() {
        assert!(words.contains(&name.as_str()), "bash completion lacks {name}");
    }
    for shell in ["zsh", "fish", "elvish", "powershell"] {
        assert!(ext4kit(&["completions", shell]).contains("fsck"), "{shell}");
    }
}

#[test]
fn man_pages_cover_every_command_and_fsck_names_y() {
    let dir = tempfile::tempdir().expect("temp dir");
    let out = dir.path().join("man1");
    ext4kit(&["man", out.to_str().expect("UTF-8 path")]);
    assert!(out.join("ext4kit.1").is_file());
    for name in subcommands().iter().filter(|n| *n != "help") {
        assert!(out.join(format!("ext4kit-{name}.1")).is_file(), "no page for {name}");
    }
    assert!(out.join("ext4kit-bench-mount.1").is_file(), "no page for bench mount");
    let fsck = std::fs::read_to_string(out.join("ext4kit-fsck.1")).expect("fsck page");
    assert!(fsck.contains(".TH ext4kit-fsck"), "{fsck}");
    assert!(fsck.contains("\\-y"), "the fsck page does not name -y:\n{fsck}");
}

/// Every document the README cites (`docs/….md`, `scripts/…`, links to
/// files) is in the repository (issue 19: the README pointed at design
/// documents a clone does not have).
#[test]
fn every_document_the_readme_cites_is_in_the_repository() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let mut cited = Vec::new();
    for word in readme.split(|c: char| c.is_whitespace() || "()[]`'\",;:|<>*".contains(c)) {
        // A link's anchor names a heading, not a file.
        let w = word.split('#').next().unwrap_or_default().trim_end_matches('.');
        let local = w.starts_with("docs/") || w.starts_with("scripts/") || w.starts_with("crates/");
        if local && !w.contains("http") && !w.contains('*') {
            cited.push(w.trim_end_matches('/').to_string());
        }
    }
    assert!(
        cited.iter().any(|c| c.starts_with("docs/")),
        "no docs cited: parsing is off"
    );
    let missing: Vec<&String> = cited.iter().filter(|c| !root.join(c.as_str()).exists()).collect();
    assert!(
        missing.is_empty(),
        "README cites files not in the repository: {missing:?}"
    );
}

/// `ls -l --help` names the long listing's columns in the order `ls -l`
/// prints them (issue 19: they differed).
#[test]
fn ls_help_names_the_columns_in_output_order() {
    let help = ext4kit(&["ls", "--help"]);
    let line = help
        .lines()
        .find(|l| l.contains("Long listing:"))
        .unwrap_or_else(|| panic!("{help}"));
    let order: Vec<&str> = ["inode", "mode", "links", "owner", "group", "size", "time", "name"]
        .into_iter()
        .collect();
    let at: Vec<usize> = order.iter().map(|w| line.find(w).unwrap_or(usize::MAX)).collect();
    assert!(at.windows(2).all(|p| p[0] < p[1]), "{line}");
    // And the listing: inode number, then the mode string, links, uid,
    // gid, size, a date, the name.
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("h.img");
    let img = img.to_str().unwrap();
    ext4kit(&["mkfs", "-q", img, "8M"]);
    let ls = ext4kit(&["ls", "-l", "--time-style", "long-iso", img, "/"]);
    let row: Vec<&str> = ls
        .lines()
        .find(|l| l.ends_with("lost+found"))
        .unwrap_or_else(|| panic!("{ls}"))
        .split_whitespace()
        .collect();
    assert_eq!(row[0], "11", "{ls}");
    assert!(row[1].starts_with('d'), "{ls}");
    assert!(row[2..6].iter().all(|w| w.parse::<u64>().is_ok()), "{ls}");
    assert_eq!(row[8], "lost+found", "{ls}");
}
