//! Skipped tests, counted. A test whose tool or privilege is missing
//! returns early and passes; libtest hides what it printed, so the reason
//! also goes, one line per skip, to the file `EXT4KIT_SKIP_LOG` names, and
//! `scripts/test.sh` ends the run with them. Under `CI` a skip fails the
//! run there (and in most tests at once).

use std::io::Write;

/// Reports a skipped test: a `SKIPPED: <reason>` line on stderr and, when
/// `EXT4KIT_SKIP_LOG` is set, `<test name>: <reason>` appended to that file.
/// The test name is libtest's name for the running test thread.
pub fn record(reason: &str) {
    eprintln!("SKIPPED: {reason}");
    let Some(log) = std::env::var_os("EXT4KIT_SKIP_LOG") else {
        return;
    };
    let test = std::thread::current().name().unwrap_or("?").to_string();
    let line = format!("{test}: {}\n", reason.replace('\n', " "));
    let written = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log)
        .and_then(|mut f| f.write_all(line.as_bytes()));
    if let Err(e) = written {
        eprintln!("cannot record the skip in {}: {e}", log.to_string_lossy());
    }
}

/// `skipped!("…{why}")`: [`record`] with `format!` arguments.
#[macro_export]
macro_rules! skipped {
    ($($t:tt)*) => {
        $crate::skip::record(&format!($($t)*))
    };
}

#[cfg(test)]
mod tests {
    /// One process, so the log is set for this test only through a child.
    #[test]
    fn a_skip_is_appended_with_the_test_name() {
        if std::env::var_os("EXT4KIT_SKIP_LOG_CHILD").is_some() {
            crate::skipped!("no {} here", "tool");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("skips");
        let me = std::env::current_exe().unwrap();
        for _ in 0..2 {
            let st = std::process::Command::new(&me)
                .args(["--exact", "skip::tests::a_skip_is_appended_with_the_test_name"])
                .env("EXT4KIT_SKIP_LOG", &log)
                .env("EXT4KIT_SKIP_LOG_CHILD", "1")
                .output()
                .unwrap();
            assert!(st.status.success());
        }
        let text = std::fs::read_to_string(&log).unwrap();
        assert_eq!(
            text,
            "skip::tests::a_skip_is_appended_with_the_test_name: no tool here\n".repeat(2)
        );
    }
}
