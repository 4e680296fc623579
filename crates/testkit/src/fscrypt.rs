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

/// Whether a test can have the kernel encrypt: a loop mount, ext4
/// encryption in this kernel, the tools and the helper's python3, and a
/// FUSE mount when `fuse` says the test needs one. Skips loudly, and
/// fails under CI, when not.
pub fn ready(fuse: bool) -> bool {
    let no_enc =
        (!std::path::Path::new("/sys/fs/ext4/features/encryption").exists()).then(|| "no ext4 encryption".to_string());
    let fuse_check = if fuse { crate::fuse::can_fuse_mount() } else { Ok(()) };
    for check in [
        crate::mount::can_loop_mount(),
        fuse_check,
        crate::tools::require_tools(&["mkfs.ext4", "e2fsck", "python3"]),
        no_enc.map_or(Ok(()), Err),
    ] {
        if let Err(why) = check {
            crate::skipped!("{why}");
            assert!(std::env::var_os("CI").is_none(), "CI must run this: {why}");
            return false;
        }
    }
    true
}
