//! Test-only helpers: build images with mkfs.ext4, ask debugfs where things
//! are, read raw bytes from the image file, loop-mount as root. Every helper
//! that needs a missing tool or privilege returns `None` after printing
//! "SKIPPED: …" so the calling test can return early and loudly.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

use ext4kit_format::superblock::RawSuperblock;

/// True when every tool in `tools` is on PATH; prints SKIPPED otherwise.
pub fn have_tools(test: &str, tools: &[&str]) -> bool {
    for tool in tools {
        let found = Command::new("sh")
            .arg("-c")
            .arg(format!("command -v {tool}"))
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false);
        if !found {
            ext4kit_testkit::skipped!("{test}: `{tool}` not found");
            return false;
        }
    }
    true
}

/// Runs a command, panicking with its stderr on failure; returns stdout.
pub fn run(cmd: &mut Command) -> String {
    let out = cmd.output().expect("spawn");
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `mkfs.ext4 -q -F <args> IMG SIZE`.
pub fn mkfs(img: &Path, args: &[&str], size: &str) {
    run(Command::new("mkfs.ext4")
        .arg("-q")
        .arg("-F")
        .args(args)
        .arg(img)
        .arg(size));
}

/// `debugfs -R REQ IMG`, stdout (debugfs prints its banner on stderr).
pub fn debugfs(img: &Path, req: &str) -> String {
    run(Command::new("debugfs").arg("-R").arg(req).arg(img))
}

/// The number after `key` in `text` (e.g. "File ACL: ").
pub fn number_after(text: &str, key: &str) -> Option<u64> {
    let rest = &text[text.find(key)? + key.len()..];
    let digits: String = rest.trim_start().chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// Reads `len` bytes at byte `off` of the image file.
pub fn read_at(img: &Path, off: u64, len: usize) -> Vec<u8> {
    use std::io::{Read, Seek, SeekFrom};
    let mut f = std::fs::File::open(img).unwrap();
    f.seek(SeekFrom::Start(off)).unwrap();
    let mut buf = vec![0u8; len];
    f.read_exact(&mut buf).unwrap();
    buf
}

/// The primary superblock of the image.
pub fn superblock(img: &Path) -> RawSuperblock {
    RawSuperblock::parse(&read_at(img, 1024, 1024)).unwrap()
}

/// Block size from the superblock.
pub fn block_size(img: &Path) -> usize {
    1024usize << superblock(img).s_log_block_size.get()
}

/// Reads block `blk`.
pub fn read_block(img: &Path, blk: u64) -> Vec<u8> {
    let bs = block_size(img);
    read_at(img, blk * bs as u64, bs)
}

/// The raw on-disk inode record of `path` (via `debugfs imap`).
pub fn raw_inode(img: &Path, path: &str) -> Vec<u8> {
    let out = debugfs(img, &format!("imap {path}"));
    let block = number_after(&out, "located at block ").expect("imap block");
    let hex = out.split("offset 0x").nth(1).expect("imap offset");
    let hex: String = hex.chars().take_while(char::is_ascii_hexdigit).collect();
    let offset = u64::from_str_radix(&hex, 16).unwrap();
    let isize = usize::from(superblock(img).s_inode_size.get());
    read_at(img, block * block_size(img) as u64 + offset, isize)
}

/// `i_extra_isize` of a raw inode record.
pub fn extra_isize(inode: &[u8]) -> u16 {
    u16::from_le_bytes([inode[128], inode[129]])
}

/// Physical blocks of inode `spec` (e.g. "<8>") in logical order.
pub fn blocks_of(img: &Path, spec: &str) -> Vec<u64> {
    debugfs(img, &format!("blocks {spec}"))
        .split_whitespace()
        .map(|b| b.parse().unwrap())
        .collect()
}

/// A loop mount that is unmounted on drop.
pub struct LoopMount {
    /// Mount point.
    pub dir: PathBuf,
    _tmp: tempfile::TempDir,
    mounted: bool,
}

impl LoopMount {
    /// Mounts `img` with `mount -o loop`; `None` (after SKIPPED) if not root
    /// or the mount fails.
    pub fn new(test: &str, img: &Path) -> Option<Self> {
        if !rustix::process::geteuid().is_root() {
            ext4kit_testkit::skipped!("{test}: needs root for a loop mount");
            return None;
        }
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("mnt");
        std::fs::create_dir(&dir).unwrap();
        let out = Command::new("mount")
            .args(["-t", "ext4", "-o", "loop"])
            .arg(img)
            .arg(&dir)
            .output();
        match out {
            Ok(o) if o.status.success() => Some(Self {
                dir,
                _tmp: tmp,
                mounted: true,
            }),
            Ok(o) => {
                let err = String::from_utf8_lossy(&o.stderr);
                ext4kit_testkit::skipped!("{test}: loop mount failed: {err}");
                None
            }
            Err(e) => {
                ext4kit_testkit::skipped!("{test}: cannot run mount: {e}");
                None
            }
        }
    }

    /// Unmounts now (panics on failure).
    pub fn unmount(mut self) {
        run(Command::new("umount").arg(&self.dir));
        self.mounted = false;
    }
}

impl Drop for LoopMount {
    fn drop(&mut self) {
        if self.mounted {
            let _ = Command::new("umount").arg(&self.dir).status();
        }
    }
}
