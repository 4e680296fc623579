//! NBD over TLS (`nbds://`): after `NBD_OPT_STARTTLS` is acknowledged
//! the socket carries a TLS session ([rustls], ring provider), and the
//! rest of the handshake and every request and reply go through it.
//!
//! **Why a shared session behind a lock.** The connection has a reader
//! thread and writers on other handles of the socket ([`super::client`]),
//! but one TLS session is one state machine for both directions: it cannot
//! be split. Every handle of a [`TlsStream`] shares one
//! [`rustls::ClientConnection`] behind a mutex, yet the lock is never held
//! across a wait on the network:
//! - the reader blocks in `recv` on its own handle of the raw socket with
//!   the lock released, then takes it only to decrypt what arrived;
//! - a writer encrypts under the lock, takes the records out of the
//!   session, lets the lock go, and only then sends them (under a second,
//!   send-only lock, which keeps records in the order the session made
//!   them). So the reader can always drain replies: otherwise a server
//!   blocked on sending replies (not reading requests) would hold the
//!   writer, the writer the lock, and the lock the reader: a deadlock.
//! - what the reader makes the session answer (alerts, key updates) it
//!   sends itself if no writer is sending, else it leaves a flag that the
//!   writer sees once done.
//!
//! A single I/O thread owning
//! the session would need to wait on the socket and a channel at once,
//! which needs `poll` (unsafe, or another dependency); this keeps the
//! blocking reader the plain connection has.
//!
//! Credentials follow nbdkit and qemu: `tls-certificates=DIR` holds
//! `ca-cert.pem` (the CA the server's certificate must chain to) and,
//! for client authentication, `client-cert.pem` and `client-key.pem`.
//! Without it the system's CAs (`/etc/ssl/certs/ca-certificates.crt`) are
//! trusted. TLS-PSK is refused at parse time ([`super::uri`]).

use std::io::{self, Read, Write};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::Mutex;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{ClientConfig, ClientConnection, DigitallySignedStruct, RootCertStore, SignatureScheme};

use super::handshake::Stream;
use super::uri::{Endpoint, NbdUri, TlsParams};

/// The trust store Debian's `ca-certificates` keeps.
const SYSTEM_CAS: &str = "/etc/ssl/certs/ca-certificates.crt";

/// Most ciphertext one `recv` takes (a TLS record is at most ~16.7 KiB).
const RECV_BYTES: usize = 32 << 10;

/// The session all handles share.
#[derive(Debug)]
struct Session {
    tls: Mutex<ClientConnection>,
    /// Held from taking records out of `tls` until they are sent.
    sending: Mutex<()>,
    /// Records the reader queued while a writer was sending.
    queued: AtomicBool,
}

/// One handle on a TLS session over a TCP or Unix socket.
#[derive(Debug)]
pub struct TlsStream {
    sock: Box<Stream>,
    session: Arc<Session>,
    /// Records taken out of the session, being sent.
    out: Vec<u8>,
    /// Ciphertext read buffer (this handle's, allocated on first read).
    raw: Vec<u8>,
    /// Decrypted bytes not yet handed out, from `pos` on.
    plain: Vec<u8>,
    pos: usize,
    eof: bool,
}

/// Runs the TLS handshake on `sock` (whose server just acknowledged
/// `NBD_OPT_STARTTLS`) and returns the stream the rest of the connection
/// goes over.
///
/// # Errors
/// Unreadable credentials (named with their path); a failed handshake: a
/// server certificate that does not verify says so, a server that does
/// not speak TLS gives the protocol error.
pub fn upgrade(mut sock: Stream, uri: &NbdUri, params: &TlsParams) -> io::Result<Stream> {
    let config = client_config(params)?;
    let name = server_name(uri, params)?;
    let mut session = ClientConnection::new(config, name).map_err(|e| tls_error("starting TLS", &e))?;
    while session.is_handshaking() {
        session.complete_io(&mut sock).map_err(handshake_error)?;
    }
    Ok(Stream::Tls(TlsStream {
        sock: Box::new(sock),
        session: Arc::new(Session {
            tls: Mutex::new(session),
            sending: Mutex::new(()),
            queued: AtomicBool::new(false),
        }),
        out: Vec::new(),
        raw: Vec::new(),
        plain: Vec::new(),
        pos: 0,
        eof: false,
    }))
}

impl TlsStream {
    /// Another handle on the same session (see the module doc: only one
    /// handle may read).
    ///
    /// # Errors
    /// The OS error of `dup`.
    pub fn try_clone(&self) -> io::Result<Self> {
        Ok(Self {
            sock: Box::new(self.sock.try_clone()?),
            session: self.session.clone(),
            out: Vec::new(),
            raw: Vec::new(),
            plain: Vec::new(),
            pos: 0,
            eof: false,
        })
    }

    /// The raw socket under the session.
    pub fn socket(&self) -> &Stream {
        &self.sock
    }

    /// Sends every record the session holds; the caller holds
    /// `sending`. The session's lock is held only to take them out.
    fn send_queued(&mut self) -> io::Result<()> {
        loop {
            self.out.clear();
            {
                let mut s = self.session.tls.lock();
                while s.wants_write() {
                    s.write_tls(&mut self.out)?;
                }
            }
            if self.out.is_empty() {
                return Ok(());
            }
            self.sock.write_all(&self.out)?;
        }
    }

    /// A writer's send: then whatever the reader queued meanwhile.
    fn send_pending(&mut self) -> io::Result<()> {
        let session = self.session.clone();
        loop {
            {
                let _sending = session.sending.lock();
                self.send_queued()?;
            }
            if !session.queued.swap(false, Ordering::SeqCst) {
                return Ok(());
            }
        }
    }

    /// The reader's send: now if no writer is sending, else by that
    /// writer once it is done (the reader never waits for a writer).
    fn send_from_reader(&mut self) -> io::Result<()> {
        let session = self.session.clone();
        if !session.tls.lock().wants_write() {
            return Ok(());
        }
        session.queued.store(true, Ordering::SeqCst);
        let Some(_sending) = session.sending.try_lock() else {
            return Ok(());
        };
        session.queued.store(false, Ordering::SeqCst);
        self.send_queued()
    }

    /// Waits for ciphertext, then decrypts all of it into `plain`.
    fn fill(&mut self) -> io::Result<()> {
        if self.raw.is_empty() {
            self.raw = vec![0; RECV_BYTES];
        }
        let n = loop {
            match self.sock.read(&mut self.raw) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                r => break r?,
            }
        };
        self.plain.clear();
        self.pos = 0;
        if n == 0 {
            self.eof = true;
            return Ok(());
        }
        let r = self.decrypt(n);
        // Alerts and key updates the session wants to answer.
        let sent = self.send_from_reader();
        r.and(sent)
    }

    fn decrypt(&mut self, n: usize) -> io::Result<()> {
        let mut s = self.session.tls.lock();
        let mut input = &self.raw[..n];
        while !input.is_empty() {
            s.read_tls(&mut input)?;
            let state = s.process_new_packets().map_err(|e| tls_error("TLS", &e))?;
            let at = self.plain.len();
            self.plain.resize(at + state.plaintext_bytes_to_read(), 0);
            s.reader().read_exact(&mut self.plain[at..])?;
        }
        Ok(())
    }
}

impl Read for TlsStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while self.pos == self.plain.len() && !self.eof {
            self.fill()?;
        }
        let n = buf.len().min(self.plain.len() - self.pos);
        buf[..n].copy_from_slice(&self.plain[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}

impl Write for TlsStream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.write_vectored(&[io::IoSlice::new(buf)])
    }

    fn write_vectored(&mut self, bufs: &[io::IoSlice<'_>]) -> io::Result<usize> {
        let n = self.session.tls.lock().writer().write_vectored(bufs)?;
        self.send_pending()?;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.send_pending()
    }
}

fn tls_error(what: &str, e: &rustls::Error) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("NBD: {what}: {e}"))
}

/// Names a failed handshake: a certificate that does not verify, said
/// plainly with what to check.
fn handshake_error(e: io::Error) -> io::Error {
    match e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()) {
        Some(rustls::Error::InvalidCertificate(c)) => io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "NBD: TLS handshake: the server's certificate failed verification ({c:?}): \
                 tls-certificates=DIR must hold the CA that signed it (ca-cert.pem), and the \
                 certificate must name the host (or tls-hostname=NAME)"
            ),
        ),
        Some(t) => tls_error("TLS handshake", t),
        None if e.kind() == io::ErrorKind::UnexpectedEof => io::Error::new(
            e.kind(),
            "NBD: TLS handshake: the server closed the connection".to_string(),
        ),
        None => io::Error::new(e.kind(), format!("NBD: TLS handshake: {e}")),
    }
}

/// The name the server's certificate must bear.
fn server_name(uri: &NbdUri, params: &TlsParams) -> io::Result<ServerName<'static>> {
    let host = match (&params.hostname, &uri.endpoint) {
        (Some(h), _) => h.clone(),
        (None, Endpoint::Tcp { host, .. }) => host.clone(),
        (None, Endpoint::Unix(_)) => "localhost".into(),
    };
    ServerName::try_from(host.clone()).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{uri}: `{host}` is not a host name or address a certificate can bear"),
        )
    })
}

fn client_config(p: &TlsParams) -> io::Result<Arc<ClientConfig>> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| tls_error("TLS configuration", &e))?;
    let builder = if p.verify_peer {
        builder.with_root_certificates(roots(p.certificates.as_deref())?)
    } else {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(Unverified(provider)))
    };
    let config = match client_identity(p.certificates.as_deref())? {
        Some((chain, key)) => builder
            .with_client_auth_cert(chain, key)
            .map_err(|e| tls_error("the client certificate", &e))?,
        None => builder.with_no_client_auth(),
    };
    Ok(Arc::new(config))
}

fn bad_file(path: &Path, e: impl std::fmt::Display) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("NBD over TLS: {}: {e}", path.display()),
    )
}

fn certificates(path: &Path) -> io::Result<Vec<CertificateDer<'static>>> {
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| bad_file(path, e))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad_file(path, e))?;
    if certs.is_empty() {
        return Err(bad_file(path, "holds no PEM certificate"));
    }
    Ok(certs)
}

/// The CAs that may sign the server's certificate.
fn roots(dir: Option<&Path>) -> io::Result<RootCertStore> {
    let path = dir.map_or_else(|| SYSTEM_CAS.into(), |d| d.join("ca-cert.pem"));
    let mut roots = RootCertStore::empty();
    let (_, rejected) = roots.add_parsable_certificates(certificates(&path)?);
    if roots.is_empty() {
        return Err(bad_file(
            &path,
            format!("none of its {rejected} certificates is a usable CA"),
        ));
    }
    Ok(roots)
}

/// `client-cert.pem` and `client-key.pem` of the directory, when there.
type Identity = (Vec<CertificateDer<'static>>, PrivateKeyDer<'static>);

fn client_identity(dir: Option<&Path>) -> io::Result<Option<Identity>> {
    let Some(cert) = dir.map(|d| d.join("client-cert.pem")).filter(|c| c.exists()) else {
        return Ok(None);
    };
    let key = cert.with_file_name("client-key.pem");
    let k = PrivateKeyDer::from_pem_file(&key).map_err(|e| bad_file(&key, e))?;
    Ok(Some((certificates(&cert)?, k)))
}

/// `tls-verify-peer=false`: any certificate is taken, but the handshake's
/// signatures are still checked (the session is still encrypted, only no
/// longer known to reach the right server).
#[derive(Debug)]
struct Unverified(Arc<CryptoProvider>);

impl ServerCertVerifier for Unverified {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
