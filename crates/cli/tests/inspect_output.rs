//! What `info`, `ls -l` and `stat` print for people (issue 19): dumpe2fs's
//! fields, names and dates for the superblock, ls's time styles. dumpe2fs
//! is the oracle; `TZ=UTC` makes the dates comparable.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

fn run(cmd: &str, args: &[&str]) -> String {
    let out = Command::new(cmd)
        .env("TZ", "UTC")
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{cmd}: {e}"));
    assert!(
        out.status.success(),
        "{cmd} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn ext4kit(args: &[&str]) -> String {
    run(env!("CARGO_BIN_EXE_ext4kit"), args)
}

/// "Label: value" lines, whitespace around the value dropped.
fn fields(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect()
}

/// A 64 MiB image (made by mke2fs at a fixed time) holding `/f`, whose
/// mtime is 2026-01-01 12:00:00 UTC and atime 2020-01-01 00:00:00 UTC.
fn image(dir: &Path) -> String {
    let img = dir.join("i.img");
    let img = img.to_str().unwrap();
    let out = Command::new("mkfs.ext4")
        .env("E2FSPROGS_FAKE_TIME", "1700000000")
        .args(["-q", "-F", "-L", "photos", img, "64M"])
        .output()
        .expect("mkfs.ext4 (e2fsprogs)");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    ext4kit(&["write", img, "/f"]);
    for set in [
        "sif /f mtime @1767268800",
        "sif /f mtime_extra 0",
        "sif /f atime @1577836800",
        "sif /f atime_extra 0",
    ] {
        run("debugfs", &["-w", "-R", set, img]);
    }
    assert_e2fsck_clean(img);
    img.to_string()
}

/// `e2fsck -fn` finds the image the test built (and `ext4kit write` wrote) clean.
fn assert_e2fsck_clean(img: &str) {
    let out = Command::new("e2fsck")
        .args(["-fn", img])
        .output()
        .expect("e2fsck (e2fsprogs)");
    assert!(
        out.status.success(),
        "e2fsck -fn: {}",
        String::from_utf8_lossy(&out.stdout)
    );
}

#[test]
fn info_shows_what_dumpe2fs_shows() {
    let dir = tempfile::tempdir().unwrap();
    let img = image(dir.path());
    let ours = fields(&ext4kit(&["info", "-H", &img]));
    let theirs = fields(&run("dumpe2fs", &["-h", &img]));
    let same = [
        "Filesystem volume name",
        "Filesystem UUID",
        "Filesystem magic number",
        "Filesystem revision #",
        "Filesystem features",
        "Filesystem flags",
        "Default mount options",
        "Filesystem state",
        "Errors behavior",
        "Filesystem OS type",
        "Inode count",
        "Block count",
        "Reserved block count",
        "Free blocks",
        "Free inodes",
        "Block size",
        "Group descriptor size",
        "Reserved GDT blocks",
        "Inodes per group",
        "Inode blocks per group",
        "Flex block group size",
        "Filesystem created",
        "Last mount time",
        "Last write time",
        "Mount count",
        "Maximum mount count",
        "Last checked",
        "Check interval",
        "First inode",
        "Inode size",
        "Journal inode",
        "Default directory hash",
        "Directory Hash Seed",
        "Checksum type",
        "Checksum",
        "Journal features",
        "Total journal size",
        "Total journal blocks",
        "Journal sequence",
        "Journal start",
    ];
    for key in same {
        assert_eq!(ours.get(key), theirs.get(key), "{key}");
    }
    assert_eq!(ours["Filesystem created"], "Tue Nov 14 22:13:20 2023");
    assert!(
        !ours.contains_key("Served read-only because"),
        "info opens read-only by itself"
    );
}

#[test]
fn ls_and_stat_print_dates_in_ls_styles() {
    let dir = tempfile::tempdir().unwrap();
    let img = image(dir.path());
    let line = |style: &str| {
        let out = ext4kit(&["ls", "-l", "--time-style", style, &img, "/"]);
        out.lines()
            .find(|l| l.ends_with(" f"))
            .unwrap_or_else(|| panic!("{out}"))
            .to_string()
    };
    assert!(
        line("full-iso").contains(" 2026-01-01 12:00:00.000000000 +0000 f"),
        "{}",
        line("full-iso")
    );
    assert!(line("long-iso").contains(" 2026-01-01 12:00 f"), "{}", line("long-iso"));
    assert!(line("epoch").contains(" 1767268800.000000000 f"), "{}", line("epoch"));
    let full = ext4kit(&["ls", "--full-time", &img, "/"]);
    assert!(full.contains(" 2026-01-01 12:00:00.000000000 +0000 f"), "{full}");
    let stat = ext4kit(&["stat", &img, "/f"]);
    assert!(stat.contains(" mtime: 2026-01-01 12:00:00.000000000 +0000"), "{stat}");
    assert!(stat.contains(" atime: 2020-01-01 00:00:00.000000000 +0000"), "{stat}");
    let old = ext4kit(&["stat", "--time-style", "locale", &img, "/f"]);
    assert!(old.contains(" atime: Jan  1  2020"), "{old}");
}

/// An image made by `mkfs.ext4 -d` from a tree with a regular file `f`
/// (two xattrs, one not UTF-8), a directory `d`, a symlink `l -> f`, a
/// file whose name is not UTF-8 (`n\xff`), and a character device `c`
/// (4, 5) added by debugfs.
fn tree_image(dir: &Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    let tree = dir.join("tree");
    std::fs::create_dir_all(tree.join("d")).unwrap();
    std::fs::write(tree.join("f"), b"hello\n").unwrap();
    std::os::unix::fs::symlink("f", tree.join("l")).unwrap();
    std::fs::write(tree.join(std::ffi::OsStr::from_bytes(b"n\xff")), b"").unwrap();
    let img = dir.join("t.img").to_str().unwrap().to_string();
    let tree = tree.to_str().unwrap();
    run("mkfs.ext4", &["-q", "-F", "-d", tree, &img, "8M"]);
    let bin = dir.join("v.bin");
    std::fs::write(&bin, b"\xff\x01").unwrap();
    for req in [
        "mknod c c 4 5".to_string(),
        "ea_set /f user.text hello".to_string(),
        format!("ea_set -f {} /f user.bin", bin.display()),
    ] {
        run("debugfs", &["-w", "-R", &req, &img]);
    }
    assert_e2fsck_clean(&img);
    img
}

fn ext4kit_json(args: &[&str]) -> serde_json::Value {
    let out = ext4kit(args);
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"))
}

/// debugfs's `stat` first line: `Inode: 13   Type: regular    Mode:  0644 …`.
fn debugfs_inode(img: &str, path: &str) -> u64 {
    let out = run("debugfs", &["-R", &format!("stat {path}"), img]);
    let first = out.lines().next().unwrap_or_default();
    let n = first.strip_prefix("Inode: ").and_then(|r| r.split_whitespace().next());
    n.and_then(|n| n.parse().ok()).unwrap_or_else(|| panic!("{out}"))
}

#[test]
fn ls_json_lists_what_ls_l_lists() {
    let dir = tempfile::tempdir().unwrap();
    let img = tree_image(dir.path());
    let v = ext4kit_json(&["ls", "--json", "-l", &img, "/"]);
    let entries = v.as_array().expect("an array");
    let text = ext4kit(&["ls", "-l", &img, "/"]);
    assert_eq!(entries.len(), text.lines().count(), "{text}");
    let by_name = |n: &str| {
        entries
            .iter()
            .find(|e| e["name"] == n)
            .unwrap_or_else(|| panic!("{n} in {v}"))
    };
    for (name, ty) in [
        ("f", "regular"),
        ("d", "directory"),
        ("l", "symlink"),
        ("c", "char_device"),
    ] {
        let e = by_name(name);
        assert_eq!(e["type"], ty, "{e}");
        assert_eq!(e["inode"], debugfs_inode(&img, name), "{e}");
        assert!(e.get("name_bytes").is_none(), "{e}");
    }
    let f = by_name("f");
    assert_eq!((f["size"].as_u64(), f["links"].as_u64()), (Some(6), Some(1)));
    assert_eq!(f["mode"], 0o100644, "{f}");
    assert!(f["mtime"].as_i64().is_some() && f["mtime_nsec"].as_u64().is_some());
    assert_eq!(by_name("l")["target"], "f");
    assert_eq!(by_name("c")["rdev"], serde_json::json!([4, 5]));
    assert_eq!(by_name("d")["mode"], 0o40755);
    let odd = by_name("n\u{fffd}");
    assert_eq!(odd["name_bytes"], serde_json::json!([b'n', 0xff]));
    let short = ext4kit_json(&["ls", "--json", &img, "/"]);
    assert!(short[0].get("size").is_none(), "{short}");
    assert_eq!(short.as_array().map(Vec::len), Some(entries.len()));
}

#[test]
fn stat_json_carries_what_stat_prints() {
    let dir = tempfile::tempdir().unwrap();
    let img = tree_image(dir.path());
    let v = ext4kit_json(&["stat", "--json", &img, "/f"]);
    let text = ext4kit(&["stat", "--time-style", "epoch", &img, "/f"]);
    let t = fields(&text);
    assert_eq!(v["inode"], debugfs_inode(&img, "/f"));
    assert!(t["Inode"].starts_with(&format!("{}   Type: Regular", v["inode"])));
    assert_eq!(v["type"], "regular");
    assert_eq!(v["mode"], 0o100644);
    assert_eq!(v["size"], 6);
    assert_eq!(v["links"], 1);
    assert_eq!(v["flag_names"], serde_json::json!(["EXTENTS"]));
    assert!(t["Flags"].starts_with(&format!("{:#x} [EXTENTS]", v["flags"].as_u64().unwrap())));
    let mtime = format!("{}.{:09}", v["mtime"], v["mtime_nsec"].as_u64().unwrap());
    assert_eq!(t["mtime"], mtime);
    assert!(v["crtime"].is_i64(), "{v}");
    assert_eq!(v["storage"], "extents");
    let map = v["mapping"].as_array().expect("mapping");
    assert_eq!(map.len(), 1, "{v}");
    let ext = &map[0];
    let dbg = run("debugfs", &["-R", "ex /f", &img]);
    let dbg = dbg.split_whitespace().collect::<Vec<_>>().join(" ");
    let phys = ext["physical"].as_u64().unwrap();
    assert!(dbg.contains(&format!(" 0 - 0 {phys} - {phys} 1")), "{dbg}\n{v}");
    assert_eq!((&ext["logical"], &ext["length"]), (&0.into(), &1.into()));
    let xattrs = v["xattrs"].as_array().expect("xattrs");
    let x = |n: &str| xattrs.iter().find(|x| x["name"] == n).unwrap_or_else(|| panic!("{v}"));
    assert_eq!(x("user.text")["value"], "hello");
    assert!(x("user.text").get("value_bytes").is_none());
    assert_eq!(x("user.bin")["value_bytes"], serde_json::json!([0xff, 1]));
}

#[test]
fn stat_json_of_symlink_and_device() {
    let dir = tempfile::tempdir().unwrap();
    let img = tree_image(dir.path());
    let l = ext4kit_json(&["stat", "--json", &img, "/l"]);
    assert_eq!((&l["type"], &l["target"]), (&"symlink".into(), &"f".into()));
    assert_eq!(l["storage"], "fast_symlink");
    assert_eq!(l["mapping"], serde_json::json!([]));
    let c = ext4kit_json(&["stat", "--json", &img, "/c"]);
    assert_eq!(c["type"], "char_device");
    assert_eq!(c["rdev"], serde_json::json!([4, 5]));
    assert!(fields(&ext4kit(&["stat", &img, "/c"]))["Device"] == "4,5");
    let d = ext4kit_json(&["stat", "--json", &img, "/d"]);
    assert_eq!(d["type"], "directory");
    assert!(d.get("rdev").is_none() && d.get("target").is_none(), "{d}");
}

/// `mkfs -d` of one file `f` of `len` bytes, with `opts` for mkfs.
fn one_file_image(dir: &Path, opts: &[&str], len: usize) -> String {
    let tree = dir.join("one");
    std::fs::create_dir_all(&tree).unwrap();
    std::fs::write(tree.join("f"), vec![b'x'; len]).unwrap();
    let img = dir.join("one.img").to_str().unwrap().to_string();
    let mut args = vec!["-q", "-F", "-b", "1024", "-d", tree.to_str().unwrap()];
    args.extend(opts);
    args.extend([img.as_str(), "8M"]);
    run("mke2fs", &args);
    img
}

#[test]
fn stat_json_maps_a_block_mapped_file_as_debugfs_does() {
    let dir = tempfile::tempdir().unwrap();
    let img = one_file_image(dir.path(), &["-t", "ext2"], 20 * 1024);
    let v = ext4kit_json(&["stat", "--json", &img, "/f"]);
    assert_eq!(v["storage"], "block_map", "{v}");
    let mut ours = Vec::new();
    for r in v["mapping"].as_array().expect("mapping") {
        let (p, n) = (r["physical"].as_u64().unwrap(), r["length"].as_u64().unwrap());
        assert_eq!(r["logical"].as_u64(), Some(ours.len() as u64), "{v}");
        ours.extend(p..p + n);
    }
    let stat = run("debugfs", &["-R", "stat /f", &img]);
    let ind = stat
        .split("(IND):")
        .nth(1)
        .and_then(|r| r.split(|c: char| !c.is_ascii_digit()).next())
        .unwrap_or_else(|| panic!("an indirect block: {stat}"));
    let theirs: Vec<u64> = run("debugfs", &["-R", "blocks /f", &img])
        .split_whitespace()
        .filter(|b| *b != ind)
        .map(|b| b.parse().unwrap())
        .collect();
    assert_eq!(ours, theirs, "data blocks, the indirect block left out");
}

#[test]
fn stat_json_of_inline_data_has_no_mapping() {
    let dir = tempfile::tempdir().unwrap();
    let img = one_file_image(dir.path(), &["-t", "ext4", "-I", "256", "-O", "inline_data"], 40);
    let v = ext4kit_json(&["stat", "--json", &img, "/f"]);
    assert_eq!(v["storage"], "inline", "{v}");
    assert_eq!(v["mapping"], serde_json::json!([]));
    assert!(
        v["flag_names"].as_array().unwrap().contains(&"INLINE_DATA".into()),
        "{v}"
    );
}

/// A 32 MiB image with quotas, made by mkfs.ext4 and tune2fs from a tree holding a
/// 100 KiB file `/big` and a directory of five small files.
fn quota_image(dir: &Path) -> String {
    let src = dir.join("qsrc");
    std::fs::create_dir_all(src.join("d")).unwrap();
    std::fs::write(src.join("big"), vec![7u8; 100 * 1024]).unwrap();
    for i in 0..5 {
        std::fs::write(src.join(format!("d/f{i}")), b"x").unwrap();
    }
    let img = dir.join("q.img");
    let img = img.to_str().unwrap().to_string();
    run(
        "mkfs.ext4",
        &["-q", "-F", "-b", "4096", "-d", src.to_str().unwrap(), &img, "32M"],
    );
    // mke2fs 1.47.0 -O quota -d counts the tree wrongly; tune2fs counts it.
    run("tune2fs", &["-O", "quota", &img]);
    assert_e2fsck_clean(&img);
    img
}

/// Issue 19's `--json` on every inspection command: each one's output
/// parses, and `layout` and `quota` (the two that had none) carry what
/// their text shows — layout's runs map `/big` where debugfs's bmap does,
/// quota's user 0 counts what its text line counts.
#[test]
fn every_inspection_command_prints_json() {
    let dir = tempfile::tempdir().unwrap();
    let img = quota_image(dir.path());
    let img = img.as_str();
    for args in [
        &["info", "--json", img][..],
        &["ls", "--json", "-l", img, "/"],
        &["stat", "--json", img, "/big"],
        &["frag", "--json", img],
        &["fsck", "-fn", "--json", img],
        &["layout", "--json", img, "/big"],
        &["quota", "--json", img],
    ] {
        let v = ext4kit_json(args);
        assert!(v.is_object() || v.is_array(), "{args:?}: {v}");
    }
    let l = ext4kit_json(&["layout", "--json", img, "/big"]);
    assert_eq!(l[0]["path"], "/big");
    let runs = l[0]["runs"].as_array().unwrap();
    let blocks: u64 = runs.iter().map(|r| r["blocks"].as_u64().unwrap()).sum();
    assert_eq!(blocks, 25, "{l}");
    let first = run("debugfs", &["-R", "bmap /big 0", img]);
    assert_eq!(runs[0]["physical"].as_u64(), first.trim().parse().ok(), "{l}");
    assert_eq!(runs[0]["logical"], 0);
    let q = ext4kit_json(&["quota", "--json", img]);
    let user = q
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["type"] == "user")
        .unwrap_or_else(|| panic!("{q}"));
    let root = user["ids"].as_array().unwrap().iter().find(|e| e["id"] == 0).unwrap();
    let text = ext4kit(&["quota", img]);
    let line: Vec<u64> = text
        .lines()
        .skip_while(|l| !l.starts_with("*** user"))
        .find(|l| l.split_whitespace().next() == Some("0"))
        .unwrap_or_else(|| panic!("{text}"))
        .split_whitespace()
        .map(|w| w.parse().unwrap())
        .collect();
    assert_eq!(root["inodes"].as_u64(), Some(line[4]), "{root} / {text}");
    assert_eq!(root["space_bytes"].as_u64().map(|b| b.div_ceil(1024)), Some(line[1]));
    assert!(line[4] >= 8, "root owns the tree: {text}");
}

/// Issue 19's per-group detail: `info`'s group paragraphs are dumpe2fs's,
/// line for line — where the superblock and descriptor copies and the
/// reserved GDT blocks lie, bitmaps and inode table with their offsets in
/// the group (or flex group) and checksums, the counts, and the free
/// blocks and inodes as runs — on layouts with 4 KiB and 1 KiB blocks,
/// without flex_bg, with meta_bg, ext3, ext2, without metadata_csum and
/// with bigalloc (whose last free run dumpe2fs 1.47.0 reads past the end
/// of its bitmap for, so that line is left out there).
#[test]
fn info_groups_are_dumpe2fs_groups() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    std::fs::create_dir_all(src.join("d")).unwrap();
    for i in 0..30u32 {
        std::fs::write(src.join(format!("d/f{i}")), vec![i as u8 + 1; 3000 * i as usize]).unwrap();
    }
    let layouts: [&[&str]; 8] = [
        &["-b", "4096"],
        &["-b", "1024"],
        &["-b", "1024", "-O", "^flex_bg"],
        &["-b", "1024", "-O", "meta_bg,^resize_inode"],
        &["-t", "ext3", "-b", "1024"],
        &["-t", "ext2"],
        &["-O", "^metadata_csum"],
        &["-b", "1024", "-O", "bigalloc", "-C", "16384"],
    ];
    for args in layouts {
        let img = dir.path().join("g.img");
        let img = img.to_str().unwrap();
        let mut a = vec!["-q", "-F"];
        a.extend_from_slice(args);
        a.extend(["-d", src.to_str().unwrap(), img, "64M"]);
        run("mkfs.ext4", &a);
        let groups = |text: &str| -> Vec<String> {
            text.lines()
                .skip_while(|l| !l.starts_with("Group 0:"))
                .filter(|l| !(args.contains(&"bigalloc") && l.starts_with("  Free blocks:")))
                .map(str::to_string)
                .collect()
        };
        let ours = groups(&ext4kit(&["info", img]));
        let theirs = groups(&run("dumpe2fs", &[img]));
        assert!(ours.len() >= 8, "{args:?}: no groups");
        for (o, t) in ours.iter().zip(&theirs) {
            assert_eq!(o, t, "{args:?}");
        }
        assert_eq!(ours.len(), theirs.len(), "{args:?}");
        let v = ext4kit_json(&["info", "--json", img]);
        let g0 = &v["groups"][0];
        assert!(g0["free_block_runs"].as_array().is_some_and(|r| !r.is_empty()), "{g0}");
        assert!(
            g0["descriptors"].is_array() || g0["meta_bg_descriptor"].is_u64(),
            "{g0}"
        );
    }
}
