//! Real NBD servers for tests: `qemu-nbd` (Debian's `qemu-utils`) on an
//! image file and `nbdkit` with any plugin and filters, listening on a
//! Unix socket or a loopback TCP port. A server is killed when dropped.

use std::io;
use std::net::{TcpListener, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::tools::require_tool;

/// Where a server listens.
#[derive(Clone, Debug)]
pub enum Listen {
    /// A Unix socket at this path.
    Unix(PathBuf),
    /// 127.0.0.1 at this port.
    Tcp(u16),
}

impl Listen {
    /// A free loopback TCP port (free when asked; the server takes it
    /// right after).
    ///
    /// # Errors
    /// The OS error of binding.
    pub fn free_tcp() -> io::Result<Self> {
        Ok(Self::Tcp(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port()))
    }

    /// The URI of `export` at this address.
    pub fn uri(&self, export: &str) -> String {
        match self {
            Self::Unix(p) => format!("nbd+unix:///{export}?socket={}", p.display()),
            Self::Tcp(port) => format!("nbd://127.0.0.1:{port}/{export}"),
        }
    }

    fn ready(&self) -> bool {
        match self {
            Self::Unix(p) => UnixStream::connect(p).is_ok(),
            Self::Tcp(port) => TcpStream::connect(("127.0.0.1", *port)).is_ok(),
        }
    }
}

/// Why NBD tests cannot run here, if they cannot.
pub fn servers_missing() -> Option<String> {
    let missing: Vec<String> = ["qemu-nbd", "nbdkit"]
        .iter()
        .filter_map(|t| require_tool(t).err())
        .collect();
    (!missing.is_empty()).then(|| format!("{} (Debian packages qemu-utils, nbdkit)", missing.join("; ")))
}

/// A running server.
pub struct NbdServer {
    child: Child,
    listen: Listen,
    program: &'static str,
    args: Vec<String>,
}

impl NbdServer {
    /// `qemu-nbd` serving raw `image` as export `export`, for any number
    /// of connections in turn (`--persistent`), with its cache in the host
    /// page cache (what a killed server wrote survives).
    ///
    /// # Errors
    /// The server failing to start or to listen within ten seconds.
    pub fn qemu_nbd(image: &Path, export: &str, listen: &Listen) -> io::Result<Self> {
        let mut args: Vec<String> = vec![
            "-f".into(),
            "raw".into(),
            "--persistent".into(),
            "-x".into(),
            export.into(),
        ];
        match listen {
            Listen::Unix(p) => args.extend(["-k".into(), p.display().to_string()]),
            Listen::Tcp(port) => args.extend(["-b".into(), "127.0.0.1".into(), "-p".into(), port.to_string()]),
        }
        args.push(image.display().to_string());
        Self::start("qemu-nbd", args, listen)
    }

    /// `nbdkit` in the foreground with `args` (filters, plugin, its
    /// parameters), serving every export name.
    ///
    /// # Errors
    /// As [`Self::qemu_nbd`].
    pub fn nbdkit(args: &[&str], listen: &Listen) -> io::Result<Self> {
        let mut all: Vec<String> = vec!["-f".into()];
        match listen {
            Listen::Unix(p) => all.extend(["-U".into(), p.display().to_string()]),
            Listen::Tcp(port) => all.extend(["-i".into(), "127.0.0.1".into(), "-p".into(), port.to_string()]),
        }
        all.extend(args.iter().map(|a| a.to_string()));
        Self::start("nbdkit", all, listen)
    }

    fn start(program: &'static str, args: Vec<String>, listen: &Listen) -> io::Result<Self> {
        let mut s = Self {
            child: spawn(program, &args, listen)?,
            listen: listen.clone(),
            program,
            args,
        };
        s.wait_ready()?;
        Ok(s)
    }

    fn wait_ready(&mut self) -> io::Result<()> {
        let start = Instant::now();
        while !self.listen.ready() {
            if let Some(st) = self.child.try_wait()? {
                return Err(io::Error::other(format!(
                    "{} {:?} exited with {st}",
                    self.program, self.args
                )));
            }
            if start.elapsed() > Duration::from_secs(10) {
                return Err(io::Error::other(format!(
                    "{} is not listening after 10 s",
                    self.program
                )));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }

    /// The URI of `export` on this server.
    pub fn uri(&self, export: &str) -> String {
        self.listen.uri(export)
    }

    /// Kills the server with SIGKILL (no goodbye to its clients).
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Starts the same server again (after [`Self::kill`]).
    ///
    /// # Errors
    /// As [`Self::qemu_nbd`].
    pub fn restart(&mut self) -> io::Result<()> {
        self.kill();
        self.child = spawn(self.program, &self.args, &self.listen)?;
        self.wait_ready()
    }
}

fn spawn(program: &str, args: &[String], listen: &Listen) -> io::Result<Child> {
    if let Listen::Unix(p) = listen {
        let _ = std::fs::remove_file(p);
    }
    Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| io::Error::new(e.kind(), format!("cannot start {program}: {e}")))
}

impl Drop for NbdServer {
    fn drop(&mut self) {
        self.kill();
    }
}
