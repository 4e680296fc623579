//! Seed 000's experiment through the library: create N empty files in one
//! directory of a fresh mkfs.ext4 image and report the time per create over
//! the first and last 5% of the run (htree keeps it flat; ext2's linear
//! directories made it grow linearly).
//!
//! `cargo run --release -p ext4kit-engine --example create_scale -- [N] [IMAGE]`

use std::time::Instant;

use ext4kit_engine::device::FileDevice;
use ext4kit_engine::{Attr, Filesystem, NodeKind, OpenOptions, ROOT_INO};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let n: usize = args.next().map_or(Ok(100_000), |s| s.parse())?;
    let img = args.next().unwrap_or_else(|| "target/create-scale.img".into());
    let status = std::process::Command::new("mkfs.ext4")
        .args(["-q", "-F", "-N", &(n + 1000).to_string(), &img, "2G"])
        .status()?;
    if !status.success() {
        return Err("mkfs.ext4 failed".into());
    }
    let fs = Filesystem::open(Box::new(FileDevice::open(img.as_ref(), true)?), OpenOptions::default())?;
    let attr = Attr {
        perm: 0o644,
        uid: 0,
        gid: 0,
    };
    let dir = fs.create(ROOT_INO, b"d", NodeKind::Directory, attr)?.ino;
    let mut per = Vec::with_capacity(n);
    for i in 0..n {
        let t = Instant::now();
        fs.create(dir, format!("file-{i:08}").as_bytes(), NodeKind::Regular, attr)?;
        per.push(t.elapsed().as_nanos() as f64);
    }
    fs.sync()?;
    let k = (n / 20).max(1);
    let mean = |s: &[f64]| s.iter().sum::<f64>() / s.len() as f64 / 1000.0;
    let median = |s: &[f64]| {
        let mut v = s.to_vec();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2] / 1000.0
    };
    let (first, last) = (&per[..k], &per[n - k..]);
    println!("creates: {n}");
    println!("first 5%: mean {:.1} us, median {:.1} us", mean(first), median(first));
    println!("last 5%:  mean {:.1} us, median {:.1} us", mean(last), median(last));
    println!("ratio last/first (medians): {:.2}", median(last) / median(first));
    Ok(())
}
