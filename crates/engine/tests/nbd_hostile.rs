//! The NBD client against a hostile server: a small fake in this file
//! speaks the handshake, then breaks the protocol in one way per test
//! (bad magic, oversized lengths, replies to no request, short or partial
//! replies, chunks outside their request, TLS demanded, silence). Each must
//! give an error naming what was wrong: never a panic, a hang, or an
//! allocation sized by the server.

use std::io::{Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::time::Duration;

use ext4kit_engine::BlockDevice;
use ext4kit_engine::device::{NbdDevice, NbdOptions, nbd::NbdUri};

const NBDMAGIC: u64 = 0x4e42_444d_4147_4943;
const IHAVEOPT: u64 = 0x4948_4156_454f_5054;
const OPT_REPLY: u64 = 0x0003_e889_0455_65a9;
const SIMPLE: u32 = 0x6744_6698;
const STRUCTURED: u32 = 0x668e_33ef;
const ERR: u32 = 1 << 31;
const SIZE: u64 = 1 << 20;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Evil {
    HttpGreeting,
    HugeOptionReply,
    TlsRequired,
    NoExportInfo,
    WrongCookie,
    ShortRead,
    HugeDataChunk,
    HalfCoveredRead,
    ChunkOutsideRead,
    BadReplyMagic,
    Silent,
}

impl Evil {
    fn structured(self) -> bool {
        matches!(
            self,
            Self::HugeDataChunk | Self::HalfCoveredRead | Self::ChunkOutsideRead
        )
    }
}

fn opt_reply(s: &mut UnixStream, opt: u32, kind: u32, payload: &[u8]) {
    let mut b = OPT_REPLY.to_be_bytes().to_vec();
    b.extend_from_slice(&opt.to_be_bytes());
    b.extend_from_slice(&kind.to_be_bytes());
    b.extend_from_slice(&(payload.len() as u32).to_be_bytes());
    b.extend_from_slice(payload);
    let _ = s.write_all(&b);
}

/// The handshake; false when the evil was in it.
fn handshake(s: &mut UnixStream, evil: Evil) -> std::io::Result<bool> {
    if evil == Evil::HttpGreeting {
        s.write_all(b"HTTP/1.1 400 Bad Request\r\n\r\n")?;
        return Ok(false);
    }
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
        match (opt, evil) {
            (8, e) if e.structured() => opt_reply(s, 8, 1, &[]),
            (7, Evil::HugeOptionReply) => {
                let mut b = OPT_REPLY.to_be_bytes().to_vec();
                b.extend_from_slice(&7u32.to_be_bytes());
                b.extend_from_slice(&3u32.to_be_bytes());
                b.extend_from_slice(&u32::MAX.to_be_bytes());
                s.write_all(&b)?;
                return Ok(false);
            }
            (7, Evil::TlsRequired) => {
                opt_reply(s, 7, ERR + 5, b"TLS please");
                return Ok(false);
            }
            (7, Evil::NoExportInfo) => {
                opt_reply(s, 7, 1, &[]);
                return Ok(false);
            }
            (7, _) => {
                let mut info = 0u16.to_be_bytes().to_vec();
                info.extend_from_slice(&SIZE.to_be_bytes());
                info.extend_from_slice(&(1u16 | 4).to_be_bytes());
                opt_reply(s, 7, 3, &info);
                opt_reply(s, 7, 1, &[]);
                return Ok(true);
            }
            (o, _) => opt_reply(s, o, ERR + 1, &[]),
        }
    }
}

fn chunk(flags: u16, kind: u16, cookie: u64, payload: &[u8], len: u32) -> Vec<u8> {
    let mut b = STRUCTURED.to_be_bytes().to_vec();
    b.extend_from_slice(&flags.to_be_bytes());
    b.extend_from_slice(&kind.to_be_bytes());
    b.extend_from_slice(&cookie.to_be_bytes());
    b.extend_from_slice(&len.to_be_bytes());
    b.extend_from_slice(payload);
    b
}

/// Answers the first request as `evil` says, then waits for the client
/// to hang up.
fn transmission(s: &mut UnixStream, evil: Evil) -> std::io::Result<()> {
    let mut r = [0u8; 28];
    s.read_exact(&mut r)?;
    let cookie = u64::from_be_bytes(r[8..16].try_into().unwrap());
    let offset = u64::from_be_bytes(r[16..24].try_into().unwrap());
    let len = u32::from_be_bytes(r[24..28].try_into().unwrap());
    let simple = |err: u32, cookie: u64| {
        let mut b = SIMPLE.to_be_bytes().to_vec();
        b.extend_from_slice(&err.to_be_bytes());
        b.extend_from_slice(&cookie.to_be_bytes());
        b
    };
    let reply = match evil {
        Evil::WrongCookie => simple(0, cookie + 1000),
        Evil::ShortRead => [simple(0, cookie), vec![1u8; len as usize / 2]].concat(),
        Evil::BadReplyMagic => vec![0xde, 0xad, 0xbe, 0xef, 0, 0, 0, 0],
        Evil::HugeDataChunk => chunk(1, 1, cookie, &offset.to_be_bytes(), 0xffff_fff0),
        Evil::HalfCoveredRead => {
            let half = [offset.to_be_bytes().to_vec(), vec![2u8; len as usize / 2]].concat();
            chunk(1, 1, cookie, &half, half.len() as u32)
        }
        Evil::ChunkOutsideRead => {
            let p = [(offset + SIZE).to_be_bytes().to_vec(), vec![2u8; 16]].concat();
            chunk(1, 1, cookie, &p, p.len() as u32)
        }
        _ => Vec::new(),
    };
    s.write_all(&reply)?;
    let mut sink = [0u8; 4096];
    while s.read(&mut sink)? > 0 {}
    Ok(())
}

/// A fake server for `evil` serving a few connections in turn.
fn fake(evil: Evil) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("evil.sock");
    let listener = UnixListener::bind(&sock).unwrap();
    std::thread::spawn(move || {
        for conn in listener.incoming().take(4) {
            let Ok(mut s) = conn else { return };
            std::thread::spawn(move || {
                if handshake(&mut s, evil).unwrap_or(false) {
                    let _ = transmission(&mut s, evil);
                }
            });
        }
    });
    (dir, sock)
}

fn open(sock: &Path) -> std::io::Result<NbdDevice> {
    let uri = NbdUri::parse(&format!("nbd+unix:///?socket={}", sock.display())).unwrap();
    let opts = NbdOptions {
        timeout: Duration::from_secs(2),
        ..NbdOptions::default()
    };
    NbdDevice::open(&uri, opts)
}

fn open_error(evil: Evil) -> String {
    let (_dir, sock) = fake(evil);
    match open(&sock) {
        Ok(_) => panic!("{evil:?}: the handshake succeeded"),
        Err(e) => e.to_string(),
    }
}

fn read_error(evil: Evil) -> String {
    let (_dir, sock) = fake(evil);
    let dev = open(&sock).unwrap_or_else(|e| panic!("{evil:?}: {e}"));
    assert_eq!(dev.len(), SIZE);
    let mut buf = vec![0u8; 4096];
    let e = dev.read_at(0, &mut buf).expect_err("a hostile read succeeded");
    e.to_string()
}

fn assert_says(msg: &str, what: &str) {
    assert!(msg.contains(what), "expected `{what}` in: {msg}");
}

#[test]
fn handshake_breaches_are_named() {
    assert_says(&open_error(Evil::HttpGreeting), "not an NBD server");
    assert_says(&open_error(Evil::HugeOptionReply), "option reply of 4294967295 bytes");
    assert_says(&open_error(Evil::TlsRequired), "requires TLS");
    assert_says(&open_error(Evil::NoExportInfo), "without NBD_INFO_EXPORT");
}

#[test]
fn transmission_breaches_fail_the_request() {
    assert_says(&read_error(Evil::WrongCookie), "no request in flight holds");
    assert_says(&read_error(Evil::ShortRead), "closed the connection");
    assert_says(&read_error(Evil::BadReplyMagic), "bad magic 0xdeadbeef");
    assert_says(&read_error(Evil::HugeDataChunk), "data chunk of 4294967280 bytes");
    assert_says(&read_error(Evil::HalfCoveredRead), "covered only 2048");
    assert_says(&read_error(Evil::ChunkOutsideRead), "outside the read");
}

#[test]
fn a_silent_server_times_out() {
    assert_says(&read_error(Evil::Silent), "no reply within");
}
