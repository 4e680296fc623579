//! Oracles for the integration tests: e2fsprogs tools run on scratch images.
//! Tests that need a missing tool print a loud `SKIPPED:` line and pass.

#![allow(dead_code)] // each test binary uses a different subset

use std::path::{Path, PathBuf};
use std::process::Command;

/// The full path of an e2fsprogs tool, looking in `$PATH` and the sbin
/// directories that are often missing from a user's `$PATH`.
pub fn tool(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/sbin", "/usr/sbin", "/usr/local/sbin"].map(PathBuf::from))
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}

/// The tools, or `None` after printing why the caller skips.
pub fn tools(names: &[&str]) -> Option<Vec<PathBuf>> {
    let mut found = Vec::new();
    for name in names {
        match tool(name) {
            Some(p) => found.push(p),
            None => {
                ext4kit_testkit::skipped!("{name} not installed");
                return None;
            }
        }
    }
    Some(found)
}

/// Runs `cmd`, panicking with its stderr if it fails; returns stdout.
pub fn run(cmd: &mut Command) -> Vec<u8> {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// `mkfs.ext4 -q -F <extra…> [-d src] img size`.
pub fn mkfs(mkfs: &Path, img: &Path, extra: &[&str], src: Option<&Path>, size: &str) {
    let mut cmd = Command::new(mkfs);
    cmd.arg("-q").arg("-F").args(extra);
    if let Some(src) = src {
        cmd.arg("-d").arg(src);
    }
    run(cmd.arg(img).arg(size));
}

/// `debugfs -R <request> img`, stdout as text.
pub fn debugfs(debugfs: &Path, img: &Path, request: &str) -> String {
    let out = run(Command::new(debugfs).arg("-R").arg(request).arg(img));
    String::from_utf8_lossy(&out).into_owned()
}
