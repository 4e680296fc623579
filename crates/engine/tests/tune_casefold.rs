//! `tune -O [^]casefold`, `-E encoding=…,encoding_flags=…`, `-O [^]verity`
//! against tune2fs 1.47 on copies of the same image: the superblocks
//! (primary and the backup of group 1, as `dumpe2fs -h` prints them) must
//! agree, refusals must match tune2fs's and leave the image untouched, and
//! every image must stay `e2fsck -fn` clean.

mod common;

use std::path::{Path, PathBuf};

use ext4kit_engine::tune::{EncodingEdit, FeatureEdit, TuneRequest, tune_image};
use ext4kit_engine::{Attr, NodeKind, ROOT_INO};
use ext4kit_format::casefold::{ENCODING_FLAG_STRICT, ENCODING_UTF8_12_1};
use ext4kit_format::inode::flags::CASEFOLD;
use ext4kit_testkit::tools::{assert_fsck_clean, run};

const ATTR: Attr = Attr {
    perm: 0o644,
    uid: 0,
    gid: 0,
};

fn feature_edits(items: &[&str]) -> Vec<FeatureEdit> {
    items
        .iter()
        .map(|s| match s.strip_prefix('^') {
            Some(n) => FeatureEdit {
                name: n.into(),
                enable: false,
            },
            None => FeatureEdit {
                name: (*s).into(),
                enable: true,
            },
        })
        .collect()
}

/// `dumpe2fs -h` of the superblock at `sb` (0: the primary), without the
/// lines a write of either tool stamps differently (times, mount counts,
/// the superblock checksum that covers them, and the journal superblock:
/// ext4kit commits a tune as one journal transaction, tune2fs writes in
/// place).
fn superblock_view(img: &Path, sb: Option<u64>) -> String {
    let mut args: Vec<String> = vec!["-h".into()];
    if let Some(b) = sb {
        args.extend([
            "-o".into(),
            format!("superblock={b}"),
            "-o".into(),
            "blocksize=1024".into(),
        ]);
    }
    args.push(img.display().to_string());
    let out = run("dumpe2fs", &args).unwrap();
    assert_eq!(out.code, Some(0), "dumpe2fs: {}", out.combined());
    out.stdout
        .lines()
        .filter(|l| {
            ![
                "Last write time",
                "Last mount time",
                "Last checked",
                "Checksum:",
                "Mount count",
                "Journal features",
                "Journal sequence",
                "Journal checksum",
            ]
            .iter()
            .any(|p| l.starts_with(p))
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// A 1 KiB-block image of two groups (a backup superblock at 8193) with
/// a directory, files and a journal.
fn image(dir: &Path, args: &[&str]) -> Option<PathBuf> {
    std::fs::create_dir_all(dir).unwrap();
    let tree = dir.join("tree");
    std::fs::create_dir_all(tree.join("sub")).unwrap();
    for i in 0..20 {
        std::fs::write(tree.join(format!("sub/f{i}")), i.to_string()).unwrap();
    }
    let mut all = vec!["-b", "1024"];
    all.extend_from_slice(args);
    common::mkfs(dir, Some(&tree), &all, "16M")
}

fn copy(img: &Path, name: &str) -> PathBuf {
    let to = img.with_file_name(name);
    std::fs::copy(img, &to).unwrap();
    to
}

fn tune2fs(img: &Path, args: &[&str]) -> bool {
    let mut argv: Vec<&std::ffi::OsStr> = args.iter().map(|s| s.as_ref()).collect();
    argv.push(img.as_os_str());
    run("tune2fs", &argv).unwrap().code == Some(0)
}

/// Ours on one copy, tune2fs on another: the same outcome, the same
/// superblocks.
fn same_as_tune2fs(base: &Path, args: &[&str], req: &TuneRequest) {
    let ours = copy(base, "ours.img");
    let theirs = copy(base, "theirs.img");
    let before = std::fs::read(&ours).unwrap();
    let ok_theirs = tune2fs(&theirs, args);
    let r = tune_image(&ours, req);
    assert_eq!(r.is_ok(), ok_theirs, "{args:?}: tune2fs ok={ok_theirs}, ours {r:?}");
    if r.is_err() {
        assert!(
            std::fs::read(&ours).unwrap() == before,
            "{args:?}: a refusal changed the image"
        );
    }
    for sb in [None, Some(8193)] {
        let (a, b) = (superblock_view(&ours, sb), superblock_view(&theirs, sb));
        let diff: Vec<_> = a.lines().zip(b.lines()).filter(|(x, y)| x != y).collect();
        assert!(a == b, "{args:?}, superblock {sb:?}: ours vs tune2fs {diff:?}");
    }
    assert_fsck_clean(&ours).unwrap();
    assert_fsck_clean(&theirs).unwrap();
}

#[test]
fn casefold_encoding_and_verity_match_tune2fs() {
    let dir = tempfile::tempdir().unwrap();
    let Some(plain) = image(dir.path(), &[]) else { return };
    let enc = |encoding, flags| EncodingEdit { encoding, flags };
    let utf8 = Some(ENCODING_UTF8_12_1);
    let cases: Vec<(&[&str], TuneRequest)> = vec![
        (
            &["-O", "casefold"],
            TuneRequest {
                features: feature_edits(&["casefold"]),
                ..TuneRequest::default()
            },
        ),
        (
            &["-E", "encoding=utf8,encoding_flags=strict"],
            TuneRequest {
                encoding: enc(utf8, Some(ENCODING_FLAG_STRICT)),
                ..TuneRequest::default()
            },
        ),
        (
            &["-O", "casefold", "-E", "encoding=utf8-12.1"],
            TuneRequest {
                features: feature_edits(&["casefold"]),
                encoding: enc(utf8, None),
                ..TuneRequest::default()
            },
        ),
        (
            &["-O", "verity,^casefold"],
            TuneRequest {
                features: feature_edits(&["verity", "^casefold"]),
                ..TuneRequest::default()
            },
        ),
        // Refused by both: flags without an encoding, clearing verity
        // (even where it is off).
        (
            &["-O", "casefold", "-E", "encoding_flags=strict"],
            TuneRequest {
                features: feature_edits(&["casefold"]),
                encoding: enc(None, Some(ENCODING_FLAG_STRICT)),
                ..TuneRequest::default()
            },
        ),
        (
            &["-O", "^verity"],
            TuneRequest {
                features: feature_edits(&["^verity"]),
                ..TuneRequest::default()
            },
        ),
    ];
    for (args, req) in &cases {
        same_as_tune2fs(&plain, args, req);
    }
    let Some(cf) = image(
        &dir.path().join("cf"),
        &["-O", "casefold", "-E", "encoding_flags=strict"],
    ) else {
        return;
    };
    let refused: Vec<(&[&str], TuneRequest)> = vec![
        (
            &["-E", "encoding=utf8"],
            TuneRequest {
                encoding: enc(utf8, None),
                ..TuneRequest::default()
            },
        ),
        (
            &["-O", "verity"],
            TuneRequest {
                features: feature_edits(&["verity"]),
                ..TuneRequest::default()
            },
        ),
        (
            &["-O", "^casefold"],
            TuneRequest {
                features: feature_edits(&["^casefold"]),
                ..TuneRequest::default()
            },
        ),
    ];
    for (args, req) in &refused {
        same_as_tune2fs(&cf, args, req);
    }
}

/// With a directory flagged +F, casefold stays (tune2fs refuses too); a
/// casefold turned on by tune serves folded lookups at once.
#[test]
fn casefold_is_kept_while_a_directory_is_folded() {
    let dir = tempfile::tempdir().unwrap();
    let Some(img) = image(dir.path(), &[]) else { return };
    let on = TuneRequest {
        features: feature_edits(&["casefold"]),
        ..TuneRequest::default()
    };
    tune_image(&img, &on).unwrap();
    {
        let fs = common::open_rw(&img);
        let d = fs.create(ROOT_INO, b"cf", NodeKind::Directory, ATTR).unwrap();
        fs.set_flags(d.ino, d.raw.flags() | CASEFOLD, false).unwrap();
        fs.create(d.ino, "Straße".as_bytes(), NodeKind::Regular, ATTR).unwrap();
        assert!(fs.lookup(&fs.inode(d.ino).unwrap(), b"STRASSE").is_ok());
        fs.unmount().unwrap();
    }
    assert_fsck_clean(&img).unwrap();
    let off = TuneRequest {
        features: feature_edits(&["^casefold"]),
        ..TuneRequest::default()
    };
    same_as_tune2fs(&img, &["-O", "^casefold"], &off);
    let e = tune_image(&img, &off).unwrap_err();
    assert!(e.to_string().contains("+F"), "{e}");
}
