//! The check runner: a fresh directory per check, panics caught, one result
//! line per check, and the `probe` child processes used by checks that need
//! another process or an unprivileged uid.

use std::ffi::OsStr;
use std::io;
use std::path::{Path, PathBuf};
use std::process::Command;

use nix::errno::Errno;

use crate::util::{At, CheckResult, Failure};

/// The unprivileged uid and gid the permission checks run as.
pub const USER: u32 = 1000;
/// A second unprivileged uid (the "other user" of the sticky-bit checks).
pub const OTHER: u32 = 1001;

/// One named check.
#[derive(Clone, Copy)]
pub struct Check {
    /// Unique name, used by `--filter`.
    pub name: &'static str,
    /// The check itself.
    pub run: fn(&Ctx) -> CheckResult,
}

/// What a check gets: its own empty directory and the means to run probes.
pub struct Ctx {
    /// A fresh, empty directory (mode 0755) for this check only.
    pub dir: PathBuf,
    exe: PathBuf,
    root: bool,
    user_reach: Result<(), String>,
}

/// The result of one probe: `Ok(text)` or the errno the child saw.
pub type ProbeResult = Result<String, Errno>;

impl Ctx {
    /// `dir/name`.
    pub fn p(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// Whether the suite runs as root.
    pub fn is_root(&self) -> bool {
        self.root
    }

    /// Skips (loudly) unless running as root.
    pub fn need_root(&self) -> CheckResult {
        if self.root {
            Ok(())
        } else {
            Err(Failure::Skip("needs root".into()))
        }
    }

    /// Skips unless probes can run as [`USER`]: root is needed to switch uid
    /// and the user must be able to reach the directory and the binary.
    pub fn need_user(&self) -> CheckResult {
        self.need_root()?;
        self.user_reach.clone().map_err(Failure::Skip)
    }

    /// Runs `ext4kit-posix probe ARGS` as this uid (a second process).
    pub fn probe<S: AsRef<OsStr>>(&self, args: &[S]) -> Result<ProbeResult, Failure> {
        self.probe_as(None, args)
    }

    /// Runs a probe as uid/gid [`USER`].
    pub fn user<S: AsRef<OsStr>>(&self, args: &[S]) -> Result<ProbeResult, Failure> {
        self.probe_as(Some((USER, USER)), args)
    }

    /// Runs a probe as `ids` (uid, gid), or as ourselves when `None`.
    pub fn probe_as<S: AsRef<OsStr>>(&self, ids: Option<(u32, u32)>, args: &[S]) -> Result<ProbeResult, Failure> {
        let mut cmd = self.probe_command(ids, args);
        let out = cmd.output().at("spawn probe")?;
        parse_probe(&out)
    }

    /// The command for a probe, for checks that start several at once.
    pub fn probe_command<S: AsRef<OsStr>>(&self, ids: Option<(u32, u32)>, args: &[S]) -> Command {
        use std::os::unix::process::CommandExt;
        let mut cmd = Command::new(&self.exe);
        cmd.arg("probe").args(args);
        if let Some((uid, gid)) = ids {
            // std drops the supplementary groups when root sets a uid.
            cmd.uid(uid).gid(gid);
        }
        cmd
    }
}

/// Reads a probe child's `ok TEXT` / `err N` line.
pub fn parse_probe(out: &std::process::Output) -> Result<ProbeResult, Failure> {
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().next().unwrap_or("");
    if let Some(rest) = line.strip_prefix("ok") {
        return Ok(Ok(rest.trim_start().to_string()));
    }
    if let Some(n) = line.strip_prefix("err ").and_then(|n| n.trim().parse::<i32>().ok()) {
        return Ok(Err(Errno::from_raw(n)));
    }
    Err(Failure::Fail(format!(
        "probe broke ({}): {}{}",
        out.status,
        text,
        String::from_utf8_lossy(&out.stderr)
    )))
}

/// How to run the suite.
#[derive(Debug, Clone)]
pub struct SuiteOptions {
    /// The directory to test in (anything mounted: kernel ext4, tmpfs, FUSE).
    pub dir: PathBuf,
    /// Only checks whose name contains one of these (comma-separated on the
    /// command line); all when empty.
    pub filter: Vec<String>,
    /// The `ext4kit-posix` binary, re-executed for probes.
    pub exe: PathBuf,
    /// Leave the work directory behind.
    pub keep: bool,
}

/// One line of the report.
#[derive(Debug, Clone)]
pub struct Report {
    /// The check's name.
    pub name: &'static str,
    /// Pass, skip or failure.
    pub outcome: CheckResult,
}

impl Report {
    /// The printed line: `ok NAME`, `skip NAME: why` or `FAIL NAME: what`.
    pub fn line(&self) -> String {
        match &self.outcome {
            Ok(()) => format!("ok   {}", self.name),
            Err(Failure::Skip(why)) => format!("SKIP {}: {why}", self.name),
            Err(Failure::Fail(what)) => format!("FAIL {}: {what}", self.name),
        }
    }
}

/// The checks selected by `filter`.
pub fn selected(filter: &[String]) -> Vec<Check> {
    crate::checks::all()
        .into_iter()
        .filter(|c| filter.is_empty() || filter.iter().any(|f| c.name.contains(f.as_str())))
        .collect()
}

/// Runs the selected checks in `opts.dir`, calling `each` with every
/// result as it comes, and returns them all.
pub fn run_suite(opts: &SuiteOptions, mut each: impl FnMut(&Report)) -> io::Result<Vec<Report>> {
    nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o022));
    let base = opts.dir.join(format!("ext4kit-posix.{}", std::process::id()));
    make_dir(&base)?;
    let root = nix::unistd::geteuid().is_root();
    let mut reports = Vec::new();
    let user_reach = if root {
        user_can_reach(&opts.exe, &base)
    } else {
        Err("needs root".into())
    };
    for check in selected(&opts.filter) {
        let dir = base.join(check.name);
        make_dir(&dir)?;
        let ctx = Ctx {
            dir,
            exe: opts.exe.clone(),
            root,
            user_reach: user_reach.clone(),
        };
        let outcome =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| (check.run)(&ctx))).unwrap_or_else(|p| {
                let msg = p
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                Err(Failure::Fail(format!("panicked: {msg}")))
            });
        let r = Report {
            name: check.name,
            outcome,
        };
        each(&r);
        reports.push(r);
    }
    if !opts.keep {
        std::fs::remove_dir_all(&base)?;
    }
    Ok(reports)
}

fn make_dir(p: &Path) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir(p)?;
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755))
}

/// Whether uid [`USER`] can run the binary and see `base`; the reason if not.
fn user_can_reach(exe: &Path, base: &Path) -> Result<(), String> {
    let ctx = Ctx {
        dir: base.to_path_buf(),
        exe: exe.to_path_buf(),
        root: true,
        user_reach: Ok(()),
    };
    let broke = |e: Failure| match e {
        Failure::Fail(s) | Failure::Skip(s) => s,
    };
    match ctx.user(&[OsStr::new("stat"), base.as_os_str()]).map_err(broke)? {
        Ok(_) => Ok(()),
        Err(e) => Err(format!(
            "uid {USER} cannot reach {} ({e}): a parent directory is not searchable",
            base.display()
        )),
    }
}
