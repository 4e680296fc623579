//! `ext4kit image` against e2image: the raw image equals e2image -r's byte
//! for byte, the QCOW2 image restores (by e2image and by us) to that same
//! raw image, e2image's QCOW2 restores through us, `-a` equals e2image -ra,
//! and `-s` leaves an image e2fsck finds clean (htree ranges and leaf
//! checksums kept valid) in which no original name is left. Damaged
//! inputs end in an error or a warning, never a panic.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use ext4kit_testkit::tools::{assert_fsck_clean, debugfs, debugfs_write, e2fsck_fn, require_tools, skip_unless};

fn exe() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_ext4kit"))
}

fn ext4kit(args: &[&Path]) -> Output {
    Command::new(exe()).args(args).output().expect("run ext4kit")
}

fn ok(args: &[&str], paths: &[&Path]) -> String {
    let mut all: Vec<&Path> = args.iter().map(Path::new).collect();
    all.extend(paths);
    let out = ext4kit(&all);
    assert!(
        out.status.success(),
        "ext4kit {all:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn run(prog: &str, args: &[&str], paths: &[&Path]) -> Output {
    let out = Command::new(prog).args(args).args(paths).output().expect("run tool");
    assert!(
        out.status.success(),
        "{prog} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn tools() -> Option<()> {
    skip_unless(require_tools(&["mkfs.ext4", "e2image", "e2fsck", "debugfs"]))
}

/// Names of the big directory's files.
fn name(i: usize) -> String {
    format!("file_with_a_longish_name_{i}")
}

/// A tree with a directory of 400 files, nested directories, a fast and a
/// slow symlink, a 300 KiB file and a block-mapped-sized one.
fn source_tree(dir: &Path) -> PathBuf {
    let src = dir.join("src");
    std::fs::create_dir_all(src.join("big")).unwrap();
    std::fs::create_dir_all(src.join("sub/deep")).unwrap();
    for i in 0..400 {
        std::fs::write(src.join("big").join(name(i)), format!("{i}\n")).unwrap();
    }
    std::fs::write(src.join("sub/deep/f"), b"hello\n").unwrap();
    std::os::unix::fs::symlink("f", src.join("sub/fast")).unwrap();
    std::os::unix::fs::symlink("x".repeat(100), src.join("sub/slow")).unwrap();
    let data: Vec<u8> = (0..300 * 1024u32).map(|i| (i * 7 + i / 1024) as u8).collect();
    std::fs::write(src.join("data"), &data).unwrap();
    src
}

/// An image made by mkfs.ext4 `args` from the tree, with a 300-byte xattr
/// (an xattr block) and its directories indexed by `e2fsck -fyD`.
fn make_image(dir: &Path, tag: &str, args: &[&str]) -> PathBuf {
    let src = source_tree(dir);
    let img = dir.join(format!("{tag}.img"));
    let mut a = vec!["-q", "-F"];
    a.extend(args);
    a.push("-d");
    run("mkfs.ext4", &a, &[&src, &img, Path::new("48M")]);
    debugfs_write(&img, &format!("ea_set /sub/deep/f user.big {}", "v".repeat(300))).unwrap();
    let fsck = Command::new("e2fsck").arg("-fyD").arg(&img).output().unwrap();
    assert!(
        fsck.status.code().unwrap_or(8) <= 1,
        "{}",
        String::from_utf8_lossy(&fsck.stdout)
    );
    assert_fsck_clean(&img).unwrap();
    let stat = debugfs(&img, "stat /big").unwrap();
    assert!(
        stat.contains("Flags: 0x1000") || stat.contains("Flags: 0x81000"),
        "{stat}"
    );
    img
}

const CONFIGS: &[(&str, &[&str])] = &[
    ("ext4-4k", &["-b", "4096"]),
    ("ext4-1k", &["-b", "1024"]),
    ("ext3-1k", &["-t", "ext3", "-b", "1024"]),
    ("bigalloc", &["-O", "bigalloc", "-C", "16384"]),
];

/// The numbers of the blocks at which two equal-sized images differ.
fn differing_blocks(a: &Path, b: &Path, block: usize) -> Vec<usize> {
    let (x, y) = (std::fs::read(a).unwrap(), std::fs::read(b).unwrap());
    assert_eq!(x.len(), y.len(), "{} and {} differ in size", a.display(), b.display());
    (0..x.len() / block)
        .filter(|&i| x[i * block..(i + 1) * block] != y[i * block..(i + 1) * block])
        .collect()
}

fn assert_same(a: &Path, b: &Path) {
    let d = differing_blocks(a, b, 1024);
    assert!(
        d.is_empty(),
        "{} and {} differ at 1 KiB blocks {d:?}",
        a.display(),
        b.display()
    );
}

#[test]
fn raw_and_qcow2_images_equal_e2images() {
    let Some(()) = tools() else {
        assert!(std::env::var_os("CI").is_none(), "tools missing under CI");
        return;
    };
    for &(tag, args) in CONFIGS {
        let dir = tempfile::tempdir().unwrap();
        let img = make_image(dir.path(), tag, args);
        let p = |s: &str| dir.path().join(s);
        run("e2image", &["-r"], &[&img, &p("e2.raw")]);
        run("e2image", &["-Q"], &[&img, &p("e2.qcow2")]);
        let said = ok(&["image", "-r"], &[&img, &p("our.raw")]);
        assert!(said.contains("written"), "{said}");
        assert_same(&p("e2.raw"), &p("our.raw"));
        ok(&["image", "-Q"], &[&img, &p("our.qcow2")]);
        run("e2image", &["-r"], &[&p("our.qcow2"), &p("our.qcow2.e2.raw")]);
        assert_same(&p("e2.raw"), &p("our.qcow2.e2.raw"));
        ok(&["image", "-r"], &[&p("our.qcow2"), &p("our.qcow2.our.raw")]);
        assert_same(&p("e2.raw"), &p("our.qcow2.our.raw"));
        ok(&["image", "-r"], &[&p("e2.qcow2"), &p("e2.qcow2.our.raw")]);
        assert_same(&p("e2.raw"), &p("e2.qcow2.our.raw"));
        // Metadata only: file data is gone, yet e2fsck finds nothing wrong.
        assert_fsck_clean(&p("our.raw")).unwrap();
        assert_eq!(
            e2fsck_fn(&p("our.raw")).unwrap().code,
            e2fsck_fn(&p("e2.raw")).unwrap().code
        );
    }
}

#[test]
fn all_data_equals_e2image_a() {
    let Some(()) = tools() else {
        assert!(std::env::var_os("CI").is_none(), "tools missing under CI");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let img = make_image(dir.path(), "a", &["-b", "1024"]);
    let p = |s: &str| dir.path().join(s);
    run("e2image", &["-ra"], &[&img, &p("e2.raw")]);
    ok(&["image", "-r", "-a"], &[&img, &p("our.raw")]);
    assert_same(&p("e2.raw"), &p("our.raw"));
    ok(&["image", "-Q", "-a"], &[&img, &p("our.qcow2")]);
    ok(&["image", "-r"], &[&p("our.qcow2"), &p("back.raw")]);
    assert_same(&p("e2.raw"), &p("back.raw"));
    let cat = Command::new(exe())
        .arg("cat")
        .arg(p("back.raw"))
        .arg("/data")
        .output()
        .unwrap();
    assert_eq!(cat.stdout, std::fs::read(dir.path().join("src/data")).unwrap());
    assert_fsck_clean(&p("back.raw")).unwrap();
}

#[test]
fn scrambled_images_are_clean_and_hold_no_names() {
    let Some(()) = tools() else {
        assert!(std::env::var_os("CI").is_none(), "tools missing under CI");
        return;
    };
    for &(tag, args) in CONFIGS {
        let dir = tempfile::tempdir().unwrap();
        let img = make_image(dir.path(), tag, args);
        let p = |s: &str| dir.path().join(s);
        let said = ok(&["image", "-r", "-s"], &[&img, &p("s.raw")]);
        assert!(said.contains("kept: 1"), "{tag}: only lost+found is kept: {said}");
        assert_fsck_clean(&p("s.raw")).unwrap_or_else(|e| panic!("{tag}: {e}"));
        ok(&["image", "-Q", "-s"], &[&img, &p("s.qcow2")]);
        ok(&["image", "-r"], &[&p("s.qcow2"), &p("s.back.raw")]);
        assert_same(&p("s.raw"), &p("s.back.raw"));
        let bytes = std::fs::read(p("s.raw")).unwrap();
        for needle in [name(7).as_bytes(), b"deep"] {
            let left = bytes.windows(needle.len()).any(|w| w == needle);
            assert!(!left, "{tag}: {:?} is left", String::from_utf8_lossy(needle));
        }
        let root = entries(&p("s.raw"), "/");
        assert!(
            ["lost+found", ".", ".."].iter().all(|n| root.iter().any(|e| e.1 == *n)),
            "{root:?}"
        );
        // Every scrambled name is found again through the (kept) index.
        let big_ino = entries(&img, "/").into_iter().find(|e| e.1 == "big").unwrap().0;
        let big = root.iter().find(|e| e.0 == big_ino).unwrap().1.clone();
        let names: Vec<String> = entries(&p("s.raw"), &format!("/{big}"))
            .into_iter()
            .map(|e| e.1)
            .collect();
        assert_eq!(names.len(), 402, "{tag}: {names:?}");
        assert!(names.iter().all(|n| n == "."
            || n == ".."
            || n.len() == name(0).len()
            || n.len() == name(10).len()
            || n.len() == name(100).len()));
        for n in names.iter().filter(|n| n.len() > 2).step_by(37) {
            let st = debugfs(&p("s.raw"), &format!("stat /{big}/{n}")).unwrap();
            assert!(st.contains("Type: regular"), "{tag}: /{big}/{n}: {st}");
        }
    }
}

/// `(inode, name)` of each entry of directory `path` (`debugfs ls -p`).
fn entries(img: &Path, path: &str) -> Vec<(String, String)> {
    debugfs(img, &format!("ls -p {path}"))
        .unwrap()
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split('/').collect();
            (f.len() >= 7).then(|| (f[1].to_string(), f[5].to_string()))
        })
        .collect()
}

#[test]
fn damaged_inputs_end_in_errors_not_panics() {
    let Some(()) = tools() else {
        assert!(std::env::var_os("CI").is_none(), "tools missing under CI");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let img = make_image(dir.path(), "d", &["-b", "1024"]);
    let p = |s: &str| dir.path().join(s);
    ok(&["image", "-Q"], &[&img, &p("q")]);
    let q = std::fs::read(p("q")).unwrap();
    // The L1 table's offset, then its first entry, pointed far outside.
    for (at, bytes) in [
        (40usize, [0x7fu8; 8]),
        (1024, [0x00, 0x00, 0x7f, 0xff, 0xff, 0xff, 0x00, 0x00]),
    ] {
        let mut bad = q.clone();
        bad[at..at + 8].copy_from_slice(&bytes);
        std::fs::write(p("bad.q"), &bad).unwrap();
        let out = ext4kit(&[Path::new("image"), Path::new("-r"), &p("bad.q"), &p("bad.raw")]);
        assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
        assert!(String::from_utf8_lossy(&out.stderr).contains("QCOW2"));
    }
    // A few bytes flipped in every metadata block but the superblock and
    // the descriptors, a different few per round.
    ok(&["image", "-r"], &[&img, &p("meta.raw")]);
    let meta = std::fs::read(p("meta.raw")).unwrap();
    let clean = std::fs::read(&img).unwrap();
    let blocks: Vec<usize> = (3..meta.len() / 1024)
        .filter(|&b| meta[b * 1024..(b + 1) * 1024].iter().any(|&x| x != 0))
        .collect();
    for round in 0..6 {
        let mut bad = clean.clone();
        for &b in &blocks {
            for k in 0..4 {
                bad[b * 1024 + (round * 131 + k * 257) % 1024] ^= 0x5a;
            }
        }
        std::fs::write(p("bad.img"), &bad).unwrap();
        for form in ["-r", "-Q"] {
            let out = ext4kit(&[
                Path::new("image"),
                Path::new(form),
                Path::new("-s"),
                &p("bad.img"),
                &p("bad.out"),
            ]);
            assert!(
                matches!(out.status.code(), Some(0 | 1)),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
}

#[test]
fn scramble_keeps_a_two_level_htree_clean() {
    let Some(()) = tools() else {
        assert!(std::env::var_os("CI").is_none(), "tools missing under CI");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    std::fs::create_dir_all(src.join("h")).unwrap();
    // 900 names of 207 bytes in 1 KiB blocks: ~200 leaves, past one index block.
    for i in 0..900 {
        std::fs::write(src.join("h").join(format!("n{i:05}_{}", "q".repeat(200))), b"").unwrap();
    }
    let img = dir.path().join("h.img");
    run(
        "mkfs.ext4",
        &["-q", "-F", "-b", "1024", "-d"],
        &[&src, &img, Path::new("64M")],
    );
    let fsck = Command::new("e2fsck").arg("-fyD").arg(&img).output().unwrap();
    assert!(fsck.status.code().unwrap_or(8) <= 1);
    assert!(debugfs(&img, "htree /h").unwrap().contains("Indirect levels: 1"));
    let out = dir.path().join("s.raw");
    let said = ok(&["image", "-r", "-s"], &[&img, &out]);
    assert!(said.contains("names scrambled: 901, kept: 1"), "{said}");
    assert_fsck_clean(&out).unwrap();
}

#[test]
fn a_backup_superblock_image_equals_e2image_b() {
    let Some(()) = tools() else {
        assert!(std::env::var_os("CI").is_none(), "tools missing under CI");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let img = make_image(dir.path(), "b", &["-b", "1024"]);
    // The primary superblock zeroed: only the backup in group 1 opens it.
    let f = std::fs::OpenOptions::new().write(true).open(&img).unwrap();
    std::os::unix::fs::FileExt::write_all_at(&f, &[0u8; 1024], 1024).unwrap();
    let p = |s: &str| dir.path().join(s);
    run("e2image", &["-r", "-b", "8193", "-B", "1024"], &[&img, &p("e2.raw")]);
    ok(&["image", "-r", "-b", "8193", "-B", "1024"], &[&img, &p("our.raw")]);
    assert_same(&p("e2.raw"), &p("our.raw"));
    ok(&["image", "-Q", "-b", "8193"], &[&img, &p("our.qcow2")]);
    ok(&["image", "-r"], &[&p("our.qcow2"), &p("back.raw")]);
    assert_same(&p("e2.raw"), &p("back.raw"));
    // The backup and its descriptors are in the image: e2fsck -b reads it.
    let fsck = Command::new("e2fsck")
        .args(["-fn", "-b", "8193", "-B", "1024"])
        .arg(p("our.raw"))
        .output()
        .unwrap();
    assert!(
        fsck.status.code().unwrap_or(8) < 8,
        "{}",
        String::from_utf8_lossy(&fsck.stdout)
    );
}

/// Both tools' output (stdout, stderr) for `args`.
fn both(args: &[&str], paths: &[&Path]) -> (Output, Output) {
    let e = Command::new("e2image").args(args).args(paths).output().unwrap();
    let mut all: Vec<&Path> = std::iter::once(Path::new("image"))
        .chain(args.iter().map(Path::new))
        .collect();
    all.extend(paths);
    let k = ext4kit(&all);
    assert!(
        e.status.success(),
        "e2image {args:?}: {}",
        String::from_utf8_lossy(&e.stderr)
    );
    assert!(
        k.status.success(),
        "ext4kit image {args:?}: {}",
        String::from_utf8_lossy(&k.stderr)
    );
    (e, k)
}

fn assert_bytes_equal(a: &Path, b: &Path, what: &str) {
    let (x, y) = (std::fs::read(a).unwrap(), std::fs::read(b).unwrap());
    assert_eq!(x.len(), y.len(), "{what}: sizes differ");
    assert!(x == y, "{what}: {} and {} differ", a.display(), b.display());
}

/// The numbers of "Copied N / M blocks" in `-p`'s last line.
fn copied(stderr: &[u8]) -> Option<String> {
    let s = String::from_utf8_lossy(stderr).replace(['\r', '\u{8}'], "\n");
    let line = s.lines().rfind(|l| l.starts_with("Copied "))?;
    Some(line.split(" in ").next()?.to_string())
}

/// Every destination e2image -r takes, each byte for byte as e2image
/// writes it: standard output, `-O` into the output and `-o` from the
/// input, `-c` onto an older copy (only the changed blocks written, and
/// the same count of blocks already there), `-n`'s list of blocks, `-p`'s
/// closing count, and a file system moved within its file both ways; the
/// combinations e2image refuses are refused.
#[test]
fn raw_destinations_equal_e2images() {
    let Some(()) = tools() else {
        assert!(std::env::var_os("CI").is_none(), "tools missing under CI");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let img = make_image(dir.path(), "dest", &["-b", "4096"]);
    let p = |s: &str| dir.path().join(s);
    let dash = Path::new("-");
    let (e, k) = both(&["-r"], &[&img, dash]);
    assert!(
        e.stdout.len() as u64 == std::fs::metadata(&img).unwrap().len() && e.stdout == k.stdout,
        "-r to stdout"
    );
    run("e2image", &["-ra", "-O", "1048576"], &[&img, &p("e.O")]);
    ok(&["image", "-ra", "-O", "1048576"], &[&img, &p("k.O")]);
    assert_bytes_equal(&p("e.O"), &p("k.O"), "-O");
    let src = p("e.O");
    run("e2image", &["-ra", "-o", "1048576"], &[&src, &p("e.o")]);
    ok(&["image", "-ra", "-o", "1048576"], &[&src, &p("k.o")]);
    assert_bytes_equal(&p("e.o"), &p("k.o"), "-o");
    assert_fsck_clean(&p("k.o")).unwrap();
    // -c: the image changes, then is copied again onto the old copy.
    let old = p("old");
    std::fs::copy(&img, &old).unwrap();
    debugfs_write(&img, "mkdir /new_dir").unwrap();
    debugfs_write(&img, "sif /data mtime 20200101").unwrap();
    std::fs::copy(&old, p("e.c")).unwrap();
    std::fs::copy(&old, p("k.c")).unwrap();
    let e = run("e2image", &["-rac"], &[&img, &p("e.c")]);
    let k2 = ok(&["image", "-rac"], &[&img, &p("k.c")]);
    let line = |o: &[u8]| {
        String::from_utf8_lossy(o)
            .lines()
            .find(|l| l.contains("already contained"))
            .map(str::to_string)
    };
    assert!(
        line(&e.stdout).is_some() && line(&e.stdout) == line(k2.as_bytes()),
        "{:?} {k2}",
        line(&e.stdout)
    );
    assert_bytes_equal(&p("e.c"), &p("k.c"), "-c");
    assert_bytes_equal(&img, &p("k.c"), "-c copy of the changed image");
    assert_fsck_clean(&p("k.c")).unwrap();
    // -n: the same blocks listed, nothing written.
    let e = run("e2image", &["-rn"], &[&img, &p("e.n")]);
    let k = ext4kit(&[Path::new("image"), Path::new("-rn"), &img, &p("k.n")]);
    assert!(k.status.success() && !p("k.n").exists(), "-n wrote an image");
    let listed = |o: &[u8]| {
        let mut v: Vec<String> = String::from_utf8_lossy(o)
            .lines()
            .filter(|l| l.starts_with("Writing block "))
            .map(str::to_string)
            .collect();
        v.sort();
        v
    };
    assert!(
        !listed(&e.stdout).is_empty() && listed(&e.stdout) == listed(&k.stdout),
        "-n lists differ"
    );
    // -p: e2image's closing count.
    let (e, k) = both(&["-rp"], &[&img, &p("p")]);
    assert!(
        copied(&e.stderr).is_some() && copied(&e.stderr) == copied(&k.stderr),
        "-p: {:?} {:?}",
        copied(&e.stderr),
        copied(&k.stderr)
    );
    // Moves: to the right by 1 MiB, then back.
    for (tool, file) in [("e2image", p("e.mv")), ("ext4kit", p("k.mv"))] {
        std::fs::copy(&img, &file).unwrap();
        for opt in ["-O", "-o"] {
            let out = if tool == "e2image" {
                run("e2image", &["-ra", opt, "1048576"], &[&file])
            } else {
                let o = ext4kit(&[
                    Path::new("image"),
                    Path::new("-ra"),
                    Path::new(opt),
                    Path::new("1048576"),
                    &file,
                ]);
                assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
                o
            };
            drop(out);
            if opt == "-O" {
                let moved = p(&format!("{tool}.moved"));
                std::fs::write(&moved, &std::fs::read(&file).unwrap()[1 << 20..]).unwrap();
                assert_fsck_clean(&moved).unwrap();
            }
        }
    }
    assert_bytes_equal(&p("e.mv"), &p("k.mv"), "moved right then left");
    assert_fsck_clean(&p("k.mv")).unwrap();
    for bad in [&["-Q"][..], &["-rc"], &["-r", "-O", "4096"]] {
        let mut a: Vec<&Path> = std::iter::once(Path::new("image"))
            .chain(bad.iter().map(Path::new))
            .collect();
        a.push(&img);
        if bad[0] != "-r" {
            a.push(dash);
        }
        assert!(!ext4kit(&a).status.success(), "{bad:?} should be refused");
    }
}

/// A file system the kernel has mounted read-write is refused, as e2image
/// refuses it, and copied with -f; mounted read-only, it is copied.
#[test]
fn a_read_write_mount_is_refused_without_f() {
    let Some(()) = tools() else {
        assert!(std::env::var_os("CI").is_none(), "tools missing under CI");
        return;
    };
    if ext4kit_testkit::tools::skip_unless(ext4kit_testkit::mount::can_loop_mount()).is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let img = make_image(dir.path(), "mounted", &["-b", "4096"]);
    let (ours, theirs) = (dir.path().join("k.raw"), dir.path().join("e.raw"));
    {
        let m = ext4kit_testkit::mount::LoopMount::rw(&img, &[]).expect("kernel mount");
        let k = ext4kit(&[Path::new("image"), Path::new("-r"), &img, &ours]);
        let e = Command::new("e2image")
            .arg("-r")
            .arg(&img)
            .arg(&theirs)
            .output()
            .unwrap();
        assert!(!e.status.success(), "e2image copied a read-write mount");
        assert!(!k.status.success(), "a read-write mount was copied");
        assert!(
            String::from_utf8_lossy(&k.stderr).contains("-f"),
            "the refusal names -f"
        );
        assert!(!ours.exists(), "a refused copy left a file");
        ok(&["image", "-r", "-f"], &[&img, &ours]);
        m.unmount().expect("unmount");
    }
    {
        let m = ext4kit_testkit::mount::LoopMount::ro(&img).expect("kernel ro mount");
        ok(&["image", "-r"], &[&img, &ours]);
        m.unmount().expect("unmount");
    }
    run("e2image", &["-r"], &[&img, &theirs]);
    assert_same(&theirs, &ours);
    assert_fsck_clean(&ours).unwrap();
}
