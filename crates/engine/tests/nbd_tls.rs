//! NBD over TLS (`nbds://`): against nbdkit requiring TLS (`--tls=require`)
//! with credentials made by `openssl` in the test, a file system made and
//! written over TLS passes `e2fsck -fn` on the backing file, over a Unix
//! socket and over TCP with a client certificate the server checks
//! (`--tls-verify`); a certificate from another CA is refused naming
//! verification (unless `tls-verify-peer=false`); a plain `nbd://` URI is
//! told to use `nbds://`. A fake server then answers `NBD_OPT_STARTTLS`
//! in hostile ways: each gives an error naming what was wrong.

use std::io::{Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::time::Duration;

use ext4kit_engine::device::{FileDevice, NbdDevice, NbdOptions, nbd::NbdUri};
use ext4kit_engine::mkfs::{MkfsOptions, mkfs};
use ext4kit_engine::{Attr, BlockDevice, Filesystem, NodeKind, OpenOptions, ROOT_INO};
use ext4kit_testkit::nbd::{Listen, NbdServer, servers_missing};
use ext4kit_testkit::rng::Rng;
use ext4kit_testkit::tls::{make_ca, make_credentials, openssl_missing};
use ext4kit_testkit::{skipped, tools};

fn tools_here() -> bool {
    match servers_missing().or_else(openssl_missing) {
        Some(why) => {
            skipped!("NBD over TLS: {why}");
            false
        }
        None => true,
    }
}

fn open(uri: &str, writable: bool) -> std::io::Result<NbdDevice> {
    let opts = NbdOptions {
        writable,
        timeout: Duration::from_secs(20),
        ..NbdOptions::default()
    };
    NbdDevice::open(&NbdUri::parse(uri)?, opts)
}

/// The `nbds` form of a plain URI, with `params` added to its query.
fn nbds(uri: &str, params: &str) -> String {
    let tls = format!("nbds{}", uri.strip_prefix("nbd").unwrap());
    let sep = if tls.contains('?') { '&' } else { '?' };
    format!("{tls}{sep}{params}")
}

/// nbdkit's file plugin on `img`, answering only TLS with the credentials
/// in `certs` (and checking the client's certificate with `verify`).
fn tls_server(img: &Path, certs: &Path, listen: &Listen, verify: bool) -> NbdServer {
    let certs = format!("--tls-certificates={}", certs.display());
    let file = format!("file={}", img.display());
    let mut args = vec!["--tls=require", &certs];
    if verify {
        args.push("--tls-verify");
    }
    args.extend(["file", &file]);
    NbdServer::nbdkit(&args, listen).unwrap()
}

fn open_error(uri: &str) -> std::io::Error {
    match open(uri, false) {
        Ok(_) => panic!("{uri}: opened"),
        Err(e) => e,
    }
}

fn backing(dir: &Path, name: &str, len: u64) -> PathBuf {
    let p = dir.join(name);
    std::fs::File::create(&p).unwrap().set_len(len).unwrap();
    p
}

/// mkfs, a tree of files read back, unmount, all over TLS; then the
/// backing file passes e2fsck and reads the same through a file device.
fn file_system_over(uri: &str, img: &Path) {
    let dev = open(uri, true).unwrap_or_else(|e| panic!("{uri}: {e}"));
    mkfs(&dev, &MkfsOptions::default()).unwrap();
    let fs = Filesystem::open(Box::new(dev), OpenOptions::default()).unwrap();
    let attr = Attr {
        perm: 0o644,
        uid: 0,
        gid: 0,
    };
    let mut rng = Rng::new(23);
    let made: Vec<(String, Vec<u8>)> = (0..40)
        .map(|i| (format!("/t{i}"), rng.bytes(1 + (i * 7919) % 300_000)))
        .collect();
    for (name, data) in &made {
        let f = fs
            .create(ROOT_INO, &name.as_bytes()[1..], NodeKind::Regular, attr)
            .unwrap();
        fs.write(f.ino, 0, data).unwrap();
    }
    for (name, data) in &made {
        let inode = fs.resolve(name.as_bytes()).unwrap();
        assert!(fs.read_all(&inode, 1 << 20).unwrap() == *data, "{name} over TLS");
    }
    fs.unmount().unwrap();
    tools::assert_fsck_clean(img).unwrap_or_else(|e| panic!("{uri}: {e}"));
    let local = Filesystem::open(Box::new(FileDevice::open(img, false).unwrap()), OpenOptions::default()).unwrap();
    for (name, data) in &made {
        let inode = local.resolve(name.as_bytes()).unwrap();
        assert!(
            local.read_all(&inode, 1 << 20).unwrap() == *data,
            "{name} on the backing file"
        );
    }
}

#[test]
fn file_system_made_over_tls_passes_e2fsck() {
    if !tools_here() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let certs = dir.path().join("pki");
    std::fs::create_dir(&certs).unwrap();
    make_credentials(&certs).unwrap();
    let ca = format!("tls-certificates={}", certs.display());

    let img = backing(dir.path(), "unix.img", 64 << 20);
    let srv = tls_server(&img, &certs, &Listen::Unix(dir.path().join("tls.sock")), false);
    file_system_over(&nbds(&srv.uri(""), &ca), &img);
    drop(srv);

    // Over TCP to 127.0.0.1 (an IP name in the certificate), with the
    // server demanding the client's certificate.
    let img = backing(dir.path(), "tcp.img", 64 << 20);
    let srv = tls_server(&img, &certs, &Listen::free_tcp().unwrap(), true);
    file_system_over(&nbds(&srv.uri(""), &ca), &img);
}

#[test]
fn wrong_ca_plain_uri_and_unverified() {
    if !tools_here() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let certs = dir.path().join("pki");
    let other = dir.path().join("other");
    std::fs::create_dir(&certs).unwrap();
    std::fs::create_dir(&other).unwrap();
    make_credentials(&certs).unwrap();
    make_ca(&other, "another CA").unwrap();
    let img = backing(dir.path(), "b.img", 8 << 20);
    let srv = tls_server(&img, &certs, &Listen::Unix(dir.path().join("s")), false);
    let plain = srv.uri("");

    let e = open_error(&nbds(&plain, &format!("tls-certificates={}", other.display())));
    assert!(e.to_string().contains("certificate failed verification"), "{e}");
    assert_eq!(e.kind(), std::io::ErrorKind::PermissionDenied);

    let e = open_error(&plain);
    assert!(e.to_string().contains("requires TLS: use an nbds://"), "{e}");

    let e = open_error(&nbds(&plain, "tls-certificates=/nonexistent"));
    assert!(e.to_string().contains("/nonexistent/ca-cert.pem"), "{e}");

    // Unverified: the session is still TLS, and the bytes still arrive.
    let uri = nbds(
        &plain,
        &format!("tls-certificates={}&tls-verify-peer=false", other.display()),
    );
    let dev = open(&uri, true).unwrap_or_else(|e| panic!("{uri}: {e}"));
    let data = Rng::new(5).bytes(3 << 20);
    dev.write_at(4096, &data).unwrap();
    dev.flush().unwrap();
    let mut back = vec![0u8; data.len()];
    dev.read_at(4096, &mut back).unwrap();
    assert!(back == data);
    drop(dev);
    assert!(std::fs::read(&img).unwrap()[4096..][..data.len()] == data[..]);
}

const NBDMAGIC: u64 = 0x4e42_444d_4147_4943;
const IHAVEOPT: u64 = 0x4948_4156_454f_5054;
const OPT_REPLY: u64 = 0x0003_e889_0455_65a9;
const ERR: u32 = 1 << 31;

/// How the fake server answers `NBD_OPT_STARTTLS` (option 5).
#[derive(Clone, Copy, Debug)]
enum Evil {
    /// `NBD_REP_ERR_POLICY`.
    Refused,
    /// `NBD_REP_ACK` with a payload.
    AckWithPayload,
    /// A reply naming another option.
    WrongOption,
    /// Acknowledged, then something that is not TLS.
    NotTls,
    /// Acknowledged, then the connection closed.
    Hangup,
    /// `NBD_REP_ERR_TLS_REQD` to everything (met by a plain URI).
    TlsRequired,
}

fn opt_reply(s: &mut UnixStream, opt: u32, kind: u32, payload: &[u8]) {
    let mut b = OPT_REPLY.to_be_bytes().to_vec();
    b.extend_from_slice(&opt.to_be_bytes());
    b.extend_from_slice(&kind.to_be_bytes());
    b.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    b.extend_from_slice(payload);
    let _ = s.write_all(&b);
}

fn serve(s: &mut UnixStream, evil: Evil) -> std::io::Result<()> {
    let mut g = NBDMAGIC.to_be_bytes().to_vec();
    g.extend_from_slice(&IHAVEOPT.to_be_bytes());
    g.extend_from_slice(&3u16.to_be_bytes());
    s.write_all(&g)?;
    let mut flags = [0u8; 4];
    s.read_exact(&mut flags)?;
    loop {
        let mut h = [0u8; 16];
        s.read_exact(&mut h)?;
        let opt = u32::from_be_bytes(h[8..12].try_into().unwrap());
        let len = u32::from_be_bytes(h[12..16].try_into().unwrap());
        let mut data = vec![0u8; len.min(1 << 16) as usize];
        s.read_exact(&mut data)?;
        match evil {
            Evil::Refused => opt_reply(s, opt, ERR + 2, b"no TLS here"),
            Evil::AckWithPayload => opt_reply(s, opt, 1, b"extra"),
            Evil::WrongOption => opt_reply(s, 7, 1, &[]),
            Evil::NotTls => {
                opt_reply(s, opt, 1, &[]);
                s.write_all(&[0x42; 64])?;
            }
            Evil::Hangup => {
                // Close our side only, and take what the client sends, so
                // that it sees an orderly end rather than a reset.
                opt_reply(s, opt, 1, &[]);
                s.shutdown(std::net::Shutdown::Write)?;
                std::io::copy(s, &mut std::io::sink())?;
            }
            Evil::TlsRequired => opt_reply(s, opt, ERR + 5, b"TLS please"),
        }
        if !matches!(evil, Evil::TlsRequired) {
            return Ok(());
        }
    }
}

fn fake_error(evil: Evil, tls: bool) -> String {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("evil.sock");
    let listener = UnixListener::bind(&sock).unwrap();
    let server = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        let _ = serve(&mut s, evil);
        // Keep the socket open a while (unless hanging up is the point)
        // so that the client's error is its own reading, not EOF.
        if !matches!(evil, Evil::Hangup) {
            std::thread::sleep(Duration::from_millis(300));
        }
    });
    let scheme = if tls { "nbds+unix" } else { "nbd+unix" };
    let uri = format!("{scheme}:///?socket={}&tls-verify-peer=false", sock.display());
    let uri = if tls {
        uri
    } else {
        uri.replace("&tls-verify-peer=false", "")
    };
    let e = match open(&uri, false) {
        Ok(_) => panic!("{evil:?}: the handshake succeeded"),
        Err(e) => e.to_string(),
    };
    server.join().unwrap();
    e
}

#[test]
fn hostile_starttls_replies_are_named() {
    let says = |evil, tls, what: &str| {
        let e = fake_error(evil, tls);
        assert!(e.contains(what), "{evil:?}: expected `{what}` in: {e}");
    };
    says(Evil::Refused, true, "does not offer TLS");
    says(Evil::Refused, true, "no TLS here");
    says(Evil::AckWithPayload, true, "acknowledged with 5 bytes of payload");
    says(Evil::WrongOption, true, "reply to option 7 while option 5 was asked");
    says(Evil::NotTls, true, "TLS handshake");
    says(Evil::Hangup, true, "TLS handshake: the server closed the connection");
    says(Evil::TlsRequired, false, "requires TLS: use an nbds:// URI");
}
