//! Commands that take an image take an NBD URI too: `ext4kit mkfs` onto
//! an nbdkit export over a Unix socket, `ext4kit mount nbd+unix://…`
//! through FUSE with files written and read back, `ext4kit fsck -fn` over
//! the export, then `e2fsck -fn` on the server's backing file.

use std::path::Path;
use std::process::Command;

use ext4kit_testkit::fuse::{FuseMount, ready_with};
use ext4kit_testkit::nbd::{Listen, NbdServer, servers_missing};
use ext4kit_testkit::{skipped, tools};

fn exe() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_ext4kit"))
}

fn ext4kit(args: &[&str]) -> std::process::Output {
    Command::new(exe()).args(args).output().unwrap()
}

#[test]
fn mkfs_mount_and_fsck_over_nbd() {
    if let Some(why) = servers_missing() {
        skipped!("NBD servers missing: {why}");
        return;
    }
    if !ready_with("e2fsck") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("backing.img");
    std::fs::File::create(&img).unwrap().set_len(64 << 20).unwrap();
    let srv = NbdServer::nbdkit(
        &["file", &format!("file={}", img.display())],
        &Listen::Unix(dir.path().join("cli.sock")),
    )
    .unwrap();
    let uri = srv.uri("");
    let out = ext4kit(&["mkfs", "-q", &uri]);
    assert!(out.status.success(), "mkfs: {}", String::from_utf8_lossy(&out.stderr));
    let again = ext4kit(&["mkfs", "-q", &uri]);
    assert!(!again.status.success(), "mkfs over a file system without -F");
    assert!(String::from_utf8_lossy(&again.stderr).contains("use -F"));

    let m = FuseMount::start(exe(), Path::new(&uri), "").unwrap();
    let files: Vec<(String, Vec<u8>)> = (0..30)
        .map(|i| (format!("f{i}"), vec![i as u8; 1 + i * 7000]))
        .collect();
    std::fs::create_dir(m.path().join("d")).unwrap();
    for (name, data) in &files {
        std::fs::write(m.path().join("d").join(name), data).unwrap();
    }
    for (name, data) in &files {
        assert!(std::fs::read(m.path().join("d").join(name)).unwrap() == *data, "{name}");
    }
    assert!(m.unmount().unwrap().success());

    let fsck = ext4kit(&["fsck", "-fn", &uri]);
    assert!(
        fsck.status.success(),
        "ext4kit fsck over NBD: {}",
        String::from_utf8_lossy(&fsck.stdout)
    );
    drop(srv);
    tools::assert_fsck_clean(&img).unwrap();
    let listing = tools::debugfs(&img, "ls -l /d").unwrap();
    assert!(listing.contains("f29"), "{listing}");
}

#[test]
fn a_bad_uri_is_named() {
    let out = ext4kit(&["fsck", "-fn", "nbd+unix:///x"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("socket="), "{err}");
    let out = ext4kit(&["fsck", "-fn", "nbds://127.0.0.1/x?tls-psk-file=/k"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("TLS-PSK is not supported"));
}
