//! Creates on an `inline_data` file system: a new directory starts inline
//! and a new file becomes inline at its first write that fits (as the
//! kernel makes them), writes and entries that fit stay inline, and the
//! body moves to blocks on the first change that does not fit; e2fsck -fn
//! passes after each stage. The kernel, through a loop mount, makes the
//! same files and directories on the same image, and `debugfs` shows the
//! engine's and the kernel's alike.

use std::path::Path;

use ext4kit_engine::device::FileDevice;
use ext4kit_engine::mkfs::{MkfsOptions, mkfs};
use ext4kit_engine::{Attr, Filesystem, NodeKind, OpenOptions};
use ext4kit_testkit::tools::{assert_fsck_clean, require_tool, skip_unless};

const ATTR: Attr = Attr {
    perm: 0o644,
    uid: 0,
    gid: 0,
};

/// The tests of this file one at a time: an image opened for writing is
/// refused while the kernel may still hold another test's loop device.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn open(path: &std::path::Path) -> Filesystem {
    let dev = FileDevice::open(path, true).expect("open the image for writing");
    Filesystem::open(Box::new(dev), OpenOptions::default()).unwrap()
}

#[test]
fn new_files_and_directories_start_inline_and_grow_out() {
    let _one = serial();
    if skip_unless(require_tool("e2fsck")).is_none() {
        assert!(std::env::var_os("CI").is_none(), "CI must have e2fsck");
        return;
    }
    let f = tempfile::NamedTempFile::new().unwrap();
    f.as_file().set_len(16 << 20).unwrap();
    {
        let dev = FileDevice::open(f.path(), true).unwrap();
        let mut opts = MkfsOptions::default();
        opts.add_features("inline_data");
        mkfs(&dev, &opts).unwrap();
    }
    let fs = open(f.path());
    let file = fs.create(2, b"file", NodeKind::Regular, ATTR).unwrap();
    assert!(!file.has_inline_data(), "an empty new file is not inline until written");
    let dir = fs.create(2, b"dir", NodeKind::Directory, ATTR).unwrap();
    assert!(dir.has_inline_data(), "a new directory is inline");
    assert_eq!(dir.size(), 60);
    fs.write(file.ino, 0, &[5u8; 100]).unwrap();
    let child = fs.create(dir.ino, b"child", NodeKind::Regular, ATTR).unwrap();
    fs.write(child.ino, 0, b"small").unwrap();
    fs.unmount().unwrap();
    assert_fsck_clean(f.path()).unwrap();

    let fs = open(f.path());
    let file = fs.resolve(b"/file").unwrap();
    assert!(file.has_inline_data(), "100 bytes fit a 256-byte inode");
    assert_eq!(fs.read_all(&file, 1 << 20).unwrap(), vec![5u8; 100]);
    assert!(fs.resolve(b"/dir").unwrap().has_inline_data(), "one entry fits i_block");
    fs.write(file.ino, 100, &[6u8; 2000]).unwrap();
    let dir = fs.resolve(b"/dir").unwrap();
    for i in 0..10 {
        fs.create(dir.ino, format!("entry_{i}").as_bytes(), NodeKind::Regular, ATTR)
            .unwrap();
    }
    fs.unmount().unwrap();
    assert_fsck_clean(f.path()).unwrap();

    let fs = open(f.path());
    let file = fs.resolve(b"/file").unwrap();
    assert!(!file.has_inline_data(), "2100 bytes moved to a block");
    let mut want = vec![5u8; 100];
    want.extend([6u8; 2000]);
    assert_eq!(fs.read_all(&file, 1 << 20).unwrap(), want);
    let dir = fs.resolve(b"/dir").unwrap();
    assert!(!dir.has_inline_data(), "eleven entries moved the directory to a block");
    assert_eq!(fs.read_dir(&dir).unwrap().len(), 13);
    let child = fs.resolve(b"/dir/child").unwrap();
    assert_eq!(fs.read_all(&child, 100).unwrap(), b"small");
}

/// Skips (loudly) unless the kernel can loop-mount images here.
fn kernel_available() -> bool {
    if skip_unless(require_tool("e2fsck")).is_none() || skip_unless(require_tool("debugfs")).is_none() {
        assert!(std::env::var_os("CI").is_none(), "CI must have e2fsprogs");
        return false;
    }
    if let Err(why) = ext4kit_testkit::mount::can_loop_mount() {
        ext4kit_testkit::skipped!("kernel comparison: {why}");
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must run the kernel comparison: {why}"
        );
        return false;
    }
    true
}

/// A 32 MiB image made by mkfs.ext4 with `features`.
fn kernel_image(dir: &Path, features: &str) -> std::path::PathBuf {
    let img = dir.join("img");
    std::fs::File::create(&img).unwrap().set_len(32 << 20).unwrap();
    run_ok(
        "mkfs.ext4",
        &[
            "-q",
            "-F",
            "-b",
            "4096",
            "-I",
            "256",
            "-O",
            features,
            img.to_str().unwrap(),
        ],
    );
    img
}

fn run_ok(cmd: &str, args: &[&str]) -> String {
    let out = std::process::Command::new(cmd).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "{cmd} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// What `debugfs stat` says of the layout of `path`: flags, size, block
/// count, the `system.data` size and the inline size (not numbers, times
/// or checksums, which differ between any two files).
fn layout(img: &Path, path: &str) -> Vec<String> {
    let out = run_ok("debugfs", &["-R", &format!("stat {path}"), img.to_str().unwrap()]);
    let mut keep = Vec::new();
    for line in out.lines() {
        let line = line.trim();
        if let Some(f) = line.split("Flags: ").nth(1) {
            keep.push(format!("flags {f}"));
        }
        if line.starts_with("User:") {
            keep.push(line.rsplit("Size: ").next().unwrap().to_string());
        }
        if line.starts_with("Links:") || line.starts_with("system.data") || line.starts_with("Size of inline") {
            keep.push(line.to_string());
        }
        if line.starts_with('(') {
            keep.push("mapped".into());
        }
    }
    keep
}

/// The records of directory `path` as `debugfs ls` shows them, in their
/// order: record length and name (inode numbers differ).
fn records(img: &Path, path: &str) -> Vec<String> {
    let out = run_ok("debugfs", &["-R", &format!("ls {path}"), img.to_str().unwrap()]);
    let words: Vec<&str> = out.split_whitespace().collect();
    // "ino  (rec_len) name", the name empty for an unused record.
    let mut out = Vec::new();
    let mut i = 0;
    while i + 1 < words.len() {
        let rec = words[i + 1];
        let next_is_record = words.get(i + 3).is_some_and(|w| w.starts_with('('));
        let name = words.get(i + 2).filter(|_| !next_is_record);
        match name {
            Some(n) => {
                out.push(format!("{rec} {n}"));
                i += 3;
            }
            None => {
                out.push(format!("{rec} (unused)"));
                i += 2;
            }
        }
    }
    out
}

const SIZES: [usize; 5] = [0, 1, 100, 200, 4000];

#[test]
fn files_and_truncates_match_the_kernel() {
    let _one = serial();
    if !kernel_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let img = kernel_image(dir.path(), "inline_data");
    {
        let m = ext4kit_testkit::mount::LoopMount::rw(&img, &[]).unwrap();
        for n in SIZES {
            std::fs::write(m.path().join(format!("k{n}")), vec![b'k'; n]).unwrap();
        }
        std::fs::write(m.path().join("kcut"), [b'c'; 100]).unwrap();
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open(m.path().join("kcut"))
            .unwrap();
        f.set_len(10).unwrap();
        drop(f);
        m.unmount().unwrap();
    }
    let fs = open(&img);
    for n in SIZES {
        let f = fs
            .create(2, format!("e{n}").as_bytes(), NodeKind::Regular, ATTR)
            .unwrap();
        if n > 0 {
            fs.write(f.ino, 0, &vec![b'e'; n]).unwrap();
        }
    }
    let cut = fs.create(2, b"ecut", NodeKind::Regular, ATTR).unwrap().ino;
    fs.write(cut, 0, &[b'c'; 100]).unwrap();
    fs.truncate(cut, 10).unwrap();
    fs.unmount().unwrap();
    assert_fsck_clean(&img).unwrap();
    for n in SIZES {
        assert_eq!(
            layout(&img, &format!("/e{n}")),
            layout(&img, &format!("/k{n}")),
            "{n}-byte file"
        );
    }
    assert_eq!(layout(&img, "/ecut"), layout(&img, "/kcut"), "cut from 100 to 10 bytes");
    assert!(
        layout(&img, "/ecut").iter().any(|l| l == "system.data (0)"),
        "still inline"
    );
    let m = ext4kit_testkit::mount::LoopMount::ro(&img).unwrap();
    for n in SIZES {
        assert_eq!(std::fs::read(m.path().join(format!("e{n}"))).unwrap(), vec![b'e'; n]);
    }
    assert_eq!(std::fs::read(m.path().join("ecut")).unwrap(), [b'c'; 10]);
    m.unmount().unwrap();
}

/// The names of the directory operations below, applied by the kernel
/// (`root` a mounted path) or the engine.
const FILLS: [usize; 4] = [4, 6, 9, 12];

#[test]
fn inline_directories_fill_spill_and_edit_as_the_kernel_does() {
    let _one = serial();
    if !kernel_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let img = kernel_image(dir.path(), "inline_data");
    {
        let m = ext4kit_testkit::mount::LoopMount::rw(&img, &[]).unwrap();
        let root = m.path();
        std::fs::write(root.join("file"), b"x").unwrap();
        for n in FILLS {
            let d = root.join(format!("k{n}"));
            std::fs::create_dir(&d).unwrap();
            for i in 0..n {
                std::fs::write(d.join(format!("name_{i}")), b"").unwrap();
            }
        }
        // Edits inside a directory whose entries reach system.data.
        let d = root.join("kedit");
        std::fs::create_dir(&d).unwrap();
        for i in 0..6 {
            std::fs::write(d.join(format!("name_{i}")), b"").unwrap();
        }
        std::fs::remove_file(d.join("name_1")).unwrap();
        std::fs::rename(d.join("name_4"), d.join("renamed_4")).unwrap();
        std::fs::hard_link(root.join("file"), d.join("link")).unwrap();
        std::fs::remove_file(d.join("name_0")).unwrap();
        m.unmount().unwrap();
    }
    let fs = open(&img);
    let file = fs.resolve(b"/file").unwrap().ino;
    for n in FILLS {
        let d = fs
            .create(2, format!("e{n}").as_bytes(), NodeKind::Directory, ATTR)
            .unwrap()
            .ino;
        for i in 0..n {
            fs.create(d, format!("name_{i}").as_bytes(), NodeKind::Regular, ATTR)
                .unwrap();
        }
    }
    let d = fs.create(2, b"eedit", NodeKind::Directory, ATTR).unwrap().ino;
    for i in 0..6 {
        fs.create(d, format!("name_{i}").as_bytes(), NodeKind::Regular, ATTR)
            .unwrap();
    }
    fs.unlink(d, b"name_1").unwrap();
    fs.rename(d, b"name_4", d, b"renamed_4", Default::default()).unwrap();
    fs.link(file, d, b"link").unwrap();
    fs.unlink(d, b"name_0").unwrap();
    fs.unmount().unwrap();
    assert_fsck_clean(&img).unwrap();

    for n in FILLS.iter().map(|n| n.to_string()).chain(["edit".to_string()]) {
        let (e, k) = (format!("/e{n}"), format!("/k{n}"));
        assert_eq!(layout(&img, &e), layout(&img, &k), "directory {n}");
        assert_eq!(records(&img, &e), records(&img, &k), "records of directory {n}");
    }
    let edited = records(&img, "/eedit");
    assert!(
        edited.contains(&"(16) (unused)".to_string()) && edited.iter().any(|r| r.ends_with(" renamed_4")),
        "{edited:?}"
    );
    assert!(
        layout(&img, "/e6").iter().any(|l| l.starts_with("system.data (")),
        "6 names reach system.data"
    );
    assert!(
        layout(&img, "/e12").iter().any(|l| l == "mapped"),
        "12 names move to a block"
    );
    let fs = open(&img);
    let m = ext4kit_testkit::mount::LoopMount::ro(&img).unwrap();
    for n in FILLS.iter().map(|n| n.to_string()).chain(["edit".to_string()]) {
        let mut kernel: Vec<Vec<u8>> = std::fs::read_dir(m.path().join(format!("e{n}")))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_encoded_bytes())
            .collect();
        kernel.sort();
        let dir = fs.resolve(format!("/e{n}").as_bytes()).unwrap();
        let mut engine: Vec<Vec<u8>> = fs
            .read_dir(&dir)
            .unwrap()
            .into_iter()
            .map(|e| e.name)
            .filter(|n| n != b"." && n != b"..")
            .collect();
        engine.sort();
        assert_eq!(kernel, engine, "names of directory {n}");
    }
    m.unmount().unwrap();
}

/// Inodes in use, from the superblock (`dumpe2fs -h`).
fn inodes_in_use(img: &Path) -> u64 {
    let out = run_ok("dumpe2fs", &["-h", img.to_str().unwrap()]);
    let field = |k: &str| -> u64 {
        out.lines()
            .find_map(|l| l.strip_prefix(k))
            .and_then(|v| v.trim_start_matches(':').trim().parse().ok())
            .unwrap()
    };
    field("Inode count") - field("Free inodes")
}

#[test]
fn ea_inode_with_inline_data_kernel_filled_engine_written() {
    let _one = serial();
    if !kernel_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let img = kernel_image(dir.path(), "ea_inode,inline_data");
    let big: Vec<u8> = (0..20_000u32).map(|i| (i * 13 % 251) as u8).collect();
    {
        let m = ext4kit_testkit::mount::LoopMount::rw(&img, &[]).unwrap();
        let root = m.path();
        std::fs::write(root.join("small"), [b's'; 30]).unwrap();
        std::fs::create_dir(root.join("d")).unwrap();
        for i in 0..5 {
            std::fs::write(root.join(format!("d/name_{i}")), b"").unwrap();
        }
        for f in ["big", "big2"] {
            std::fs::write(root.join(f), b"v").unwrap();
            xattr::set(root.join(f), "user.v", &big).unwrap();
        }
        m.unmount().unwrap();
    }
    assert_fsck_clean(&img).unwrap();
    let before = inodes_in_use(&img);

    let fs = open(&img);
    let small = fs.resolve(b"/small").unwrap();
    assert!(small.has_inline_data(), "the kernel made it inline");
    assert!(fs.xattr(&fs.resolve(b"/big").unwrap(), b"user.v").unwrap() == big);
    let e = fs.create(2, b"e", NodeKind::Regular, ATTR).unwrap().ino;
    fs.set_xattr(e, b"user.v", &big, ext4kit_engine::XattrSet::Create)
        .unwrap();
    fs.write(small.ino, 30, &[b't'; 20]).unwrap();
    fs.set_xattr(small.ino, b"user.x", &[b'x'; 8000], ext4kit_engine::XattrSet::Create)
        .unwrap();
    let d = fs.resolve(b"/d").unwrap().ino;
    fs.create(d, b"new_one", NodeKind::Regular, ATTR).unwrap();
    fs.unlink(d, b"name_2").unwrap();
    fs.rename(d, b"name_3", 2, b"moved", Default::default()).unwrap();
    fs.unlink(2, b"big2").unwrap();
    fs.unmount().unwrap();
    assert_fsck_clean(&img).unwrap();
    // e shares big's value inode (+1 file); small's value is new (+1);
    // big2 went, its value inode stays with big and e (-1).
    assert_eq!(inodes_in_use(&img), before + 1);
    assert!(
        layout(&img, "/small").iter().any(|l| l.starts_with("system.data")),
        "small stays inline"
    );
    assert!(
        layout(&img, "/d").iter().any(|l| l.starts_with("system.data (")),
        "d stays inline"
    );

    let m = ext4kit_testkit::mount::LoopMount::ro(&img).unwrap();
    let root = m.path();
    let mut want = vec![b's'; 30];
    want.extend([b't'; 20]);
    assert_eq!(std::fs::read(root.join("small")).unwrap(), want);
    assert_eq!(
        xattr::get(root.join("small"), "user.x").unwrap().unwrap(),
        vec![b'x'; 8000]
    );
    for f in ["big", "e"] {
        assert!(xattr::get(root.join(f), "user.v").unwrap().unwrap() == big, "{f}");
    }
    let mut names: Vec<String> = std::fs::read_dir(root.join("d"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["name_0", "name_1", "name_4", "new_one"]);
    assert!(root.join("moved").exists());
    m.unmount().unwrap();
}
