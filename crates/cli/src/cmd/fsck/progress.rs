//! Progress for `fsck -C`: a bar on stdout, or e2fsck's "pass done total
//! device" lines on a file descriptor (the format fsck(8) front ends read).

use std::io::Write;

use ext4kit_fsck::Progress;

/// Progress output: a bar on stdout (`-C 0`) or e2fsck-style lines on a
/// file descriptor.
pub(super) struct ProgressOut {
    fd: Option<u32>,
    out: Option<std::fs::File>,
    device: String,
    last: (u8, u64),
}

impl ProgressOut {
    pub(super) fn new(fd: Option<u32>, image: &std::path::Path) -> Self {
        let out = fd.filter(|&f| f > 0).and_then(|f| {
            std::fs::OpenOptions::new()
                .write(true)
                .open(format!("/proc/self/fd/{f}"))
                .ok()
        });
        Self {
            fd,
            out,
            device: image.display().to_string(),
            last: (0, u64::MAX),
        }
    }

    pub(super) fn update(&mut self, p: Progress) {
        let pct = (p.done * 100).checked_div(p.total).unwrap_or(100);
        if self.last == (p.pass, pct) {
            return;
        }
        self.last = (p.pass, pct);
        match (self.fd, &mut self.out) {
            (Some(0), _) => {
                let filled = (pct / 5) as usize;
                print!(
                    "\r{}: |{}{}| {pct:3}%",
                    self.device,
                    "=".repeat(filled),
                    " ".repeat(20 - filled.min(20))
                );
                std::io::stdout().flush().ok();
            }
            (Some(_), Some(f)) => {
                let _ = writeln!(f, "{} {} {} {}", p.pass, p.done, p.total, self.device);
            }
            _ => {}
        }
    }

    pub(super) fn finish(&mut self) {
        if self.fd == Some(0) {
            println!();
        }
    }
}
