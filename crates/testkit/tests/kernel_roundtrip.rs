//! Proves the comparison is trustworthy: a fixture tree copied into images
//! by the kernel (and by mke2fs -d) reads back through a kernel mount exactly
//! as the source, to the nanosecond where the format keeps nanoseconds.

use std::path::Path;

use ext4kit_testkit::compare::{CompareOptions, compare_trees, format_differences};
use ext4kit_testkit::fixture::{FragmentOptions, TreeOptions, build_tree};
use ext4kit_testkit::image::{Image, KernelPopulate, matrix, probe_matrix};
use ext4kit_testkit::mount::can_loop_mount;
use ext4kit_testkit::tools::{require_tools, skip_unless};

const TOOLS: &[&str] = &[
    "mkfs.ext2",
    "mkfs.ext3",
    "mkfs.ext4",
    "e2fsck",
    "debugfs",
    "cp",
];

fn ready() -> bool {
    skip_unless(can_loop_mount()).is_some() && skip_unless(require_tools(TOOLS)).is_some()
}

fn spec(label: &str) -> ext4kit_testkit::image::ImageSpec {
    matrix(256 << 20)
        .into_iter()
        .find(|s| s.label == label)
        .expect("label in matrix")
}

#[test]
fn matrix_builds_clean_and_reports_kernel_mountability() {
    if !ready() {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let rows = probe_matrix(&matrix(64 << 20), work.path());
    assert_eq!(rows.len(), 10);
    for r in &rows {
        eprintln!(
            "matrix {:<26} mkfs+fsck: {:<4} kernel mount: {}",
            r.spec.label,
            if r.built.is_ok() { "ok" } else { "FAIL" },
            match &r.mounts {
                Ok(()) => "ok".to_string(),
                Err(e) => format!("refused ({})", e.lines().last().unwrap_or("")),
            }
        );
        assert!(r.built.is_ok(), "{}: {:?}", r.spec.label, r.built);
    }
    for r in rows.iter().filter(|r| r.spec.label != "ext4-64k") {
        assert!(
            r.mounts.is_ok(),
            "{} does not mount: {:?}",
            r.spec.label,
            r.mounts
        );
    }
}

fn check(src: &Path, img: &Image, opts: CompareOptions) {
    let mnt = img
        .mount_ro()
        .unwrap_or_else(|e| panic!("{}: {e}", img.spec.label));
    let diffs = compare_trees(src, mnt.path(), opts);
    assert!(
        diffs.is_empty(),
        "{} ({}): {} differences:\n{}",
        img.spec.label,
        img.path.display(),
        diffs.len(),
        format_differences(&diffs)
    );
    mnt.unmount().unwrap();
}

#[test]
fn kernel_and_mkfs_d_images_read_back_identical() {
    if !ready() {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let src = work.path().join("src");
    let stats = build_tree(&src, &TreeOptions::small()).unwrap();
    eprintln!("fixture: {stats:?}");
    assert!(
        stats.skipped.is_empty(),
        "as root nothing should be skipped: {:?}",
        stats.skipped
    );

    let frag = FragmentOptions::default();
    for label in ["ext4", "ext4-1k", "ext3", "ext4-i128"] {
        let spec = spec(label);
        let dir = work.path().join(label);
        std::fs::create_dir(&dir).unwrap();

        let how = KernelPopulate {
            fragment: Some(frag.clone()),
            ..Default::default()
        };
        let img =
            Image::kernel(&spec, Some(&src), &dir, &how).unwrap_or_else(|e| panic!("{label}: {e}"));
        eprintln!("{label}: fragmented depths {:?}", img.fragmented_depths);
        let opts = CompareOptions {
            mtime_nanoseconds: spec.nanosecond_timestamps(),
            exclude: vec![frag.dir.clone().into()],
            ..Default::default()
        };
        check(&src, &img, opts);
        std::fs::remove_file(&img.path).unwrap();

        // mke2fs 1.47 -d keeps whole seconds only, and stamps the root itself.
        let img = Image::mkfs_d(&spec, &src, &dir).unwrap_or_else(|e| panic!("{label} -d: {e}"));
        let opts = CompareOptions {
            mtime_nanoseconds: false,
            root_metadata: false,
            ..Default::default()
        };
        check(&src, &img, opts);
        std::fs::remove_file(&img.path).unwrap();
    }
}
