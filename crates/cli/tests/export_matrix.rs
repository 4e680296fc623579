//! `ext4kit export` against the kernel, across the feature matrix: for each
//! image made by `mkfs -d` and by writing through a kernel loop mount, the
//! exported tree must equal what `mount -o loop,ro` shows — contents, type,
//! mode, owner, nanosecond mtime, xattrs, link targets, device numbers and
//! hard-link groups. Where the kernel cannot mount the image (64 KiB blocks
//! here), the export is compared with the source tree (whole seconds: mke2fs
//! -d keeps no nanoseconds).

use std::path::Path;
use std::process::Command;

use ext4kit_testkit::compare::{CompareOptions, compare_trees, format_differences};
use ext4kit_testkit::fixture::{FragmentOptions, TreeOptions, build_tree};
use ext4kit_testkit::image::{Image, KernelPopulate, matrix};
use ext4kit_testkit::mount::can_loop_mount;
use ext4kit_testkit::tools::{require_tools, skip_unless};

const TOOLS: &[&str] = &["mkfs.ext2", "mkfs.ext3", "mkfs.ext4", "e2fsck", "debugfs", "cp"];

fn export(img: &Path, dest: &Path) {
    let out = Command::new(env!("CARGO_BIN_EXE_ext4kit"))
        .arg("export")
        .arg("-q")
        // The kernel shows device nodes and set-id bits as they are.
        .arg("--trusted")
        .arg(img)
        .arg("/")
        .arg(dest)
        .output()
        .expect("run ext4kit");
    assert!(
        out.status.success(),
        "export of {}: {}",
        img.display(),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn assert_same(expected: &Path, actual: &Path, opts: CompareOptions, what: &str) {
    let diffs = compare_trees(expected, actual, opts);
    assert!(
        diffs.is_empty(),
        "{what}: {} differences:\n{}",
        diffs.len(),
        format_differences(&diffs)
    );
}

/// Exports `img` and compares it with the kernel's view of the same image,
/// or with `src` when the kernel refuses the image.
fn check(img: &Image, src: &Path, work: &Path, how: &str) {
    let dest = work.join(format!("export-{}-{how}", img.spec.label));
    let t = std::time::Instant::now();
    export(&img.path, &dest);
    eprintln!("{} ({how}): exported in {:.1?}", img.spec.label, t.elapsed());
    let what = format!("{} ({how})", img.spec.label);
    match img.kernel_can_mount() {
        Ok(()) => {
            let mnt = img.mount_ro().unwrap_or_else(|e| panic!("{what}: {e}"));
            let opts = CompareOptions {
                ignore_lost_found: false,
                ..CompareOptions::default()
            };
            assert_same(mnt.path(), &dest, opts, &format!("{what} vs kernel"));
            mnt.unmount().expect("unmount");
        }
        Err(reason) => {
            eprintln!("{what}: the kernel refuses it ({reason}); comparing with the source tree");
            let opts = CompareOptions {
                root_metadata: false,
                ..CompareOptions::whole_seconds()
            };
            assert_same(src, &dest, opts, &format!("{what} vs source"));
        }
    }
    std::fs::remove_dir_all(&dest).expect("clean export");
}

#[test]
fn export_equals_the_kernel_view_across_the_feature_matrix() {
    if skip_unless(require_tools(TOOLS)).is_none() {
        return;
    }
    let kernel = can_loop_mount();
    if let Err(reason) = &kernel {
        ext4kit_testkit::skipped!(
            "kernel-populated images and kernel comparisons ({reason}); mkfs -d images are compared with their source"
        );
    }
    let work = tempfile::tempdir().expect("tempdir");
    let src = work.path().join("src");
    // A smaller hole-only file: mke2fs -d 1.47.0 stores it as an inline file
    // the kernel cannot SEEK_DATA in, so comparing it reads every zero.
    let opts = TreeOptions {
        hole_only_len: 64 << 20,
        ..TreeOptions::small()
    };
    build_tree(&src, &opts).expect("fixture tree");
    let frag = FragmentOptions::default();
    let specs = matrix(256 << 20);
    assert!(specs.len() >= 10, "the matrix lost entries");
    let mut deep = 0;
    for spec in &specs {
        let dir = work.path().join(&spec.label);
        std::fs::create_dir(&dir).expect("mkdir");
        let img = Image::mkfs_d(spec, &src, &dir).unwrap_or_else(|e| panic!("{}: mkfs -d: {e}", spec.label));
        let t = std::time::Instant::now();
        check(&img, &src, work.path(), "mkfs-d");
        eprintln!("{}: mkfs -d image checked in {:.1?}", spec.label, t.elapsed());
        let mountable = img.kernel_can_mount().is_ok();
        std::fs::remove_file(&img.path).expect("rm image");
        if kernel.is_err() || !mountable {
            continue;
        }
        let t = std::time::Instant::now();
        let how = KernelPopulate {
            fragment: Some(frag.clone()),
            ..KernelPopulate::default()
        };
        let img = Image::kernel(spec, Some(&src), &dir, &how).unwrap_or_else(|e| panic!("{}: kernel: {e}", spec.label));
        deep += img
            .fragmented_depths
            .iter()
            .filter(|d| d.is_some_and(|d| d >= 2))
            .count();
        check(&img, &src, work.path(), "kernel");
        eprintln!("{}: kernel image built and checked in {:.1?}", spec.label, t.elapsed());
        std::fs::remove_file(&img.path).expect("rm image");
    }
    if kernel.is_ok() {
        assert!(deep > 0, "no file with an extent tree of depth >= 2 was exported");
    }
}

/// The full fixture (a 50,000-entry directory, long symlinks, 3,000-byte
/// xattrs) written by the kernel into a default ext4 image.
#[test]
fn export_of_the_full_fixture_equals_the_kernel_view() {
    if skip_unless(require_tools(TOOLS)).is_none() || skip_unless(can_loop_mount()).is_none() {
        return;
    }
    let work = tempfile::tempdir().expect("tempdir");
    let src = work.path().join("src");
    let stats = build_tree(
        &src,
        &TreeOptions {
            hole_only_len: 64 << 20,
            ..TreeOptions::full()
        },
    )
    .expect("fixture tree");
    assert!(
        stats.skipped.is_empty(),
        "as root nothing is skipped: {:?}",
        stats.skipped
    );
    let spec = matrix(1 << 30)
        .into_iter()
        .find(|s| s.label == "ext4")
        .expect("ext4 in matrix")
        .with_inodes(131_072);
    let img = Image::kernel(&spec, Some(&src), work.path(), &KernelPopulate::default()).expect("kernel image");
    check(&img, &src, work.path(), "full");
}
