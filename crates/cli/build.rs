//! Records the source revision for `ext4kit --version` as
//! `EXT4KIT_REVISION`: the commit's short hash and date, `-dirty` when
//! tracked files differed from it, or `unknown revision` where git or the
//! repository is missing (a build from a source tarball). A packager can
//! set `EXT4KIT_REVISION` instead. Nothing here touches the network.

use std::path::Path;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=EXT4KIT_REVISION");
    let revision = match std::env::var("EXT4KIT_REVISION") {
        Ok(given) if !given.trim().is_empty() => given,
        _ => from_git().unwrap_or_else(|| "unknown revision".into()),
    };
    println!("cargo:rustc-env=EXT4KIT_REVISION={revision}");
}

/// `git` run in this crate's directory; `None` when it is missing or fails.
fn git(args: &[&str]) -> Option<String> {
    let dir = std::env::var_os("CARGO_MANIFEST_DIR")?;
    let out = Command::new("git").arg("-C").arg(dir).args(args).output().ok()?;
    if !out.status.success() {
        return None;
    }
    Some(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// `2d398c0, 2026-11-27` (the commit date), with `-dirty` after the hash
/// when tracked files differ from the commit. Asks cargo to run this again
/// when HEAD moves: HEAD itself, the branch ref it names (loose or packed)
/// and the index, each found with `--git-path` so linked worktrees work.
/// An edit not yet staged marks the build `-dirty` only once something
/// else runs this script again (cargo does not watch the whole tree).
fn from_git() -> Option<String> {
    is_our_checkout()?;
    let line = git(&["log", "-1", "--abbrev=7", "--format=%h %cs"])?;
    let (hash, date) = line.split_once(' ')?;
    let mut watched = vec!["HEAD".to_string(), "packed-refs".into(), "index".into()];
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        watched.push(branch);
    }
    for name in &watched {
        if let Some(path) = git(&["rev-parse", "--path-format=absolute", "--git-path", name])
            && Path::new(&path).exists()
        {
            println!("cargo:rerun-if-changed={path}");
        }
    }
    // No optional locks: `status` must not rewrite the index, whose change
    // would run this script again.
    let dirty =
        git(&["--no-optional-locks", "status", "--porcelain", "--untracked-files=no"]).is_some_and(|s| !s.is_empty());
    Some(format!("{hash}{}, {date}", if dirty { "-dirty" } else { "" }))
}

/// `Some` when the enclosing git work tree is this workspace's own: a source
/// tarball unpacked inside some other repository must not report that
/// repository's revision.
fn is_our_checkout() -> Option<()> {
    let top = std::fs::canonicalize(git(&["rev-parse", "--show-toplevel"])?).ok()?;
    let manifest = std::env::var_os("CARGO_MANIFEST_DIR")?;
    let workspace = std::fs::canonicalize(Path::new(&manifest).join("../..")).ok()?;
    (top == workspace).then_some(())
}
