//! Running the e2fsprogs and util-linux oracles: `e2fsck -fn`, `debugfs -R`,
//! and finding tools so that tests can skip loudly when one is missing.

use std::ffi::OsStr;
use std::io;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Directories searched for tools besides `$PATH` (root's sbin directories are
/// often missing from a non-login `PATH`).
const EXTRA_TOOL_DIRS: &[&str] = &["/usr/sbin", "/sbin", "/usr/bin", "/bin"];

/// The captured result of running an external command.
#[derive(Debug, Clone)]
pub struct CmdOutput {
    /// The exit code, or `None` when the process was killed by a signal.
    pub code: Option<i32>,
    /// Everything the process wrote to standard output (lossily decoded).
    pub stdout: String,
    /// Everything the process wrote to standard error (lossily decoded).
    pub stderr: String,
}

impl CmdOutput {
    /// True when the process exited with status 0.
    pub fn success(&self) -> bool {
        self.code == Some(0)
    }

    /// Standard output followed by standard error, for error messages.
    pub fn combined(&self) -> String {
        format!("{}{}", self.stdout, self.stderr)
    }
}

/// Finds `name` on `$PATH` or in the usual sbin directories.
///
/// Returns `Err(reason)` suitable for a loud `SKIPPED:` line when it is absent.
pub fn require_tool(name: &str) -> Result<PathBuf, String> {
    let path_var = std::env::var_os("PATH").unwrap_or_default();
    let dirs = std::env::split_paths(&path_var).chain(EXTRA_TOOL_DIRS.iter().map(PathBuf::from));
    for dir in dirs {
        let candidate = dir.join(name);
        if let Ok(meta) = std::fs::metadata(&candidate) {
            use std::os::unix::fs::PermissionsExt;
            if meta.is_file() && meta.permissions().mode() & 0o111 != 0 {
                return Ok(candidate);
            }
        }
    }
    Err(format!(
        "required tool `{name}` not found on PATH or in /usr/sbin, /sbin"
    ))
}

/// Checks several tools at once; the error names every missing one.
pub fn require_tools(names: &[&str]) -> Result<(), String> {
    let missing: Vec<String> = names.iter().filter_map(|n| require_tool(n).err()).collect();
    if missing.is_empty() {
        Ok(())
    } else {
        Err(missing.join("; "))
    }
}

/// Prints a loud `SKIPPED: <reason>` line to stderr and returns `None` when
/// `check` failed; otherwise returns the value.
///
/// ```no_run
/// # fn t() {
/// let Some(()) = ext4kit_testkit::tools::skip_unless(ext4kit_testkit::mount::can_loop_mount())
/// else {
///     return;
/// };
/// # }
/// ```
pub fn skip_unless<T>(check: Result<T, String>) -> Option<T> {
    match check {
        Ok(v) => Some(v),
        Err(reason) => {
            crate::skip::record(&reason);
            None
        }
    }
}

/// Runs `program` with `args` in the C locale and captures its output.
pub fn run<S: AsRef<OsStr>>(program: &str, args: &[S]) -> io::Result<CmdOutput> {
    let exe = require_tool(program)
        .map(PathBuf::into_os_string)
        .unwrap_or_else(|_| program.into());
    let out = Command::new(&exe)
        .args(args)
        .env("LC_ALL", "C")
        .env("E2FSPROGS_LIBMAGIC_SUPPRESS", "1")
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| io::Error::new(e.kind(), format!("cannot run {program}: {e}")))?;
    Ok(CmdOutput {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    })
}

/// Like [`run`], but a non-zero exit becomes an error carrying the output.
pub fn run_ok<S: AsRef<OsStr>>(program: &str, args: &[S]) -> io::Result<CmdOutput> {
    let out = run(program, args)?;
    if out.success() {
        Ok(out)
    } else {
        let shown: Vec<String> = args.iter().map(|a| a.as_ref().to_string_lossy().into_owned()).collect();
        Err(io::Error::other(format!(
            "`{program} {}` exited with {:?}:\n{}",
            shown.join(" "),
            out.code,
            out.combined()
        )))
    }
}

/// The result of `e2fsck -fn`.
#[derive(Debug, Clone)]
pub struct FsckResult {
    /// e2fsck's exit code (0 clean, 4 errors left uncorrected, 8 operational
    /// error…); -1 when it was killed by a signal.
    pub code: i32,
    /// Standard output and standard error together.
    pub output: String,
}

impl FsckResult {
    /// True when e2fsck exited 0 (no errors found).
    pub fn is_clean(&self) -> bool {
        self.code == 0
    }
}

/// Runs `e2fsck -fn IMG` (forced, read-only, answering no).
pub fn e2fsck_fn(image: &Path) -> io::Result<FsckResult> {
    let out = run("e2fsck", &[OsStr::new("-fn"), image.as_os_str()])?;
    Ok(FsckResult {
        code: out.code.unwrap_or(-1),
        output: out.combined(),
    })
}

/// Runs `e2fsck -fn IMG` and turns anything but a clean result into an error
/// carrying e2fsck's output.
pub fn assert_fsck_clean(image: &Path) -> io::Result<()> {
    let r = e2fsck_fn(image)?;
    if r.is_clean() {
        Ok(())
    } else {
        Err(io::Error::other(format!(
            "e2fsck -fn {} exited {}:\n{}",
            image.display(),
            r.code,
            r.output
        )))
    }
}

/// Runs `debugfs -R CMD IMG` (read-only) and returns its standard output.
///
/// debugfs exits 0 even when the request fails; its complaints are on
/// standard error, which is returned by [`debugfs_full`].
pub fn debugfs(image: &Path, request: &str) -> io::Result<String> {
    Ok(debugfs_full(image, request)?.stdout)
}

/// Runs `debugfs -w -R CMD IMG` (changing the image, e.g. to damage it on
/// purpose) and returns its standard output; a non-zero exit is an error.
pub fn debugfs_write(image: &Path, request: &str) -> io::Result<String> {
    Ok(run_ok(
        "debugfs",
        &[
            OsStr::new("-w"),
            OsStr::new("-R"),
            OsStr::new(request),
            image.as_os_str(),
        ],
    )?
    .stdout)
}

/// Runs `debugfs -R CMD IMG` and returns the whole captured output.
pub fn debugfs_full(image: &Path, request: &str) -> io::Result<CmdOutput> {
    run("debugfs", &[OsStr::new("-R"), OsStr::new(request), image.as_os_str()])
}

/// The depth of the extent tree of `path_in_fs` (an absolute path inside the
/// image, e.g. `/dir/file`) as `debugfs -R "ex PATH"` shows it: 0 when every
/// extent is in the inode, 1 with one level of leaf blocks, and so on.
///
/// Returns `Ok(None)` when the file does not use extents (block-mapped or
/// inline data) and an error when debugfs cannot find it.
pub fn extent_depth(image: &Path, path_in_fs: &str) -> io::Result<Option<u32>> {
    let out = debugfs_full(image, &format!("ex {path_in_fs}"))?;
    if out.stderr.contains("File not found") || out.stderr.contains("not found by ext2_lookup") {
        return Err(io::Error::new(io::ErrorKind::NotFound, out.stderr));
    }
    // Lines look like ` 0/ 2   1/  4     0 - 4095 1234 ...`: "level/max level".
    let mut depth = None;
    for line in out.stdout.lines() {
        let Some(first) = line.split_whitespace().next() else {
            continue;
        };
        let Some((_, max)) = first.split_once('/') else {
            continue;
        };
        let max = if max.is_empty() {
            // `0/ 2`: the maximum is the next token.
            line.split_whitespace().nth(1).and_then(|t| t.parse::<u32>().ok())
        } else {
            max.parse::<u32>().ok()
        };
        if let Some(m) = max {
            depth = Some(depth.map_or(m, |d: u32| d.max(m)));
        }
    }
    Ok(depth)
}

/// Number of extents (leaf entries) of `path_in_fs` per `debugfs -R "ex"`.
pub fn extent_count(image: &Path, path_in_fs: &str) -> io::Result<usize> {
    let out = debugfs(image, &format!("ex {path_in_fs}"))?;
    let mut max_level = 0u32;
    let mut rows = Vec::new();
    for line in out.lines() {
        let tokens: Vec<&str> = line.split_whitespace().collect();
        let Some(first) = tokens.first() else {
            continue;
        };
        let Some((lvl, max)) = first.split_once('/') else {
            continue;
        };
        let (Ok(lvl), max) = (lvl.parse::<u32>(), max) else {
            continue;
        };
        let max = if max.is_empty() {
            tokens.get(1).and_then(|t| t.parse().ok())
        } else {
            max.parse().ok()
        };
        if let Some(m) = max {
            max_level = max_level.max(m);
            rows.push(lvl);
        }
    }
    Ok(rows.iter().filter(|&&l| l == max_level).count())
}

/// The xattr block of `path_in_fs` (`File ACL:` in `debugfs -R "stat PATH"`):
/// 0 when every xattr is in the inode (or there is none). Files with
/// identical xattr sets that ext4 shares report the same block.
pub fn xattr_block(image: &Path, path_in_fs: &str) -> io::Result<u64> {
    let out = debugfs_full(image, &format!("stat {path_in_fs}"))?;
    out.stdout
        .lines()
        .find_map(|l| l.trim().strip_prefix("File ACL:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| io::Error::other(format!("no File ACL for {path_in_fs}: {}", out.combined())))
}
