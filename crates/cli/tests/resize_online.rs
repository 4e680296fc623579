//! `ext4kit resize` of a mounted image: the request reaches the mount's
//! server through the mount point or through the image (its lock holder);
//! a shrink is refused as the kernel refuses it, a grow is planned and
//! refused (not done yet) before the image file is touched, while the
//! mount keeps serving. Needs root and /dev/fuse; skips loudly otherwise
//! (never under `CI`).

use std::path::Path;
use std::process::{Command, Output};

use ext4kit_testkit::fuse::FuseMount;
use ext4kit_testkit::tools::e2fsck_fn;

fn exe() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_ext4kit"))
}

fn ready() -> bool {
    ext4kit_testkit::fuse::ready_with("mkfs.ext4")
}

fn resize(target: &Path, size: &str) -> Output {
    Command::new(exe())
        .arg("resize")
        .arg(target)
        .arg(size)
        .output()
        .unwrap()
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn a_mounted_image_is_asked_through_its_server() {
    if !ready() {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let img = work.path().join("img.ext4");
    let mk = Command::new("mkfs.ext4")
        .args(["-q", "-F", "-b", "1024"])
        .arg(&img)
        .arg("64M")
        .output()
        .unwrap();
    assert!(mk.status.success(), "{}", text(&mk));
    let m = FuseMount::start(exe(), &img, "").unwrap();
    std::fs::write(m.path().join("f"), b"kept").unwrap();

    let shrink = resize(m.path(), "32M");
    assert!(!shrink.status.success());
    assert!(
        text(&shrink).contains("shrinking a mounted file system"),
        "{}",
        text(&shrink)
    );

    let same = resize(&img, "64M");
    assert!(same.status.success(), "{}", text(&same));
    assert!(text(&same).contains("Nothing to do"), "{}", text(&same));

    let grow = resize(&img, "128M");
    assert!(!grow.status.success());
    let t = text(&grow);
    assert!(
        t.contains("65536 to 131072 blocks, 8 new groups") && t.contains("not done yet"),
        "{t}"
    );
    assert_eq!(
        std::fs::metadata(&img).unwrap().len(),
        64 << 20,
        "a refused grow extended the image"
    );

    let elsewhere = resize(work.path(), "128M");
    assert!(!elsewhere.status.success());
    assert!(
        text(&elsewhere).contains("not an ext4kit mount"),
        "{}",
        text(&elsewhere)
    );

    assert_eq!(std::fs::read(m.path().join("f")).unwrap(), b"kept");
    assert!(m.unmount().unwrap().success());
    let r = e2fsck_fn(&img).expect("run e2fsck");
    assert!(r.is_clean(), "e2fsck -fn: {}", r.output);
}
