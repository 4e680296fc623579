//! X.509 credentials for NBD-over-TLS tests, made with the `openssl` CLI
//! in a directory laid out as nbdkit and qemu-nbd expect
//! (`--tls-certificates=DIR`, `tls-creds-x509,dir=DIR`): `ca-cert.pem`,
//! `server-cert.pem` and `server-key.pem`, plus `client-cert.pem` and
//! `client-key.pem` for the client's side. The server's certificate names
//! `localhost` and `127.0.0.1`. Keys are P-256, valid two days.

use std::io;
use std::path::Path;
use std::process::Command;

use crate::tools::require_tool;

/// Why TLS credentials cannot be made here, if they cannot.
pub fn openssl_missing() -> Option<String> {
    require_tool("openssl")
        .err()
        .map(|e| format!("{e} (Debian package openssl)"))
}

fn openssl(dir: &Path, args: &[&str]) -> io::Result<()> {
    let out = Command::new("openssl").current_dir(dir).args(args).output()?;
    if !out.status.success() {
        return Err(io::Error::other(format!(
            "openssl {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        )));
    }
    Ok(())
}

const EC: [&str; 4] = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"];

/// A self-signed CA in `dir`: `ca-cert.pem`, `ca-key.pem`.
///
/// # Errors
/// `openssl` failing (its stderr in the message).
pub fn make_ca(dir: &Path, name: &str) -> io::Result<()> {
    let subj = format!("/CN={name}");
    let mut args = vec!["req", "-x509", "-nodes", "-days", "2", "-subj", &subj];
    args.extend(EC);
    args.extend(["-keyout", "ca-key.pem", "-out", "ca-cert.pem"]);
    args.extend(["-addext", "basicConstraints=critical,CA:TRUE"]);
    args.extend(["-addext", "keyUsage=critical,keyCertSign,cRLSign"]);
    openssl(dir, &args)
}

/// `{role}-cert.pem` and `{role}-key.pem` in `dir`, signed by the CA
/// there, for `serverAuth` or `clientAuth`.
fn make_leaf(dir: &Path, role: &str, usage: &str) -> io::Result<()> {
    let (key, csr, cert) = (
        format!("{role}-key.pem"),
        format!("{role}.csr"),
        format!("{role}-cert.pem"),
    );
    let subj = format!("/CN={role}");
    let mut args = vec!["req", "-nodes", "-subj", &subj, "-keyout", &key, "-out", &csr];
    args.extend(EC);
    openssl(dir, &args)?;
    let ext = format!("{role}.ext");
    std::fs::write(
        dir.join(&ext),
        format!(
            "subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\n\
             keyUsage=critical,digitalSignature\nextendedKeyUsage={usage}\n"
        ),
    )?;
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-days",
            "2",
            "-in",
            &csr,
            "-CA",
            "ca-cert.pem",
            "-CAkey",
            "ca-key.pem",
            "-CAcreateserial",
            "-extfile",
            &ext,
            "-out",
            &cert,
        ],
    )
}

/// A CA and a server and client certificate it signed, all in `dir`.
///
/// # Errors
/// As [`make_ca`].
pub fn make_credentials(dir: &Path) -> io::Result<()> {
    make_ca(dir, "ext4kit test CA")?;
    make_leaf(dir, "server", "serverAuth")?;
    make_leaf(dir, "client", "clientAuth")
}
