//! `ext4kit debug` against debugfs on images the kernel filled: a file cut
//! into many extents (a two-level tree), a 2,000-name htree directory, a
//! hard link, a preallocated (uninit) file, and a copy taken while mounted
//! after writes and `sync` (a dirty journal). Each answer is parsed and
//! compared with debugfs's, not byte for byte. A `fast_commit` image
//! copied after fsyncs has its fast-commit records dumped as debugfs does.

use std::path::Path;
use std::process::Command;

use ext4kit_testkit::mount::can_loop_mount;
use ext4kit_testkit::tools::{assert_fsck_clean, debugfs};

fn ours(img: &Path, cmd: &str) -> String {
    let mut args = vec!["debug".to_string(), img.to_str().unwrap().into()];
    args.extend(cmd.split_whitespace().map(str::to_string));
    let out = Command::new(env!("CARGO_BIN_EXE_ext4kit"))
        .args(&args)
        .output()
        .unwrap();
    assert!(out.status.success(), "{cmd}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

fn sh(script: &str) {
    let st = Command::new("sh").args(["-ec", script]).status().unwrap();
    assert!(st.success(), "{script}");
}

fn skip() -> bool {
    if let Err(why) = can_loop_mount() {
        ext4kit_testkit::skipped!("debug: {why}");
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must run the debugfs comparisons: {why}"
        );
        return true;
    }
    false
}

/// Builds the image through a kernel mount; with `dirty`, also a copy of
/// it taken while still mounted.
fn build(dir: &Path, dirty: bool) -> std::path::PathBuf {
    let (img, mnt) = (dir.join("a.img"), dir.join("mnt"));
    let (i, m, c) = (img.display(), mnt.display(), dir.join("dirty.img"));
    let copy = if dirty {
        format!("cp --sparse=always {i} {}", c.display())
    } else {
        String::new()
    };
    sh(&format!(
        "mkfs.ext4 -q -F {i} 64M; mkdir -p {m}; mount -o loop {i} {m}; trap 'umount {m}' EXIT
         mkdir {m}/d; for n in $(seq 1 2000); do : > {m}/d/name_$n; done
         dd if=/dev/urandom of={m}/big bs=4k count=100 status=none; ln {m}/big {m}/d/link
         for n in $(seq 0 2 800); do dd if=/dev/zero of={m}/frag bs=4k count=1 seek=$n conv=notrunc status=none; done
         fallocate -l 1M {m}/pre; sync; {copy}"
    ));
    if dirty { c } else { img }
}

fn lines_matching(s: &str, pat: &[&str]) -> Vec<String> {
    s.lines()
        .filter(|l| pat.iter().any(|p| l.starts_with(p)))
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect()
}

#[test]
fn block_and_inode_commands_answer_as_debugfs() {
    if skip() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let img = build(dir.path(), false);
    let words = |s: String| s.split_whitespace().map(str::to_string).collect::<Vec<_>>();
    for cmd in [
        "blocks /frag",
        "blocks /big",
        "bmap /frag 4",
        "bmap /pre 3",
        "imap /big",
        "imap <12>",
        "ffb 7 3000",
        // Uninitialised groups, and the wrap at the end of the file system.
        "ffb 3 40000",
        "ffb 3 65535",
        "ffi 5000",
        // Reserved GDT blocks belong to the resize inode (7).
        "icheck 3 30 8195 8451",
        "ffi",
        "dx_hash -h half_md4 name_7",
    ] {
        assert_eq!(words(ours(&img, cmd)), words(debugfs(&img, cmd).unwrap()), "{cmd}");
    }
    let blocks: Vec<String> = words(ours(&img, "blocks /frag")).into_iter().step_by(37).collect();
    let icheck = format!("icheck {} 5 99999", blocks.join(" "));
    assert_eq!(ours(&img, &icheck), debugfs(&img, &icheck).unwrap());
    let ino = words(ours(&img, "imap /big"))[1].clone();
    let norm = |s: String| {
        let mut v: Vec<String> = s.lines().map(|l| l.replace("//", "/")).collect();
        v.sort();
        v
    };
    assert_eq!(
        norm(ours(&img, &format!("ncheck {ino} 12"))),
        norm(debugfs(&img, &format!("ncheck {ino} 12")).unwrap())
    );
    for f in ["/frag", "/pre"] {
        let ex = |s: String| lines_matching(&s, &[" 0/", " 1/", " 2/"]);
        let (a, b) = (
            ex(ours(&img, &format!("ex {f}"))),
            ex(debugfs(&img, &format!("ex {f}")).unwrap()),
        );
        assert!(
            if f == "/pre" {
                a[0].ends_with("Uninit")
            } else {
                a.len() > 2
            },
            "{f}: {a:?}"
        );
        assert_eq!(a, b, "{f}");
    }
    assert_fsck_clean(&img).unwrap();
}

#[test]
fn htree_lists_the_index_and_every_name_with_its_hash() {
    if skip() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let img = build(dir.path(), false);
    let pick = |s: &str| -> (Vec<String>, Vec<String>) {
        // debugfs lists each index entry again before the leaf it leads to.
        let mut idx = lines_matching(s, &["Entry #", "Number of entries", "\t Hash", "\t Indirect"]);
        idx.sort();
        idx.dedup();
        let mut names: Vec<String> = s
            .split("   ")
            .flat_map(|c| c.lines())
            .filter(|c| c.contains(" 0x") && c.contains(") name_"))
            .map(|c| c.trim().to_string())
            .collect();
        names.sort();
        (idx, names)
    };
    let (a, b) = (pick(&ours(&img, "htree /d")), pick(&debugfs(&img, "htree /d").unwrap()));
    assert_eq!(a.1.len(), 2000, "{:?}", &a.1[..3.min(a.1.len())]);
    assert_eq!(a, b);

    // Two index levels: 7,000 long names in 1 KiB blocks.
    let (img, mnt) = (dir.path().join("h.img"), dir.path().join("hmnt"));
    let (i, m) = (img.display(), mnt.display());
    sh(&format!(
        "mkfs.ext4 -q -F -b 1024 {i} 64M; mkdir -p {m}; mount -o loop {i} {m}; trap 'umount {m}' EXIT
         mkdir {m}/d; cd {m}/d; for n in $(seq 1 7000); do : > name_that_fills_leaf_blocks_sooner_$n; done; cd /; sync"
    ));
    let (a, b) = (pick(&ours(&img, "htree /d")), pick(&debugfs(&img, "htree /d").unwrap()));
    assert!(a.0.iter().any(|l| l == "Indirect levels: 1"), "{:?}", &a.0[..4]);
    assert_eq!(a.1.len(), 7000);
    assert_eq!(a, b);
}

#[test]
fn logdump_walks_a_dirty_journal_as_debugfs() {
    if skip() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let img = build(dir.path(), true);
    let pats = ["Journal starts", "Found", "No magic", "  FS block", "  Revoke"];
    let (a, b) = (ours(&img, "logdump"), debugfs(&img, "logdump -a").unwrap());
    let (a, b) = (lines_matching(&a, &pats), lines_matching(&b, &pats));
    assert!(a.iter().filter(|l| l.contains("commit block")).count() >= 1, "{a:?}");
    assert_eq!(a, b);
}

/// debugfs prints `fc_dname` with `%s`, running on past the name into the
/// next record's bytes: compare names up to the first unprintable byte.
fn clean_name(l: &str) -> String {
    match l.split_once("name \"") {
        Some((head, rest)) => {
            let name: String = rest.chars().take_while(|c| c.is_ascii_graphic() && *c != '"').collect();
            format!("{head}name \"{name}\"")
        }
        None => l.to_string(),
    }
}

#[test]
fn logdump_lists_fast_commit_records_as_debugfs() {
    if skip() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (img, mnt, copy) = (
        dir.path().join("f.img"),
        dir.path().join("mnt"),
        dir.path().join("fd.img"),
    );
    let (i, m) = (img.display(), mnt.display());
    sh(&format!(
        "mkfs.ext4 -q -F -O fast_commit {i} 32M; mkdir -p {m}; mount -o loop {i} {m}; trap 'umount {m}' EXIT
         sync; for n in 1 2 3; do dd if=/dev/urandom of={m}/f$n bs=4k count=3 conv=fsync status=none; done
         cp --sparse=always {i} {}",
        copy.display()
    ));
    let pats = ["Journal starts", "Found", "No magic", "  FS block", "tag "];
    let pick = |s: String| {
        lines_matching(&s, &pats)
            .iter()
            .map(|l| clean_name(l))
            .collect::<Vec<_>>()
    };
    let (a, b) = (
        pick(ours(&copy, "logdump")),
        pick(debugfs(&copy, "logdump -a").unwrap()),
    );
    assert!(a.iter().any(|l| l.starts_with("tag CREAT_DENTRY")), "{a:?}");
    assert_eq!(a, b);
}

/// An ext3 image (block maps, 1 KiB blocks): `blocks` lists the indirect
/// blocks too and `icheck` finds them; a command file (`-f`) and commands
/// on stdin answer as debugfs -f does, a bad command reported and passed.
#[test]
fn block_maps_and_command_files_answer_as_debugfs() {
    if skip() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (img, mnt) = (dir.path().join("e.img"), dir.path().join("mnt"));
    let (i, m) = (img.display(), mnt.display());
    sh(&format!(
        "mkfs.ext3 -q -F -b 1024 {i} 32M; mkdir -p {m}; mount -o loop {i} {m}; trap 'umount {m}' EXIT
         dd if=/dev/urandom of={m}/big bs=1k count=3000 status=none; sync"
    ));
    let sorted = |s: String| {
        let mut v: Vec<u64> = s.split_whitespace().map(|w| w.parse().unwrap()).collect();
        v.sort_unstable();
        v
    };
    let (a, b) = (
        sorted(ours(&img, "blocks /big")),
        sorted(debugfs(&img, "blocks /big").unwrap()),
    );
    assert_eq!(a.len(), 3000 + 1 + 1 + 11, "data, single, double and its 11 children");
    assert_eq!(a, b);
    let some: Vec<String> = a.iter().step_by(211).map(u64::to_string).collect();
    let icheck = format!("icheck {}", some.join(" "));
    assert_eq!(ours(&img, &icheck), debugfs(&img, &icheck).unwrap());

    let cmds = dir.path().join("cmds");
    std::fs::write(&cmds, "imap /big\n\nbmap /big 12\nbogus\nffi\nffb 3\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_ext4kit"))
        .args(["debug", "-f", cmds.to_str().unwrap(), img.to_str().unwrap()])
        .output()
        .unwrap();
    let theirs = Command::new("debugfs")
        .args(["-f", cmds.to_str().unwrap(), img.to_str().unwrap()])
        .output()
        .unwrap();
    let answers = |s: &[u8]| -> Vec<String> {
        let s = String::from_utf8_lossy(s);
        s.lines()
            .filter(|l| !l.starts_with("debugfs") && !l.trim().is_empty())
            .map(|l| l.trim().to_string())
            .collect()
    };
    assert!(out.status.success());
    assert_eq!(answers(&out.stdout), answers(&theirs.stdout));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("bogus"),
        "the bad command is reported"
    );

    let mut child = Command::new(env!("CARGO_BIN_EXE_ext4kit"))
        .args(["debug", img.to_str().unwrap()])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write as _;
    child.stdin.take().unwrap().write_all(b"ffi\nquit\nffi\n").unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).lines().count(),
        1,
        "quit stops the prompt"
    );
    assert_fsck_clean(&img).unwrap();
}

/// Images with bytes of their metadata overwritten: every command answers
/// or reports an error, never panics or hangs (each run bounded by
/// `timeout`, exit 124 counted as a hang).
#[test]
fn damaged_images_give_errors_not_panics() {
    if skip() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let img = build(dir.path(), true);
    let good = std::fs::read(&img).unwrap();
    let cmds = dir.path().join("cmds");
    std::fs::write(
        &cmds,
        "icheck 1 100 5000 9000 20000\nncheck 2 11 12 13 2013\nblocks /frag\nbmap /frag 400\nex /frag\n\
         imap /big\nffb 20 1\nffi 5000\nhtree /d\nlogdump\nex <7>\nblocks <8>\nhtree <2>\n",
    )
    .unwrap();
    let bad = dir.path().join("bad.img");
    let mut reported = 0;
    for seed in 0..24u64 {
        let mut rng = ext4kit_testkit::rng::Rng::new(seed);
        let mut bytes = good.clone();
        // Group 0's metadata, the first directories and files, the journal's head.
        let span = (4u64 << 20).min(bytes.len() as u64);
        for _ in 0..256 {
            let at = 1024 + rng.below(span - 1024) as usize;
            bytes[at] = rng.below(256) as u8;
        }
        std::fs::write(&bad, &bytes).unwrap();
        let out = Command::new("timeout")
            .args(["60", env!("CARGO_BIN_EXE_ext4kit"), "debug", "--ignore-checksums", "-f"])
            .args([&cmds, &bad])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!err.contains("panicked"), "seed {seed}: {err}");
        assert!(
            ![101, 124].contains(&out.status.code().unwrap_or(0)),
            "seed {seed}: {:?}",
            out.status
        );
        reported += usize::from(!err.trim().is_empty() || !out.status.success());
    }
    assert!(reported > 0, "no damage was noticed: the test would prove nothing");
}
