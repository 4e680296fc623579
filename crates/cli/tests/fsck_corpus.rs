//! `ext4kit fsck -fn` over every `f_*` image of the e2fsprogs test suite,
//! beside `e2fsck -fn` as the oracle.
//!
//! Per image: ext4kit must end with 0, 4 or 8 in time (no panic, no hang).
//! Figures: of the images `e2fsck -fn` finds not clean, how many ext4kit
//! also finds not clean; and for the plain images (no custom upstream
//! script) with an `expect.1`, how many of e2fsck's (pass, inode) pairs
//! ext4kit's findings name too. The figures go to stderr and to
//! `$CARGO_TARGET_TMPDIR/fsck-corpus.md`.

mod fsck_common;

use std::collections::{BTreeSet, HashSet};
use std::path::Path;
use std::time::{Duration, Instant};

use ext4kit_testkit::peer::{PeerImage, peer_data_dir};
use fsck_common::{e2fsck_fn, ext4kit_fsck, f_images, map_two_threads};

const EXT4KIT_LIMIT: Duration = Duration::from_secs(20);
/// e2fsck 1.47.0 loops on a few of these images; past this it is left out.
const E2FSCK_LIMIT: Duration = Duration::from_secs(8);
/// Floors at what this checker reaches today (measured, not hoped for).
const MIN_DETECTED: usize = 151;
const MIN_PAIRS_PERCENT: usize = 86;

struct Row {
    test: String,
    e2fsck: Option<i32>,
    ext4kit: Option<i32>,
    bad: Option<String>,
    expected: BTreeSet<(u8, u32)>,
    found: BTreeSet<(u8, u32)>,
    plain: bool,
}

/// (pass, inode) pairs of an e2fsck transcript: the pass from the last
/// "Pass N" header, the inode from the first "inode N", "inode #N" or
/// "/path (N)" on a line.
fn expected_pairs(text: &str) -> BTreeSet<(u8, u32)> {
    let mut pass = 0u8;
    let mut out = BTreeSet::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("Pass ") {
            pass = rest.bytes().next().map_or(0, |b| b.wrapping_sub(b'0'));
            continue;
        }
        if pass == 5 {
            continue;
        }
        if let Some(ino) = first_inode(line) {
            out.insert((pass, ino));
        }
    }
    out
}

fn digits(s: &str) -> Option<u32> {
    let d: String = s.chars().take_while(char::is_ascii_digit).collect();
    d.parse().ok()
}

fn first_inode(line: &str) -> Option<u32> {
    let lower = line.to_ascii_lowercase();
    let mut best: Option<(usize, u32)> = None;
    let mut consider = |at: usize, v: Option<u32>| {
        if let Some(v) = v
            && best.is_none_or(|(b, _)| at < b)
        {
            best = Some((at, v));
        }
    };
    if let Some(i) = lower.find("inode ") {
        let rest = &line[i + 6..];
        consider(i, digits(rest.strip_prefix('#').unwrap_or(rest)));
    }
    if let Some(i) = lower.find("inode #") {
        consider(i, digits(&line[i + 7..]));
    }
    for (i, _) in line.match_indices(" (") {
        let before = line[..i].rsplit(' ').next().unwrap_or("");
        if before.starts_with('/') {
            consider(i, digits(&line[i + 2..]));
        }
    }
    best.map(|(_, v)| v)
}

fn found_pairs(json: &str) -> BTreeSet<(u8, u32)> {
    let Ok(v) = serde_json::from_str::<serde_json::Value>(json) else {
        return BTreeSet::new();
    };
    let mut out = BTreeSet::new();
    for f in v["report"]["findings"].as_array().into_iter().flatten() {
        if let (Some(p), Some(i)) = (f["pass"].as_u64(), f["inode"].as_u64()) {
            out.insert((p as u8, i as u32));
        }
    }
    out
}

fn plain_tests(root: &Path) -> HashSet<String> {
    let manifest = std::fs::read_to_string(root.join("MANIFEST.tsv")).unwrap_or_default();
    manifest
        .lines()
        .filter_map(|l| {
            let cols: Vec<&str> = l.split('\t').collect();
            (cols.len() > 1 && cols[1] == "no").then(|| cols[0].to_string())
        })
        .collect()
}

fn check_one(img: &PeerImage, root: &Path, plain: &HashSet<String>) -> Row {
    let k = ext4kit_fsck(&["-fn", "--json"], &img.path, EXT4KIT_LIMIT);
    let bad = if k.timed_out {
        Some(format!("no answer within {EXT4KIT_LIMIT:?}"))
    } else if !matches!(k.code, Some(0 | 4 | 8)) {
        Some(format!("exit {:?}: {}", k.code, k.stderr.lines().last().unwrap_or("")))
    } else {
        None
    };
    let e = e2fsck_fn(&img.path, E2FSCK_LIMIT);
    let expect = std::fs::read_to_string(root.join(&img.test).join("expect.1")).unwrap_or_default();
    Row {
        test: img.test.clone(),
        e2fsck: if e.timed_out { None } else { e.code },
        ext4kit: k.code,
        bad,
        expected: expected_pairs(&expect),
        found: found_pairs(&k.stdout),
        plain: plain.contains(&img.test) && !expect.is_empty(),
    }
}

#[test]
fn the_e2fsprogs_corpus_is_checked_like_e2fsck_does() {
    let Some(images) = f_images() else { return };
    let root = peer_data_dir().expect("peer data");
    let plain = plain_tests(&root);
    let start = Instant::now();
    let mut rows = map_two_threads(&images, |img| check_one(img, &root, &plain));
    rows.sort_by(|a, b| a.test.cmp(&b.test));
    let report = summarize(&rows, start.elapsed());
    eprintln!("{report}");
    let _ = std::fs::write(Path::new(env!("CARGO_TARGET_TMPDIR")).join("fsck-corpus.md"), &report);
    let bad: Vec<String> = rows
        .iter()
        .filter_map(|r| r.bad.as_ref().map(|b| format!("{}: {b}", r.test)))
        .collect();
    assert!(
        bad.is_empty(),
        "ext4kit fsck panicked, hung or crashed:\n{}",
        bad.join("\n")
    );
    let (flagged, both) = detection(&rows);
    assert!(
        flagged > 100,
        "expected most corpus images to be flagged by e2fsck, got {flagged}"
    );
    assert!(
        both >= MIN_DETECTED,
        "ext4kit found only {both} of the {flagged} images e2fsck flags"
    );
    let (hit, total) = pair_agreement(&rows);
    assert!(
        hit * 100 >= total * MIN_PAIRS_PERCENT,
        "(pass, inode) agreement {hit}/{total} fell"
    );
}

fn detection(rows: &[Row]) -> (usize, usize) {
    let flagged: Vec<&Row> = rows.iter().filter(|r| r.e2fsck.is_some_and(|c| c != 0)).collect();
    let both = flagged.iter().filter(|r| r.ext4kit.is_some_and(|c| c != 0)).count();
    (flagged.len(), both)
}

fn pair_agreement(rows: &[Row]) -> (usize, usize) {
    let plain = rows.iter().filter(|r| r.plain);
    plain.fold((0, 0), |(h, t), r| {
        (h + r.expected.intersection(&r.found).count(), t + r.expected.len())
    })
}

fn summarize(rows: &[Row], took: Duration) -> String {
    let (flagged, both) = detection(rows);
    let (hit, total) = pair_agreement(rows);
    let plain = rows.iter().filter(|r| r.plain).count();
    let full = rows
        .iter()
        .filter(|r| r.plain && r.expected.is_subset(&r.found))
        .count();
    let clean_both = rows
        .iter()
        .filter(|r| r.e2fsck == Some(0) && r.ext4kit == Some(0))
        .count();
    let clean_e2 = rows.iter().filter(|r| r.e2fsck == Some(0)).count();
    let timeouts = rows.iter().filter(|r| r.e2fsck.is_none()).count();
    let mut s = format!(
        "# ext4kit fsck -fn on the e2fsprogs f_* corpus\n\n\
         {} images in {:.1} s; e2fsck -fn timed out on {timeouts}.\n\n\
         - e2fsck -fn finds {flagged} not clean; ext4kit fsck -fn also finds {both} of them.\n\
         - e2fsck -fn finds {clean_e2} clean; ext4kit agrees on {clean_both}.\n\
         - {plain} plain images with expect.1: {hit} of {total} (pass, inode) pairs found ({}%), \
         every pair found on {full} images.\n\n\
         | image | e2fsck | ext4kit | pairs |\n|---|---|---|---|\n",
        rows.len(),
        took.as_secs_f64(),
        (hit * 100).checked_div(total).unwrap_or(0)
    );
    for r in rows {
        let pairs = if r.plain {
            format!("{}/{}", r.expected.intersection(&r.found).count(), r.expected.len())
        } else {
            "-".into()
        };
        let e = r.e2fsck.map_or("timeout".into(), |c| c.to_string());
        let k = r.ext4kit.map_or("none".into(), |c| c.to_string());
        s.push_str(&format!("| {} | {e} | {k} | {pairs} |\n", r.test));
    }
    s
}

#[test]
fn expect_parsing_finds_pass_and_inode() {
    let t = "Pass 1: Checking inodes\nInode 12, i_size is 0, should be 1024.  Fix? no\n\
             Pass 1B: Rescan\nMultiply-claimed block(s) in inode 13: 25--26\n\
             Pass 2: Checking\nEntry 'x' in /ci_dir (14) has a bad name.\n\
             Pass 5: Checking\nInode bitmap differences: -(12--14)\n";
    let p: Vec<_> = expected_pairs(t).into_iter().collect();
    assert_eq!(p, vec![(1, 12), (1, 13), (2, 14)]);
}
