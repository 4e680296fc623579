//! `ext4kit fsck -fy` over every `f_*` image of the e2fsprogs test suite,
//! with `e2fsck -fn` as the judge of the result and `e2fsck -fy` on a
//! second copy as the yardstick.
//!
//! Per image: the repair must end in time with an e2fsck exit status (no
//! panic, no hang); an image e2fsck found clean before must still be clean
//! after (a repair does no harm); ext4kit's own `-fn` afterwards must agree
//! with its repair's verdict. Figures: images repaired to clean by both
//! judges, against e2fsck's own repair, and what is left, by problem code.
//! They go to stderr and `$CARGO_TARGET_TMPDIR/fsck-repair.md`.

mod fsck_common;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use ext4kit_testkit::peer::PeerImage;
use fsck_common::{e2fsck_fn, ext4kit_fsck, f_images, map_two_threads, run_timed};

const REPAIR_LIMIT: Duration = Duration::from_secs(60);
const CHECK_LIMIT: Duration = Duration::from_secs(20);
/// e2fsck 1.47.0 loops on a few of these images; past this it is left out.
const E2FSCK_LIMIT: Duration = Duration::from_secs(10);
/// Floor at what the repairs reach today (measured, not hoped for).
const MIN_REPAIRED: usize = 194;

struct Row {
    test: String,
    /// e2fsck -fn on the original: Some(0) clean.
    before: Option<i32>,
    /// ext4kit fsck -fy exit status.
    repair: Option<i32>,
    /// ext4kit fsck -fn afterwards.
    ours_after: Option<i32>,
    /// e2fsck -fn afterwards.
    e2fsck_after: Option<i32>,
    /// e2fsck -fy then e2fsck -fn on a second copy.
    e2fsck_repaired: Option<bool>,
    /// Problem codes left in the repair's verdict.
    left: Vec<String>,
    bad: Option<String>,
}

impl Row {
    fn repaired(&self) -> bool {
        self.ours_after == Some(0) && self.e2fsck_after == Some(0)
    }
}

fn left_codes(json: &str) -> Vec<String> {
    let Ok(v) = serde_json::from_str::<serde_json::Value>(json) else {
        return vec!["(no json)".into()];
    };
    if let Some(e) = v["error"].as_str() {
        return vec![format!("fatal: {}", e.chars().take(60).collect::<String>())];
    }
    let mut out: Vec<String> = v["verdict"]["findings"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|f| f["severity"] == "error" && f["fixed"] == false)
        .filter_map(|f| f["code"]["name"].as_str().map(String::from))
        .collect();
    out.sort();
    out.dedup();
    out
}

fn copy(img: &PeerImage, dir: &Path, tag: &str) -> std::path::PathBuf {
    let to = dir.join(format!("{}.{tag}.img", img.test));
    std::fs::copy(&img.path, &to).expect("copy image");
    to
}

fn repair_one(img: &PeerImage, dir: &Path) -> Row {
    let before = e2fsck_fn(&img.path, E2FSCK_LIMIT);
    let ours = copy(img, dir, "ours");
    let r = ext4kit_fsck(&["-fy", "--json"], &ours, REPAIR_LIMIT);
    let bad = if r.timed_out {
        Some(format!("no answer within {REPAIR_LIMIT:?}"))
    } else if !matches!(r.code, Some(0 | 1 | 4 | 5 | 8)) {
        Some(format!("exit {:?}: {}", r.code, r.stderr.lines().last().unwrap_or("")))
    } else {
        None
    };
    let ours_after = ext4kit_fsck(&["-fn"], &ours, CHECK_LIMIT);
    let e2_after = e2fsck_fn(&ours, E2FSCK_LIMIT);
    let theirs = copy(img, dir, "e2fsck");
    let p = theirs.to_str().expect("utf-8 path");
    let fy = run_timed("e2fsck", &["-fy", p], E2FSCK_LIMIT);
    let e2fsck_repaired = (!fy.timed_out).then(|| e2fsck_fn(&theirs, E2FSCK_LIMIT).code == Some(0));
    let _ = std::fs::remove_file(&ours);
    let _ = std::fs::remove_file(&theirs);
    Row {
        test: img.test.clone(),
        before: if before.timed_out { None } else { before.code },
        repair: r.code,
        ours_after: ours_after.code,
        e2fsck_after: if e2_after.timed_out { None } else { e2_after.code },
        e2fsck_repaired,
        left: left_codes(&r.stdout),
        bad,
    }
}

#[test]
fn the_e2fsprogs_corpus_is_repaired_to_clean() {
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let Some(images) = f_images() else { return };
    let dir = tempfile::tempdir().expect("tempdir");
    let start = Instant::now();
    let mut rows = map_two_threads(&images, |img| repair_one(img, dir.path()));
    rows.sort_by(|a, b| a.test.cmp(&b.test));
    let report = summarize(&rows, start.elapsed());
    eprintln!("{report}");
    let _ = std::fs::write(tmp.join("fsck-repair.md"), &report);
    let bad: Vec<String> = rows
        .iter()
        .filter_map(|r| r.bad.as_ref().map(|b| format!("{}: {b}", r.test)))
        .collect();
    assert!(
        bad.is_empty(),
        "ext4kit fsck -fy panicked, hung or crashed:\n{}",
        bad.join("\n")
    );
    let harmed: Vec<&str> = rows
        .iter()
        .filter(|r| r.before == Some(0) && r.e2fsck_after.is_some_and(|c| c != 0))
        .map(|r| r.test.as_str())
        .collect();
    assert!(harmed.is_empty(), "clean images made unclean by the repair: {harmed:?}");
    let disagree: Vec<&str> = rows
        .iter()
        .filter(|r| r.bad.is_none() && matches!(r.repair, Some(0 | 1)) && r.ours_after != Some(0))
        .map(|r| r.test.as_str())
        .collect();
    assert!(
        disagree.is_empty(),
        "the repair said clean but a check afterwards does not: {disagree:?}"
    );
    let repaired = rows.iter().filter(|r| r.repaired()).count();
    assert!(repaired >= MIN_REPAIRED, "only {repaired} images repaired to clean");
}

fn summarize(rows: &[Row], took: Duration) -> String {
    let repaired = rows.iter().filter(|r| r.repaired()).count();
    let e2 = rows.iter().filter(|r| r.e2fsck_repaired == Some(true)).count();
    let e2_timeouts = rows.iter().filter(|r| r.e2fsck_repaired.is_none()).count();
    let only_ours = rows
        .iter()
        .filter(|r| r.repaired() && r.e2fsck_repaired != Some(true))
        .count();
    let mut left: BTreeMap<&str, usize> = BTreeMap::new();
    for r in rows.iter().filter(|r| !r.repaired()) {
        for c in &r.left {
            *left.entry(c).or_default() += 1;
        }
    }
    let mut by_count: Vec<(&str, usize)> = left.into_iter().collect();
    by_count.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    let mut s = format!(
        "# ext4kit fsck -fy on the e2fsprogs f_* corpus\n\n\
         {} images in {:.1} s.\n\n\
         - repaired to clean (ext4kit -fn and e2fsck -fn both exit 0 afterwards): **{repaired}**\n\
         - e2fsck -fy on this machine repairs {e2} to clean ({e2_timeouts} did not finish in {E2FSCK_LIMIT:?}); \
         ext4kit repairs {only_ours} that it does not\n\n\
         Problems left, by how many unrepaired images have them:\n\n",
        rows.len(),
        took.as_secs_f64()
    );
    for (c, n) in by_count {
        s.push_str(&format!("- {c}: {n}\n"));
    }
    s.push_str("\n| image | e2fsck -fn before | ext4kit -fy | ext4kit -fn after | e2fsck -fn after | e2fsck -fy repairs | left |\n|---|---|---|---|---|---|---|\n");
    let show = |c: Option<i32>| c.map_or("-".into(), |c| c.to_string());
    for r in rows {
        s.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} |\n",
            r.test,
            show(r.before),
            show(r.repair),
            show(r.ours_after),
            show(r.e2fsck_after),
            r.e2fsck_repaired.map_or("timeout", |b| if b { "yes" } else { "no" }),
            r.left.join(" ")
        ));
    }
    s
}
