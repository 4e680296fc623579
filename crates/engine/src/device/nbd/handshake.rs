//! The fixed newstyle handshake of one connection: greeting, client
//! flags, `NBD_OPT_STARTTLS` for an `nbds://` URI (the rest over TLS:
//! [`super::tls`]), then `NBD_OPT_STRUCTURED_REPLY`, `NBD_OPT_SET_META_CONTEXT`
//! (`base:allocation`, for `NBD_CMD_BLOCK_STATUS`) and `NBD_OPT_GO`, which
//! ends option haggling with the export's size, flags and block sizes.

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::os::unix::net::UnixStream;
use std::time::Duration;

use super::tls::{self, TlsStream};
use super::uri::{Endpoint, NbdUri};
use super::wire::{self, ExportInfo, WireError};

/// A connected socket, TCP or Unix, or a TLS session over one.
#[derive(Debug)]
pub enum Stream {
    /// Over TCP.
    Tcp(TcpStream),
    /// Over a Unix socket.
    Unix(UnixStream),
    /// TLS over either (after `NBD_OPT_STARTTLS`).
    Tls(TlsStream),
}

impl Stream {
    /// Connects to the URI's server.
    ///
    /// # Errors
    /// The OS error, with the address in the message.
    pub fn connect(uri: &NbdUri) -> io::Result<Self> {
        let s = match &uri.endpoint {
            Endpoint::Tcp { host, port } => {
                let s = TcpStream::connect((host.as_str(), *port));
                let s = s.map_err(|e| io::Error::new(e.kind(), format!("{uri}: cannot connect: {e}")))?;
                s.set_nodelay(true)?;
                Self::Tcp(s)
            }
            Endpoint::Unix(p) => {
                let s = UnixStream::connect(p);
                Self::Unix(s.map_err(|e| io::Error::new(e.kind(), format!("{uri}: cannot connect: {e}")))?)
            }
        };
        Ok(s)
    }

    /// Another handle on the same socket (the reader thread's).
    ///
    /// # Errors
    /// The OS error of `dup`.
    pub fn try_clone(&self) -> io::Result<Self> {
        Ok(match self {
            Self::Tcp(s) => Self::Tcp(s.try_clone()?),
            Self::Unix(s) => Self::Unix(s.try_clone()?),
            Self::Tls(s) => Self::Tls(s.try_clone()?),
        })
    }

    /// Ends both directions: a thread blocked reading it wakes.
    pub fn shutdown(&self) {
        let _ = match self {
            Self::Tcp(s) => s.shutdown(Shutdown::Both),
            Self::Unix(s) => s.shutdown(Shutdown::Both),
            Self::Tls(s) => {
                s.socket().shutdown();
                Ok(())
            }
        };
    }

    /// Bounds how long one read may block (`None`: for ever).
    ///
    /// # Errors
    /// The OS error of `setsockopt`.
    pub fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        match self {
            Self::Tcp(s) => s.set_read_timeout(t),
            Self::Unix(s) => s.set_read_timeout(t),
            Self::Tls(s) => s.socket().set_read_timeout(t),
        }
    }
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Self::Tcp(s) => s.read(buf),
            Self::Unix(s) => s.read(buf),
            Self::Tls(s) => s.read(buf),
        }
    }
}

impl Write for Stream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Self::Tcp(s) => s.write(buf),
            Self::Unix(s) => s.write(buf),
            Self::Tls(s) => s.write(buf),
        }
    }
    fn write_vectored(&mut self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        match self {
            Self::Tcp(s) => s.write_vectored(bufs),
            Self::Unix(s) => s.write_vectored(bufs),
            Self::Tls(s) => s.write_vectored(bufs),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        match self {
            Self::Tls(s) => s.flush(),
            _ => Ok(()),
        }
    }
}

/// What the handshake settled.
#[derive(Clone, Copy, Debug)]
pub struct Negotiated {
    /// Size, transmission flags, block sizes.
    pub info: ExportInfo,
    /// Replies may come as structured chunks.
    pub structured: bool,
    /// The context id of `base:allocation`, when the server offers it.
    pub allocation_context: Option<u32>,
}

/// Runs the handshake for the URI's export on a freshly connected `s`,
/// and returns the stream the transmission phase goes over (a TLS one
/// for an `nbds://` URI).
///
/// # Errors
/// A server that is not fixed newstyle NBD, refuses the export (TLS
/// required, no such export: named in the message), offers no TLS when
/// asked, fails the TLS handshake, or breaks the protocol; the socket's
/// I/O errors.
pub fn negotiate(mut s: Stream, uri: &NbdUri) -> io::Result<(Stream, Negotiated)> {
    let export = uri.export.as_str();
    let mut greeting = [0u8; 18];
    read_exact(&mut s, &mut greeting, "greeting")?;
    wire::parse_greeting(&greeting)?;
    s.write_all(&wire::CLIENT_FLAGS.to_be_bytes())?;
    if let Some(params) = &uri.tls {
        starttls(&mut s)?;
        s = tls::upgrade(s, uri, params)?;
    }
    let structured = simple_option(&mut s, wire::OPT_STRUCTURED_REPLY)?;
    let allocation_context = if structured {
        meta_context(&mut s, export)?
    } else {
        None
    };
    let info = go(&mut s, export)?;
    let negotiated = Negotiated {
        info,
        structured,
        allocation_context,
    };
    Ok((s, negotiated))
}

/// `NBD_OPT_STARTTLS`: an acknowledgement (with no payload) means the
/// next bytes on the socket are the TLS handshake.
fn starttls(s: &mut Stream) -> io::Result<()> {
    s.write_all(&wire::encode_option(wire::OPT_STARTTLS, &[]))?;
    let (r, p) = reply(s, wire::OPT_STARTTLS)?;
    match r.reply {
        wire::REP_ACK if p.is_empty() => Ok(()),
        wire::REP_ACK => Err(WireError::Invalid(format!(
            "NBD_OPT_STARTTLS acknowledged with {} bytes of payload, not none",
            p.len()
        ))
        .into()),
        e if wire::is_rep_err(e) => {
            let msg = wire::error_message(&p);
            let msg = if msg.is_empty() { msg } else { format!(" ({msg})") };
            Err(io::Error::new(
                io::ErrorKind::Unsupported,
                format!(
                    "NBD: the server does not offer TLS: NBD_OPT_STARTTLS refused: {}{msg}",
                    wire::rep_err_name(e)
                ),
            ))
        }
        other => Err(WireError::Invalid(format!("NBD_OPT_STARTTLS: unexpected reply type {other}")).into()),
    }
}

fn read_exact(s: &mut Stream, buf: &mut [u8], what: &str) -> io::Result<()> {
    s.read_exact(buf).map_err(|e| {
        let why = if e.kind() == io::ErrorKind::UnexpectedEof {
            "the server closed the connection".to_string()
        } else {
            e.to_string()
        };
        io::Error::new(e.kind(), format!("NBD handshake: reading the {what}: {why}"))
    })
}

/// One option reply: header and (bounded) payload.
fn reply(s: &mut Stream, option: u32) -> io::Result<(wire::OptReply, Vec<u8>)> {
    let mut h = [0u8; 20];
    read_exact(s, &mut h, "option reply")?;
    let r = wire::parse_opt_reply(&h, option)?;
    let mut payload = vec![0u8; r.len as usize];
    read_exact(s, &mut payload, "option reply payload")?;
    Ok((r, payload))
}

/// Sends an option with no data; true when acknowledged, false when the
/// server does not support it.
fn simple_option(s: &mut Stream, option: u32) -> io::Result<bool> {
    s.write_all(&wire::encode_option(option, &[]))?;
    let (r, p) = reply(s, option)?;
    if r.reply == wire::REP_ERR_TLS_REQD {
        return Err(WireError::OptionRefused {
            option,
            reply: r.reply,
            message: wire::error_message(&p),
        }
        .into());
    }
    Ok(r.reply == wire::REP_ACK)
}

fn meta_context(s: &mut Stream, export: &str) -> io::Result<Option<u32>> {
    s.write_all(&wire::encode_option(
        wire::OPT_SET_META_CONTEXT,
        &wire::encode_set_meta_context(export)?,
    ))?;
    let mut id = None;
    for _ in 0..16 {
        let (r, p) = reply(s, wire::OPT_SET_META_CONTEXT)?;
        match r.reply {
            wire::REP_META_CONTEXT if p.len() >= 4 => id = Some(wire::be32(&p)),
            wire::REP_META_CONTEXT => {
                return Err(WireError::TooShort {
                    what: "NBD_REP_META_CONTEXT",
                    len: p.len(),
                }
                .into());
            }
            r if wire::is_rep_err(r) || r == wire::REP_ACK => return Ok(id),
            _ => {}
        }
    }
    Err(WireError::Invalid("NBD_OPT_SET_META_CONTEXT: more replies than contexts asked".into()).into())
}

fn go(s: &mut Stream, export: &str) -> io::Result<ExportInfo> {
    s.write_all(&wire::encode_option(wire::OPT_GO, &wire::encode_go(export)?))?;
    let mut info = ExportInfo::default();
    let mut got_export = false;
    for _ in 0..64 {
        let (r, p) = reply(s, wire::OPT_GO)?;
        if wire::is_rep_err(r.reply) {
            return Err(WireError::OptionRefused {
                option: wire::OPT_GO,
                reply: r.reply,
                message: wire::error_message(&p),
            }
            .into());
        }
        match r.reply {
            wire::REP_INFO => {
                wire::parse_info(&p, &mut info)?;
                got_export |= p.get(..2) == Some(&wire::INFO_EXPORT.to_be_bytes());
            }
            wire::REP_ACK if got_export => return Ok(info),
            wire::REP_ACK => {
                return Err(WireError::Invalid("NBD_OPT_GO acknowledged without NBD_INFO_EXPORT".into()).into());
            }
            other => return Err(WireError::Invalid(format!("NBD_OPT_GO: unexpected reply type {other}")).into()),
        }
    }
    Err(WireError::Invalid("NBD_OPT_GO: endless info replies".into()).into())
}
