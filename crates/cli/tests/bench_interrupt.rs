//! Ctrl-C during `ext4kit bench mount` leaves nothing behind: the run is
//! started in a process group of its own and the whole group gets SIGINT,
//! as a terminal sends it, while a workload runs on the mount. Afterwards
//! nothing under the run's directory is mounted and its scratch directory
//! (image and mount point) is gone, and the run unmounted in order rather
//! than finding its helpers killed by the same SIGINT. Root, and FUSE or
//! loop mounts.

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use ext4kit_testkit::fuse::can_fuse_mount;
use ext4kit_testkit::mount::can_loop_mount;
use ext4kit_testkit::tools::require_tool;

/// Mount points under `dir` listed in /proc/mounts.
fn mounts_under(dir: &Path) -> Vec<String> {
    let table = std::fs::read_to_string("/proc/mounts").expect("read /proc/mounts");
    let dir = dir.to_str().expect("UTF-8 path");
    table
        .lines()
        .filter_map(|l| l.split_whitespace().nth(1))
        .filter(|p| p.starts_with(dir))
        .map(str::to_string)
        .collect()
}

/// Waits for `child` to exit, killing it and failing after `limit`.
fn wait_exit(child: &mut Child, limit: Duration) -> std::process::ExitStatus {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            return status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("bench mount still running {} s after SIGINT", limit.as_secs());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn interrupt_while_mounted(target: &str) {
    let dir = tempfile::tempdir_in("/var/tmp").expect("scratch dir");
    let mut child = Command::new(env!("CARGO_BIN_EXE_ext4kit"))
        .args(["bench", "mount", "--quick", "--targets", target, "--dir"])
        .arg(dir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .expect("start ext4kit bench mount");
    let deadline = Instant::now() + Duration::from_secs(120);
    while mounts_under(dir.path()).is_empty() {
        if let Some(status) = child.try_wait().expect("wait") {
            panic!("bench mount exited ({status}) before mounting");
        }
        assert!(Instant::now() < deadline, "{target} not mounted within 120 s");
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(200));
    let group = rustix::process::Pid::from_raw(child.id() as i32).expect("pid");
    rustix::process::kill_process_group(group, rustix::process::Signal::INT).expect("SIGINT");
    let status = wait_exit(&mut child, Duration::from_secs(300));
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().expect("stderr"), &mut stderr).expect("stderr");
    let left = mounts_under(dir.path());
    for m in &left {
        let _ = Command::new("umount").arg("-l").arg(m).status();
    }
    assert!(
        left.is_empty(),
        "{target}: still mounted after SIGINT: {left:?}\n{stderr}"
    );
    assert!(!status.success(), "{target}: an interrupted run succeeded:\n{stderr}");
    assert!(stderr.contains("interrupted"), "{target}: {stderr}");
    // The run itself unmounted, in order: not a lazy detach after a
    // helper (mount, umount, the FUSE server) died of the same SIGINT.
    assert!(
        stderr.contains(&format!("{target}: unmounted in")) && !stderr.contains("lazily"),
        "{target}: not unmounted in order:\n{stderr}"
    );
    let scratch: Vec<_> = std::fs::read_dir(dir.path())
        .expect("list the run's directory")
        .map(|e| e.expect("entry").file_name())
        .collect();
    assert!(
        scratch.is_empty(),
        "{target}: scratch left behind: {scratch:?}\n{stderr}"
    );
}

/// Skips loudly (failing under CI) when `why` says the target cannot run.
fn runnable(target: &str, why: Result<(), String>) -> bool {
    if let Err(why) = why {
        ext4kit_testkit::skipped!("bench mount --targets {target}: {why}");
        assert!(std::env::var_os("CI").is_none(), "CI must run this: {why}");
        return false;
    }
    true
}

#[test]
fn sigint_during_an_ext4kit_mount_leaves_nothing_mounted() {
    if runnable("ext4kit", can_fuse_mount()) {
        interrupt_while_mounted("ext4kit");
    }
}

#[test]
fn sigint_during_a_kernel_mount_leaves_nothing_mounted() {
    if runnable("kernel", can_loop_mount()) {
        interrupt_while_mounted("kernel");
    }
}

#[test]
fn sigint_during_a_fuse2fs_mount_leaves_nothing_mounted() {
    let why = can_fuse_mount().and_then(|()| require_tool("fuse2fs").map(|_| ()));
    if runnable("fuse2fs", why) {
        interrupt_while_mounted("fuse2fs");
    }
}
