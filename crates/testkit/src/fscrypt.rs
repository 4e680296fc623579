//! The kernel's fscrypt ioctls for tests: `scripts/fscrypt_ioctl.py`
//! issues them (from Rust every ioctl would be `unsafe`), so tests build
//! kernel-encrypted directories to read back and check the kernel reads
//! what ext4kit wrote.

use std::path::PathBuf;
use std::process::Command;

/// The path of the helper script.
pub fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scripts/fscrypt_ioctl.py")
}

/// Runs the helper with `args` (`add-key`, `set-policy`, `get-policy` …)
/// and returns its trimmed output; panics with its stderr when it fails.
pub fn ioctl(args: &[&str]) -> String {
    let out = Command::new("python3").arg(script()).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}
