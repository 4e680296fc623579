//! Every command that takes an image takes an NBD URI through one shared
//! open (`open::open_device`): on an nbdkit export over a Unix socket,
//! mkfs, import, mkdir, write, ls, cat, stat, info, export, tune, rm,
//! `resize -P`, a write under `-z` and its `undo`; `resize` and `image`,
//! which need a local file, refuse by name. Over TLS (`nbds+unix://`),
//! ls and cat, and a loud warning for `tls-verify-peer=false`. The
//! backing file passes `e2fsck -fn` at the end.

use std::io::Write;
use std::process::{Command, Output, Stdio};

use ext4kit_testkit::nbd::{Listen, NbdServer, servers_missing};
use ext4kit_testkit::tls::{make_credentials, openssl_missing};
use ext4kit_testkit::{skipped, tools};

fn ext4kit(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ext4kit")).args(args).output().unwrap()
}

fn ok(args: &[&str]) -> String {
    let out = ext4kit(args);
    assert!(
        out.status.success(),
        "ext4kit {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn refused(args: &[&str]) -> String {
    let out = ext4kit(args);
    assert!(!out.status.success(), "ext4kit {} succeeded", args.join(" "));
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn write_stdin(uri: &str, path: &str, data: &[u8], extra: &[&str]) {
    let mut args = vec!["write"];
    args.extend(extra);
    args.extend([uri, path]);
    let mut child = Command::new(env!("CARGO_BIN_EXE_ext4kit"))
        .args(&args)
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(data).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "write: {}", String::from_utf8_lossy(&out.stderr));
}

fn tools_here() -> bool {
    match servers_missing().or_else(openssl_missing) {
        Some(why) => {
            skipped!("NBD commands: {why}");
            false
        }
        None => true,
    }
}

#[test]
fn commands_take_nbd_uris() {
    if !tools_here() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("backing.img");
    std::fs::File::create(&img).unwrap().set_len(64 << 20).unwrap();
    let file = format!("file={}", img.display());
    let srv = NbdServer::nbdkit(&["file", &file], &Listen::Unix(dir.path().join("c.sock"))).unwrap();
    let uri = srv.uri("");
    let uri = uri.as_str();

    ok(&["mkfs", "-q", uri]);
    let src = dir.path().join("src");
    std::fs::create_dir_all(src.join("sub")).unwrap();
    std::fs::write(src.join("sub/a.txt"), b"imported over NBD\n").unwrap();
    ok(&["import", uri, src.to_str().unwrap(), "/"]);
    ok(&["mkdir", "-p", uri, "/d/e"]);
    let big: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    write_stdin(uri, "/d/e/big", &big, &[]);

    let listing = ok(&["ls", uri, "/d/e"]);
    assert!(listing.contains("big"), "{listing}");
    assert_eq!(ok(&["cat", uri, "/sub/a.txt"]), "imported over NBD\n");
    let stat = ok(&["stat", uri, "/d/e/big"]);
    assert!(stat.contains("300000"), "{stat}");
    let info = ok(&["info", "-H", uri]);
    assert!(info.to_lowercase().contains("block count"), "{info}");
    let out = dir.path().join("out");
    std::fs::create_dir(&out).unwrap();
    ok(&["export", uri, "/d", out.to_str().unwrap()]);
    assert!(std::fs::read(out.join("e/big")).unwrap() == big);

    ok(&["tune", "-L", "netdisk", uri]);
    assert!(ok(&["info", "-H", uri]).contains("netdisk"));
    assert!(ok(&["resize", "-P", uri]).contains("minimum size"));

    // A write under -z, then undone over the export.
    let undo = dir.path().join("w.undo");
    write_stdin(uri, "/undone", b"gone soon", &["-z", undo.to_str().unwrap()]);
    assert_eq!(ok(&["cat", uri, "/undone"]), "gone soon");
    ok(&["undo", undo.to_str().unwrap(), uri]);
    assert!(!ok(&["ls", uri, "/"]).contains("undone"));

    ok(&["rm", uri, "/sub/a.txt"]);
    let e = refused(&["resize", uri, "128M"]);
    assert!(e.contains("`ext4kit resize` cannot work on an NBD export"), "{e}");
    let e = refused(&["image", "-r", uri, dir.path().join("m.raw").to_str().unwrap()]);
    assert!(e.contains("`ext4kit image` cannot work on an NBD export"), "{e}");

    let fsck = ext4kit(&["fsck", "-fn", uri]);
    assert!(fsck.status.success(), "{}", String::from_utf8_lossy(&fsck.stdout));
    drop(srv);
    tools::assert_fsck_clean(&img).unwrap();
    let root = tools::debugfs(&img, "ls -l /d/e").unwrap();
    assert!(root.contains("300000"), "{root}");
}

#[test]
fn commands_over_tls() {
    if !tools_here() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let certs = dir.path().join("pki");
    std::fs::create_dir(&certs).unwrap();
    make_credentials(&certs).unwrap();
    let img = dir.path().join("backing.img");
    std::fs::File::create(&img).unwrap().set_len(32 << 20).unwrap();
    let tls = format!("--tls-certificates={}", certs.display());
    let file = format!("file={}", img.display());
    let sock = dir.path().join("t.sock");
    let srv = NbdServer::nbdkit(&["--tls=require", &tls, "file", &file], &Listen::Unix(sock.clone())).unwrap();
    let plain = srv.uri("");
    let uri = format!(
        "nbds+unix:///?socket={}&tls-certificates={}",
        sock.display(),
        certs.display()
    );

    let e = refused(&["mkfs", "-q", &plain]);
    assert!(e.contains("use an nbds://"), "{e}");
    ok(&["mkfs", "-q", &uri]);
    write_stdin(&uri, "/secret", b"over TLS", &[]);
    assert_eq!(ok(&["cat", &uri, "/secret"]), "over TLS");

    let unverified = format!("nbds+unix:///?socket={}&tls-verify-peer=false", sock.display());
    let out = ext4kit(&["ls", &unverified, "/"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("secret"));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("WARNING") && err.contains("tls-verify-peer=false"),
        "{err}"
    );

    let e = refused(&["ls", &format!("{uri}&tls-psk-file=/k"), "/"]);
    assert!(e.contains("TLS-PSK is not supported"), "{e}");
    drop(srv);
    tools::assert_fsck_clean(&img).unwrap();
}
