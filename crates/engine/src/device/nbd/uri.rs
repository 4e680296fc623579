//! NBD URIs as qemu and nbdkit write them: `nbd://host[:port][/export]`
//! over TCP (port 10809 by default) and `nbd+unix:///[export]?socket=PATH`
//! over a Unix socket; `nbds://` and `nbds+unix://` for the same over TLS,
//! with libnbd's query parameters for credentials: `tls-certificates=DIR`
//! (`ca-cert.pem`, optionally `client-cert.pem` and `client-key.pem`, as
//! nbdkit and qemu name them), `tls-verify-peer=false`, `tls-hostname=NAME`.
//! `tls-psk-file` is refused: rustls has no external pre-shared keys.

use std::fmt;
use std::io;
use std::path::PathBuf;

/// The IANA port of NBD.
pub const DEFAULT_PORT: u16 = 10809;

/// Where an export is served.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Endpoint {
    /// A TCP host (name, IPv4, or IPv6 without brackets) and port.
    Tcp {
        /// Host name or address.
        host: String,
        /// Port.
        port: u16,
    },
    /// A Unix socket path.
    Unix(PathBuf),
}

/// How to speak TLS with the server (`nbds://`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsParams {
    /// `tls-certificates=DIR`: `ca-cert.pem` to verify the server with,
    /// and a client certificate if `client-cert.pem` is there. `None`:
    /// the system's trusted CAs.
    pub certificates: Option<PathBuf>,
    /// `tls-verify-peer=false` turns verification of the server off.
    pub verify_peer: bool,
    /// `tls-hostname=NAME`: the name the server's certificate must bear
    /// (default: the URI's host; `localhost` over a Unix socket).
    pub hostname: Option<String>,
}

impl Default for TlsParams {
    fn default() -> Self {
        Self {
            certificates: None,
            verify_peer: true,
            hostname: None,
        }
    }
}

/// A parsed NBD URI.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NbdUri {
    /// The server.
    pub endpoint: Endpoint,
    /// The export name (empty: the server's default export).
    pub export: String,
    /// TLS (`nbds://`), or none.
    pub tls: Option<TlsParams>,
}

impl fmt::Display for NbdUri {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = if self.tls.is_some() { "s" } else { "" };
        match &self.endpoint {
            Endpoint::Tcp { host, port } if host.contains(':') => {
                write!(f, "nbd{s}://[{host}]:{port}/{}", self.export)
            }
            Endpoint::Tcp { host, port } => write!(f, "nbd{s}://{host}:{port}/{}", self.export),
            Endpoint::Unix(p) => write!(f, "nbd{s}+unix:///{}?socket={}", self.export, p.display()),
        }
    }
}

/// Whether `s` is meant as an NBD URI (so a command treats it as one,
/// and reports a malformed one instead of looking for a file).
pub fn is_nbd_uri(s: &str) -> bool {
    [
        "nbd://",
        "nbd+unix://",
        "nbd+tcp://",
        "nbds://",
        "nbds+unix://",
        "nbds+tcp://",
    ]
    .iter()
    .any(|p| s.starts_with(p))
}

impl NbdUri {
    /// Whether TLS is asked for with the server's certificate unchecked
    /// (`tls-verify-peer=false`): front ends warn about it.
    pub fn tls_unverified(&self) -> bool {
        self.tls.as_ref().is_some_and(|t| !t.verify_peer)
    }

    /// Parses `nbd://…`, `nbd+unix://…` and their `nbds` (TLS) forms.
    ///
    /// # Errors
    /// [`io::ErrorKind::InvalidInput`] naming what is wrong: another
    /// scheme, a bad port, a Unix URI with a host or without `socket=`, a
    /// TLS parameter without TLS or with a bad value, TLS-PSK.
    pub fn parse(s: &str) -> io::Result<Self> {
        let bad = |why: &str| io::Error::new(io::ErrorKind::InvalidInput, format!("{s}: {why}"));
        let (scheme, rest) = s.split_once("://").ok_or_else(|| bad("not an NBD URI"))?;
        let tls = match scheme {
            "nbds" | "nbds+unix" | "nbds+tcp" => true,
            "nbd" | "nbd+tcp" | "nbd+unix" => false,
            _ => return Err(bad("not an NBD URI (nbd://, nbd+unix://, nbds://, nbds+unix://)")),
        };
        let (before_query, query) = match rest.split_once('?') {
            Some((a, q)) => (a, Some(q)),
            None => (rest, None),
        };
        let (authority, path) = match before_query.find('/') {
            Some(i) => (&before_query[..i], &before_query[i + 1..]),
            None => (before_query, ""),
        };
        let export = percent_decode(path).ok_or_else(|| bad("bad %-escape in the export name"))?;
        let params: Vec<(&str, &str)> = query
            .into_iter()
            .flat_map(|q| q.split('&'))
            .filter(|kv| !kv.is_empty())
            .map(|kv| kv.split_once('=').unwrap_or((kv, "")))
            .collect();
        let tls = tls_params(tls, &params).map_err(|why| bad(&why))?;
        let endpoint = if scheme.ends_with("+unix") {
            if !authority.is_empty() {
                return Err(bad(
                    "a Unix-socket URI has no host: write nbd+unix:///EXPORT?socket=PATH",
                ));
            }
            let socket = params
                .iter()
                .find_map(|(k, v)| (*k == "socket").then_some(*v))
                .ok_or_else(|| bad("no socket=PATH in the query"))?;
            let socket = percent_decode(socket).ok_or_else(|| bad("bad %-escape in the socket path"))?;
            Endpoint::Unix(PathBuf::from(socket))
        } else {
            tcp_endpoint(authority).map_err(|why| bad(&why))?
        };
        Ok(Self { endpoint, export, tls })
    }
}

/// The `tls-*` query parameters (libnbd's names), for a TLS URI only.
fn tls_params(tls: bool, params: &[(&str, &str)]) -> Result<Option<TlsParams>, String> {
    let mut t = TlsParams::default();
    for (k, v) in params {
        if !k.starts_with("tls-") {
            continue;
        }
        if !tls {
            return Err(format!("{k} is a TLS parameter: write nbds:// (or nbds+unix://)"));
        }
        let v = percent_decode(v).ok_or_else(|| format!("bad %-escape in {k}"))?;
        match *k {
            "tls-certificates" => t.certificates = Some(PathBuf::from(v)),
            "tls-verify-peer" => {
                t.verify_peer = match v.as_str() {
                    "true" | "1" | "on" | "yes" => true,
                    "false" | "0" | "off" | "no" => false,
                    _ => return Err(format!("tls-verify-peer={v}: say true or false")),
                }
            }
            "tls-hostname" => t.hostname = Some(v),
            "tls-psk-file" | "tls-username" => {
                return Err(format!(
                    "{k}: TLS-PSK is not supported: rustls, the TLS library used, has no external \
                     pre-shared keys; serve the export with X.509 certificates (tls-certificates=DIR)"
                ));
            }
            _ => return Err(format!("{k}: unknown TLS parameter")),
        }
    }
    Ok(tls.then_some(t))
}

fn tcp_endpoint(authority: &str) -> Result<Endpoint, String> {
    let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
        let (h, after) = v6.split_once(']').ok_or("unclosed [ in the host")?;
        (h, after.strip_prefix(':'))
    } else {
        match authority.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (authority, None),
        }
    };
    if host.is_empty() {
        return Err("no host: write nbd://HOST[:PORT]/EXPORT".into());
    }
    let port = match port {
        None => DEFAULT_PORT,
        Some(p) => p.parse().map_err(|_| format!("`{p}` is not a port number"))?,
    };
    Ok(Endpoint::Tcp {
        host: host.to_string(),
        port,
    })
}

fn percent_decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = std::str::from_utf8(b.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tcp(host: &str, port: u16, export: &str) -> NbdUri {
        NbdUri {
            endpoint: Endpoint::Tcp {
                host: host.into(),
                port,
            },
            export: export.into(),
            tls: None,
        }
    }

    #[test]
    fn tcp_forms() {
        assert_eq!(NbdUri::parse("nbd://localhost").unwrap(), tcp("localhost", 10809, ""));
        assert_eq!(
            NbdUri::parse("nbd://127.0.0.1:1234/disk").unwrap(),
            tcp("127.0.0.1", 1234, "disk")
        );
        assert_eq!(NbdUri::parse("nbd://[::1]:99/a%20b").unwrap(), tcp("::1", 99, "a b"));
        assert_eq!(NbdUri::parse("nbd://[::1]/x").unwrap(), tcp("::1", 10809, "x"));
        let u = tcp("::1", 99, "e");
        assert_eq!(NbdUri::parse(&u.to_string()).unwrap(), u);
    }

    #[test]
    fn unix_forms() {
        let u = NbdUri::parse("nbd+unix:///exp?socket=/tmp/s.sock").unwrap();
        assert_eq!(u.endpoint, Endpoint::Unix("/tmp/s.sock".into()));
        assert_eq!(u.export, "exp");
        let u = NbdUri::parse("nbd+unix://?socket=/tmp/x").unwrap();
        assert_eq!(u.export, "");
        assert_eq!(NbdUri::parse(&u.to_string()).unwrap(), u);
    }

    #[test]
    fn tls_forms() {
        let u = NbdUri::parse("nbds://h:77/e?tls-certificates=/c%20d&tls-verify-peer=false").unwrap();
        assert_eq!(u.endpoint, tcp("h", 77, "").endpoint);
        let t = u.tls.clone().unwrap();
        assert_eq!(t.certificates, Some(PathBuf::from("/c d")));
        assert!(!t.verify_peer && u.tls_unverified());
        assert_eq!(u.to_string(), "nbds://h:77/e");
        let u = NbdUri::parse("nbds+unix:///e?socket=/s&tls-hostname=srv").unwrap();
        assert_eq!(u.endpoint, Endpoint::Unix("/s".into()));
        assert_eq!(u.tls.unwrap().hostname.as_deref(), Some("srv"));
        assert_eq!(NbdUri::parse("nbds://h").unwrap().tls, Some(TlsParams::default()));
        assert_eq!(NbdUri::parse("nbd://h").unwrap().tls, None);
    }

    #[test]
    fn mistakes_are_named() {
        let msg = |s: &str| NbdUri::parse(s).unwrap_err().to_string();
        assert!(msg("nbd+unix:///e").contains("socket="));
        assert!(msg("nbd+unix://host/e?socket=/s").contains("no host"));
        assert!(msg("nbd://h:99999/e").contains("port"));
        assert!(msg("nbd:///e").contains("no host"));
        assert!(msg("nbd://h/e?tls-certificates=/x").contains("nbds://"));
        assert!(msg("nbds://h/e?tls-psk-file=/k").contains("PSK"));
        assert!(msg("nbds://h/e?tls-verify-peer=maybe").contains("true or false"));
        assert!(msg("nbd://h/%zz").contains("escape"));
        assert!(is_nbd_uri("nbd+unix:///x?socket=y"));
        assert!(!is_nbd_uri("/tmp/nbd://x"));
    }
}
