//! NBD URIs as qemu and nbdkit write them: `nbd://host[:port][/export]`
//! over TCP (port 10809 by default) and `nbd+unix:///[export]?socket=PATH`
//! over a Unix socket. `nbds://` and `nbds+unix://` (TLS) are recognised
//! so that they are refused by name rather than taken for a file path.

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

/// A parsed NBD URI.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NbdUri {
    /// The server.
    pub endpoint: Endpoint,
    /// The export name (empty: the server's default export).
    pub export: String,
}

impl fmt::Display for NbdUri {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.endpoint {
            Endpoint::Tcp { host, port } if host.contains(':') => write!(f, "nbd://[{host}]:{port}/{}", self.export),
            Endpoint::Tcp { host, port } => write!(f, "nbd://{host}:{port}/{}", self.export),
            Endpoint::Unix(p) => write!(f, "nbd+unix:///{}?socket={}", self.export, p.display()),
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
    /// Parses `nbd://…` or `nbd+unix://…`.
    ///
    /// # Errors
    /// [`io::ErrorKind::InvalidInput`] naming what is wrong: another
    /// scheme, TLS asked for, a bad port, a Unix URI with a host or
    /// without `socket=`.
    pub fn parse(s: &str) -> io::Result<Self> {
        let bad = |why: &str| io::Error::new(io::ErrorKind::InvalidInput, format!("{s}: {why}"));
        let (scheme, rest) = s.split_once("://").ok_or_else(|| bad("not an NBD URI"))?;
        match scheme {
            "nbds" | "nbds+unix" | "nbds+tcp" => {
                return Err(bad("NBD over TLS is not supported yet; serve the export without TLS"));
            }
            "nbd" | "nbd+tcp" | "nbd+unix" => {}
            _ => return Err(bad("not an NBD URI (nbd:// or nbd+unix://)")),
        }
        let (before_query, query) = match rest.split_once('?') {
            Some((a, q)) => (a, Some(q)),
            None => (rest, None),
        };
        let (authority, path) = match before_query.find('/') {
            Some(i) => (&before_query[..i], &before_query[i + 1..]),
            None => (before_query, ""),
        };
        let export = percent_decode(path).ok_or_else(|| bad("bad %-escape in the export name"))?;
        let endpoint = if scheme == "nbd+unix" {
            if !authority.is_empty() {
                return Err(bad(
                    "a Unix-socket URI has no host: write nbd+unix:///EXPORT?socket=PATH",
                ));
            }
            let socket = query
                .into_iter()
                .flat_map(|q| q.split('&'))
                .find_map(|kv| kv.strip_prefix("socket="))
                .ok_or_else(|| bad("no socket=PATH in the query"))?;
            let socket = percent_decode(socket).ok_or_else(|| bad("bad %-escape in the socket path"))?;
            Endpoint::Unix(PathBuf::from(socket))
        } else {
            tcp_endpoint(authority).map_err(|why| bad(&why))?
        };
        Ok(Self { endpoint, export })
    }
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
    fn mistakes_are_named() {
        let msg = |s: &str| NbdUri::parse(s).unwrap_err().to_string();
        assert!(msg("nbd+unix:///e").contains("socket="));
        assert!(msg("nbd+unix://host/e?socket=/s").contains("no host"));
        assert!(msg("nbd://h:99999/e").contains("port"));
        assert!(msg("nbd:///e").contains("no host"));
        assert!(msg("nbds://h/e").contains("TLS"));
        assert!(msg("nbd://h/%zz").contains("escape"));
        assert!(is_nbd_uri("nbd+unix:///x?socket=y"));
        assert!(!is_nbd_uri("/tmp/nbd://x"));
    }
}
