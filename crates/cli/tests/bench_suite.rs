//! `ext4kit bench WORKLOAD`'s own flags end to end: the ones the library's
//! tests cannot see because the command line turns them into options.

use std::process::{Command, Output};

fn bench(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ext4kit"))
        .arg("bench")
        .args(args)
        .output()
        .expect("run ext4kit bench")
}

/// `--alloc`/`--inode-alloc` reach the engine (the report names what it
/// opened the image with), `alloc=` compares, and a kernel target refuses
/// both before it needs root or a loop device.
#[test]
fn allocator_flags_reach_the_engine_or_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("a.img");
    let json = dir.path().join("r.json");
    let small = ["--size", "1M", "--cache", "4M"];
    let out = bench(
        &[
            &["seqio", "--target", img.to_str().unwrap()][..],
            &small,
            &[
                "--alloc",
                "ext3",
                "--inode-alloc",
                "parent",
                "--json",
                json.to_str().unwrap(),
            ],
        ]
        .concat(),
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("Allocators: blocks ext3, inodes parent."), "{stdout}");
    let report: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(report["block_alloc"], "ext3");
    assert_eq!(report["inode_alloc"], "parent");

    let fresh = dir.path().join("c.img");
    let out = bench(
        &[
            &["seqio", "--target", fresh.to_str().unwrap()][..],
            &small,
            &["--compare", "alloc=ext3", "--rounds", "1"],
        ]
        .concat(),
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        stdout.contains("| base | alloc=ext3 |") && stdout.contains("blocks ext3, inodes orlov"),
        "{stdout}"
    );

    for args in [
        &["seqio", "--kernel", "ext4", "--alloc", "ext3"][..],
        &["seqio", "--kernel", "ext4", "--compare", "alloc=ext3"],
    ] {
        let out = bench(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && stderr.contains("kernel's"),
            "{args:?}: {stderr}"
        );
    }
    let out = bench(&["seqio", "--target", img.to_str().unwrap(), "--alloc", "buddy"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && stderr.contains("mballoc, ext3"), "{stderr}");
}
