//! The NBD protocol's messages as bytes, both ways, with no I/O: the fixed
//! newstyle handshake (greeting, options, option replies, `NBD_INFO_*`
//! payloads) and the transmission phase (requests, simple replies,
//! structured reply chunks). Everything is big-endian (network order), as
//! the protocol document (`doc/proto.md` of the reference `nbd` project)
//! lays it out.
//!
//! What a server sends is untrusted: every length is checked against a
//! bound before anything is allocated for it, and a message that breaks
//! the protocol is a [`WireError`] naming what was wrong.

use std::fmt;
use std::io;

/// `"NBDMAGIC"`: the first eight bytes a server sends.
pub const NBDMAGIC: u64 = 0x4e42_444d_4147_4943;
/// `"IHAVEOPT"`: the newstyle greeting's second word, and the start of
/// every option the client sends.
pub const IHAVEOPT: u64 = 0x4948_4156_454f_5054;
/// Starts every option reply.
pub const OPT_REPLY_MAGIC: u64 = 0x0003_e889_0455_65a9;
/// Starts every request.
pub const REQUEST_MAGIC: u32 = 0x2560_9513;
/// Starts a simple reply.
pub const SIMPLE_REPLY_MAGIC: u32 = 0x6744_6698;
/// Starts a structured reply chunk.
pub const STRUCTURED_REPLY_MAGIC: u32 = 0x668e_33ef;

/// Handshake flag: the server speaks fixed newstyle.
pub const FLAG_FIXED_NEWSTYLE: u16 = 1 << 0;
/// Handshake flag: the server can skip the 124 zero bytes of
/// `NBD_OPT_EXPORT_NAME`.
pub const FLAG_NO_ZEROES: u16 = 1 << 1;
/// Client flags sent back: fixed newstyle, no zeroes.
pub const CLIENT_FLAGS: u32 = 0b11;

/// `NBD_OPT_ABORT`.
pub const OPT_ABORT: u32 = 2;
/// `NBD_OPT_STARTTLS`: the rest of the connection goes over TLS.
pub const OPT_STARTTLS: u32 = 5;
/// `NBD_OPT_GO`.
pub const OPT_GO: u32 = 7;
/// `NBD_OPT_STRUCTURED_REPLY`.
pub const OPT_STRUCTURED_REPLY: u32 = 8;
/// `NBD_OPT_SET_META_CONTEXT`.
pub const OPT_SET_META_CONTEXT: u32 = 10;

/// `NBD_REP_ACK`.
pub const REP_ACK: u32 = 1;
/// `NBD_REP_INFO`.
pub const REP_INFO: u32 = 3;
/// `NBD_REP_META_CONTEXT`.
pub const REP_META_CONTEXT: u32 = 4;
const REP_ERR: u32 = 1 << 31;
/// `NBD_REP_ERR_TLS_REQD`: the server answers nothing but TLS.
pub const REP_ERR_TLS_REQD: u32 = REP_ERR + 5;

/// `NBD_INFO_EXPORT`: size and transmission flags.
pub const INFO_EXPORT: u16 = 0;
/// `NBD_INFO_BLOCK_SIZE`: minimum, preferred and maximum block sizes.
pub const INFO_BLOCK_SIZE: u16 = 3;

/// Transmission flags (`NBD_FLAG_*` of `NBD_INFO_EXPORT`).
pub mod tflags {
    /// The export refuses writes.
    pub const READ_ONLY: u16 = 1 << 1;
    /// `NBD_CMD_FLUSH` is understood.
    pub const SEND_FLUSH: u16 = 1 << 2;
    /// `NBD_CMD_FLAG_FUA` is understood.
    pub const SEND_FUA: u16 = 1 << 3;
    /// `NBD_CMD_TRIM` is understood.
    pub const SEND_TRIM: u16 = 1 << 5;
    /// `NBD_CMD_WRITE_ZEROES` is understood.
    pub const SEND_WRITE_ZEROES: u16 = 1 << 6;
    /// Several connections see one another's writes.
    pub const CAN_MULTI_CONN: u16 = 1 << 8;
}

/// Request types (`NBD_CMD_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u16)]
pub enum Cmd {
    /// `NBD_CMD_READ`.
    Read = 0,
    /// `NBD_CMD_WRITE`.
    Write = 1,
    /// `NBD_CMD_DISC`: the client leaves.
    Disc = 2,
    /// `NBD_CMD_FLUSH`.
    Flush = 3,
    /// `NBD_CMD_TRIM`.
    Trim = 4,
    /// `NBD_CMD_WRITE_ZEROES`.
    WriteZeroes = 6,
    /// `NBD_CMD_BLOCK_STATUS`.
    BlockStatus = 7,
}

/// `NBD_CMD_FLAG_FUA`: the write is durable before it is acknowledged.
pub const CMD_FLAG_FUA: u16 = 1 << 0;

/// `NBD_REPLY_FLAG_DONE`: the last chunk of a structured reply.
pub const REPLY_FLAG_DONE: u16 = 1 << 0;
/// `NBD_REPLY_TYPE_NONE`.
pub const REPLY_TYPE_NONE: u16 = 0;
/// `NBD_REPLY_TYPE_OFFSET_DATA`.
pub const REPLY_TYPE_OFFSET_DATA: u16 = 1;
/// `NBD_REPLY_TYPE_OFFSET_HOLE`.
pub const REPLY_TYPE_OFFSET_HOLE: u16 = 2;
/// `NBD_REPLY_TYPE_BLOCK_STATUS`.
pub const REPLY_TYPE_BLOCK_STATUS: u16 = 5;
const REPLY_TYPE_ERROR_BIT: u16 = 1 << 15;

/// Longest option reply payload taken: info, meta context and error
/// replies hold at most a 4096-byte string and a few words.
pub const MAX_OPT_REPLY: u32 = 8 << 10;
/// Longest non-data structured chunk taken (an error message is at most
/// 4096 bytes; block status descriptors are 8 bytes each).
pub const MAX_CHUNK_META: u32 = 64 << 10;
/// The protocol's longest string (export names, messages).
pub const MAX_STRING: usize = 4096;

/// A protocol breach by the server (or a server this client cannot use).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WireError {
    /// The first bytes were not `NBDMAGIC` then `IHAVEOPT`.
    BadGreeting {
        /// What came instead.
        magic: u64,
    },
    /// An old-style or non-fixed newstyle server.
    NotFixedNewstyle,
    /// An option reply whose magic was wrong.
    BadOptReplyMagic(u64),
    /// An option reply to another option than the one asked.
    WrongOption {
        /// The option sent.
        asked: u32,
        /// The option the reply named.
        got: u32,
    },
    /// A length beyond what the message may hold.
    TooLong {
        /// Which message or field.
        what: &'static str,
        /// The length the server sent.
        len: u64,
        /// The bound.
        max: u64,
    },
    /// A payload shorter than its kind needs.
    TooShort {
        /// Which message.
        what: &'static str,
        /// The length the server sent.
        len: usize,
    },
    /// A reply whose magic is neither simple nor structured.
    BadReplyMagic(u32),
    /// The server refused an option.
    OptionRefused {
        /// The option.
        option: u32,
        /// `NBD_REP_ERR_*` (bit 31 set).
        reply: u32,
        /// The server's message, if any.
        message: String,
    },
    /// A reply that breaks the protocol in some other way.
    Invalid(String),
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::BadGreeting { magic } => write!(f, "not an NBD server: greeting begins {magic:#018x}, not NBDMAGIC"),
            Self::NotFixedNewstyle => f.write_str("the server does not speak the fixed newstyle handshake"),
            Self::BadOptReplyMagic(m) => write!(f, "option reply with bad magic {m:#x}"),
            Self::WrongOption { asked, got } => write!(f, "reply to option {got} while option {asked} was asked"),
            Self::TooLong { what, len, max } => write!(f, "{what} of {len} bytes (at most {max} allowed)"),
            Self::TooShort { what, len } => write!(f, "{what} of only {len} bytes"),
            Self::BadReplyMagic(m) => write!(f, "reply with bad magic {m:#010x}"),
            Self::OptionRefused { option, reply, message } => {
                write!(f, "option {} refused: {}", option_name(*option), rep_err_name(*reply))?;
                if !message.is_empty() {
                    write!(f, " ({message})")?;
                }
                Ok(())
            }
            Self::Invalid(s) => f.write_str(s),
        }
    }
}

impl std::error::Error for WireError {}

impl From<WireError> for io::Error {
    fn from(e: WireError) -> Self {
        let kind = match &e {
            WireError::OptionRefused { reply, .. } if *reply == REP_ERR_TLS_REQD => io::ErrorKind::PermissionDenied,
            WireError::OptionRefused { reply, .. } if *reply == REP_ERR + 6 => io::ErrorKind::NotFound,
            _ => io::ErrorKind::InvalidData,
        };
        io::Error::new(kind, format!("NBD: {e}"))
    }
}

fn option_name(o: u32) -> String {
    match o {
        OPT_GO => "NBD_OPT_GO".into(),
        OPT_STARTTLS => "NBD_OPT_STARTTLS".into(),
        OPT_STRUCTURED_REPLY => "NBD_OPT_STRUCTURED_REPLY".into(),
        OPT_SET_META_CONTEXT => "NBD_OPT_SET_META_CONTEXT".into(),
        o => format!("{o}"),
    }
}

/// Names an `NBD_REP_ERR_*` value for people.
pub fn rep_err_name(r: u32) -> String {
    match r.wrapping_sub(REP_ERR) {
        1 => "unsupported by the server".into(),
        2 => "forbidden by the server's policy".into(),
        3 => "invalid".into(),
        4 => "unsupported on the server's platform".into(),
        5 => "the server requires TLS: use an nbds:// URI (nbds+unix:// for a Unix socket)".into(),
        6 => "no such export".into(),
        7 => "the server is shutting down".into(),
        8 => "the server requires block-size negotiation".into(),
        9 => "request too big".into(),
        n => format!("error {n}"),
    }
}

/// Whether an option reply type is an error (`NBD_REP_ERR_*`).
pub fn is_rep_err(reply: u32) -> bool {
    reply & REP_ERR != 0
}

/// Checks the 18-byte greeting (`NBDMAGIC`, `IHAVEOPT`, handshake flags)
/// and returns the handshake flags.
///
/// # Errors
/// [`WireError::BadGreeting`] for another magic (an oldstyle server sends
/// its own second word), [`WireError::NotFixedNewstyle`].
pub fn parse_greeting(b: &[u8; 18]) -> Result<u16, WireError> {
    let magic = be64(&b[0..8]);
    if magic != NBDMAGIC {
        return Err(WireError::BadGreeting { magic });
    }
    let second = be64(&b[8..16]);
    if second != IHAVEOPT {
        return Err(WireError::BadGreeting { magic: second });
    }
    let flags = be16(&b[16..18]);
    if flags & FLAG_FIXED_NEWSTYLE == 0 {
        return Err(WireError::NotFixedNewstyle);
    }
    Ok(flags)
}

/// An option the client sends: `IHAVEOPT`, option, length, data.
pub fn encode_option(option: u32, data: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(16 + data.len());
    v.extend_from_slice(&IHAVEOPT.to_be_bytes());
    v.extend_from_slice(&option.to_be_bytes());
    v.extend_from_slice(&(data.len() as u32).to_be_bytes());
    v.extend_from_slice(data);
    v
}

/// `NBD_OPT_GO`'s data: the export name and the info requests
/// (`NBD_INFO_BLOCK_SIZE`, so the server knows the client honours it).
///
/// # Errors
/// [`WireError::TooLong`] for a name past the protocol's 4096 bytes.
pub fn encode_go(export: &str) -> Result<Vec<u8>, WireError> {
    check_string("export name", export)?;
    let mut v = Vec::with_capacity(8 + export.len());
    v.extend_from_slice(&(export.len() as u32).to_be_bytes());
    v.extend_from_slice(export.as_bytes());
    v.extend_from_slice(&1u16.to_be_bytes());
    v.extend_from_slice(&INFO_BLOCK_SIZE.to_be_bytes());
    Ok(v)
}

/// `NBD_OPT_SET_META_CONTEXT`'s data asking for `base:allocation` on
/// `export`.
///
/// # Errors
/// As [`encode_go`].
pub fn encode_set_meta_context(export: &str) -> Result<Vec<u8>, WireError> {
    check_string("export name", export)?;
    let query = b"base:allocation";
    let mut v = Vec::new();
    v.extend_from_slice(&(export.len() as u32).to_be_bytes());
    v.extend_from_slice(export.as_bytes());
    v.extend_from_slice(&1u32.to_be_bytes());
    v.extend_from_slice(&(query.len() as u32).to_be_bytes());
    v.extend_from_slice(query);
    Ok(v)
}

fn check_string(what: &'static str, s: &str) -> Result<(), WireError> {
    if s.len() > MAX_STRING {
        return Err(WireError::TooLong {
            what,
            len: s.len() as u64,
            max: MAX_STRING as u64,
        });
    }
    Ok(())
}

/// The fixed 20 bytes of an option reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OptReply {
    /// The option replied to.
    pub option: u32,
    /// `NBD_REP_*`.
    pub reply: u32,
    /// Payload length, already bounded by [`MAX_OPT_REPLY`].
    pub len: u32,
}

/// Parses an option reply header sent in answer to `asked`.
///
/// # Errors
/// Bad magic, a reply to another option, a payload past [`MAX_OPT_REPLY`].
pub fn parse_opt_reply(b: &[u8; 20], asked: u32) -> Result<OptReply, WireError> {
    let magic = be64(&b[0..8]);
    if magic != OPT_REPLY_MAGIC {
        return Err(WireError::BadOptReplyMagic(magic));
    }
    let r = OptReply {
        option: be32(&b[8..12]),
        reply: be32(&b[12..16]),
        len: be32(&b[16..20]),
    };
    if r.option != asked {
        return Err(WireError::WrongOption { asked, got: r.option });
    }
    if r.len > MAX_OPT_REPLY {
        return Err(WireError::TooLong {
            what: "option reply",
            len: r.len.into(),
            max: MAX_OPT_REPLY.into(),
        });
    }
    Ok(r)
}

/// What `NBD_REP_INFO` replies say about an export.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ExportInfo {
    /// Size in bytes.
    pub size: u64,
    /// Transmission flags ([`tflags`]).
    pub flags: u16,
    /// Minimum, preferred and maximum block sizes, when the server said.
    pub block_size: Option<BlockSizes>,
}

/// `NBD_INFO_BLOCK_SIZE`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockSizes {
    /// Requests are aligned to and a multiple of this.
    pub min: u32,
    /// The size the server serves best.
    pub preferred: u32,
    /// The largest payload a request may carry.
    pub max: u32,
}

/// Folds one `NBD_REP_INFO` payload into `info`; unknown info types are
/// skipped, as the protocol asks.
///
/// # Errors
/// A payload too short for its type; block sizes that are not powers of
/// two or out of order.
pub fn parse_info(payload: &[u8], info: &mut ExportInfo) -> Result<(), WireError> {
    if payload.len() < 2 {
        return Err(WireError::TooShort {
            what: "NBD_REP_INFO",
            len: payload.len(),
        });
    }
    match be16(&payload[0..2]) {
        INFO_EXPORT => {
            if payload.len() != 12 {
                return Err(WireError::TooShort {
                    what: "NBD_INFO_EXPORT",
                    len: payload.len(),
                });
            }
            info.size = be64(&payload[2..10]);
            info.flags = be16(&payload[10..12]);
        }
        INFO_BLOCK_SIZE => {
            if payload.len() != 14 {
                return Err(WireError::TooShort {
                    what: "NBD_INFO_BLOCK_SIZE",
                    len: payload.len(),
                });
            }
            let b = BlockSizes {
                min: be32(&payload[2..6]),
                preferred: be32(&payload[6..10]),
                max: be32(&payload[10..14]),
            };
            let pow2 = b.min.is_power_of_two() && b.preferred.is_power_of_two();
            if !pow2 || b.min > 65536 || b.preferred < b.min || b.max < b.min {
                return Err(WireError::Invalid(format!(
                    "NBD_INFO_BLOCK_SIZE minimum {} preferred {} maximum {} are not valid block sizes",
                    b.min, b.preferred, b.max
                )));
            }
            info.block_size = Some(b);
        }
        _ => {}
    }
    Ok(())
}

/// The message in an option error reply, lossily decoded.
pub fn error_message(payload: &[u8]) -> String {
    String::from_utf8_lossy(&payload[..payload.len().min(MAX_STRING)]).into_owned()
}

/// A request's 28-byte header; a write's data follows it.
pub fn encode_request(flags: u16, cmd: Cmd, cookie: u64, offset: u64, len: u32) -> [u8; 28] {
    let mut b = [0u8; 28];
    b[0..4].copy_from_slice(&REQUEST_MAGIC.to_be_bytes());
    b[4..6].copy_from_slice(&flags.to_be_bytes());
    b[6..8].copy_from_slice(&(cmd as u16).to_be_bytes());
    b[8..16].copy_from_slice(&cookie.to_be_bytes());
    b[16..24].copy_from_slice(&offset.to_be_bytes());
    b[24..28].copy_from_slice(&len.to_be_bytes());
    b
}

/// The kind of reply a 4-byte magic announces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplyKind {
    /// 12 more bytes: error, cookie; a successful read's data follows.
    Simple,
    /// 16 more bytes: flags, type, cookie, length; the payload follows.
    Structured,
}

/// Tells a simple reply from a structured chunk by its magic.
///
/// # Errors
/// [`WireError::BadReplyMagic`].
pub fn reply_kind(magic: [u8; 4]) -> Result<ReplyKind, WireError> {
    match u32::from_be_bytes(magic) {
        SIMPLE_REPLY_MAGIC => Ok(ReplyKind::Simple),
        STRUCTURED_REPLY_MAGIC => Ok(ReplyKind::Structured),
        m => Err(WireError::BadReplyMagic(m)),
    }
}

/// The rest of a simple reply: `(error, cookie)`.
pub fn parse_simple(b: &[u8; 12]) -> (u32, u64) {
    (be32(&b[0..4]), be64(&b[4..12]))
}

/// The rest of a structured chunk header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Chunk {
    /// `NBD_REPLY_FLAG_*`.
    pub flags: u16,
    /// `NBD_REPLY_TYPE_*`.
    pub kind: u16,
    /// The request's cookie.
    pub cookie: u64,
    /// Payload length (not yet bounded: that depends on the request).
    pub len: u32,
}

/// Parses the 16 bytes after a structured reply's magic.
pub fn parse_chunk(b: &[u8; 16]) -> Chunk {
    Chunk {
        flags: be16(&b[0..2]),
        kind: be16(&b[2..4]),
        cookie: be64(&b[4..12]),
        len: be32(&b[12..16]),
    }
}

/// Whether a chunk type is an error (`NBD_REPLY_TYPE_ERROR*`).
pub fn is_error_chunk(kind: u16) -> bool {
    kind & REPLY_TYPE_ERROR_BIT != 0
}

/// An error chunk's payload: the error number and message.
///
/// # Errors
/// A payload too short for its message length.
pub fn parse_error_chunk(p: &[u8]) -> Result<(u32, String), WireError> {
    let short = || WireError::TooShort {
        what: "error chunk",
        len: p.len(),
    };
    if p.len() < 6 {
        return Err(short());
    }
    let msg_len = usize::from(be16(&p[4..6]));
    let msg = p.get(6..6 + msg_len).ok_or_else(short)?;
    Ok((be32(&p[0..4]), error_message(msg)))
}

/// The errno an NBD error number stands for (`NBD_E*` use Linux's
/// numbers); one this client does not know is EIO.
pub fn errno(nbd_error: u32) -> i32 {
    match nbd_error {
        1 => libc::EPERM,
        5 => libc::EIO,
        12 => libc::ENOMEM,
        22 => libc::EINVAL,
        28 => libc::ENOSPC,
        75 => libc::EOVERFLOW,
        95 => libc::EOPNOTSUPP,
        108 => libc::ESHUTDOWN,
        _ => libc::EIO,
    }
}

/// A big-endian u16 from the first two bytes of `b`.
pub fn be16(b: &[u8]) -> u16 {
    u16::from_be_bytes([b[0], b[1]])
}

/// A big-endian u32 from the first four bytes of `b`.
pub fn be32(b: &[u8]) -> u32 {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]])
}

/// A big-endian u64 from the first eight bytes of `b`.
pub fn be64(b: &[u8]) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[..8]);
    u64::from_be_bytes(a)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn greeting(flags: u16) -> [u8; 18] {
        let mut b = [0u8; 18];
        b[0..8].copy_from_slice(&NBDMAGIC.to_be_bytes());
        b[8..16].copy_from_slice(&IHAVEOPT.to_be_bytes());
        b[16..18].copy_from_slice(&flags.to_be_bytes());
        b
    }

    #[test]
    fn greeting_is_checked() {
        assert_eq!(parse_greeting(&greeting(3)), Ok(3));
        assert_eq!(parse_greeting(&greeting(2)), Err(WireError::NotFixedNewstyle));
        let mut old = greeting(1);
        old[8..16].copy_from_slice(&0x0000_4202_8186_1253u64.to_be_bytes());
        assert!(matches!(parse_greeting(&old), Err(WireError::BadGreeting { .. })));
        let mut http = greeting(1);
        http[..8].copy_from_slice(b"HTTP/1.1");
        let e = io::Error::from(parse_greeting(&http).unwrap_err());
        assert!(e.to_string().contains("not an NBD server"), "{e}");
    }

    #[test]
    fn option_reply_lengths_are_bounded() {
        let mut b = [0u8; 20];
        b[0..8].copy_from_slice(&OPT_REPLY_MAGIC.to_be_bytes());
        b[8..12].copy_from_slice(&OPT_GO.to_be_bytes());
        b[12..16].copy_from_slice(&REP_INFO.to_be_bytes());
        b[16..20].copy_from_slice(&12u32.to_be_bytes());
        assert_eq!(parse_opt_reply(&b, OPT_GO).unwrap().len, 12);
        assert!(matches!(
            parse_opt_reply(&b, OPT_ABORT),
            Err(WireError::WrongOption { .. })
        ));
        b[16..20].copy_from_slice(&u32::MAX.to_be_bytes());
        assert!(matches!(parse_opt_reply(&b, OPT_GO), Err(WireError::TooLong { .. })));
        b[0] ^= 1;
        assert!(matches!(
            parse_opt_reply(&b, OPT_GO),
            Err(WireError::BadOptReplyMagic(_))
        ));
    }

    #[test]
    fn info_payloads() {
        let mut info = ExportInfo::default();
        let mut exp = INFO_EXPORT.to_be_bytes().to_vec();
        exp.extend_from_slice(&(64u64 << 20).to_be_bytes());
        exp.extend_from_slice(&(tflags::SEND_FLUSH | 1).to_be_bytes());
        parse_info(&exp, &mut info).unwrap();
        assert_eq!((info.size, info.flags), (64 << 20, 5));
        let mut bs = INFO_BLOCK_SIZE.to_be_bytes().to_vec();
        for v in [512u32, 4096, 32 << 20] {
            bs.extend_from_slice(&v.to_be_bytes());
        }
        parse_info(&bs, &mut info).unwrap();
        assert_eq!(info.block_size.unwrap().preferred, 4096);
        bs[6..10].copy_from_slice(&3000u32.to_be_bytes());
        assert!(matches!(parse_info(&bs, &mut info), Err(WireError::Invalid(_))));
        assert!(parse_info(&exp[..7], &mut info).is_err());
        assert!(parse_info(&[0], &mut info).is_err());
        parse_info(&[0, 9, 1, 2, 3], &mut info).unwrap();
    }

    #[test]
    fn request_and_replies_round_trip() {
        let r = encode_request(CMD_FLAG_FUA, Cmd::Write, 7, 4096, 512);
        assert_eq!(be32(&r[0..4]), REQUEST_MAGIC);
        assert_eq!((be16(&r[4..6]), be16(&r[6..8])), (1, 1));
        assert_eq!((be64(&r[8..16]), be64(&r[16..24]), be32(&r[24..28])), (7, 4096, 512));
        assert_eq!(reply_kind(SIMPLE_REPLY_MAGIC.to_be_bytes()), Ok(ReplyKind::Simple));
        assert_eq!(
            reply_kind(STRUCTURED_REPLY_MAGIC.to_be_bytes()),
            Ok(ReplyKind::Structured)
        );
        assert!(reply_kind(*b"HTTP").is_err());
        let mut e = 22u32.to_be_bytes().to_vec();
        e.extend_from_slice(&3u16.to_be_bytes());
        e.extend_from_slice(b"bad");
        assert_eq!(parse_error_chunk(&e), Ok((22, "bad".into())));
        e[5] = 200;
        assert!(parse_error_chunk(&e).is_err());
        assert_eq!(errno(28), libc::ENOSPC);
        assert_eq!(errno(9999), libc::EIO);
    }

    #[test]
    fn tls_refusal_names_tls() {
        let e = WireError::OptionRefused {
            option: OPT_GO,
            reply: REP_ERR + 5,
            message: String::new(),
        };
        assert!(e.to_string().contains("requires TLS"), "{e}");
        assert_eq!(io::Error::from(e).kind(), io::ErrorKind::PermissionDenied);
    }
}
