//! `ext4kit --version` names the source revision, and the completion
//! scripts and man pages that `ext4kit completions` and `ext4kit man` make
//! from the command-line definition cover every command.

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
