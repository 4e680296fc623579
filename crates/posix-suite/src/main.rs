//! `ext4kit-posix`: the POSIX behaviour suite and the data-integrity
//! exerciser, run against any mounted directory (see the library docs).

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use ext4kit_posix_suite::exercise::{ExerciseOptions, exercise};
use ext4kit_posix_suite::suite::{SuiteOptions, run_suite, selected};
use ext4kit_posix_suite::util::Failure;

#[derive(Parser)]
#[command(
    name = "ext4kit-posix",
    about = "POSIX behaviour suite and data-integrity exerciser for any mounted directory"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run the named POSIX checks in DIR, one line per check.
    Run {
        /// Directory on the file system under test.
        dir: Option<PathBuf>,
        /// Only checks whose name contains one of these (comma-separated).
        #[arg(long, value_delimiter = ',')]
        filter: Vec<String>,
        /// Count skipped checks as failures.
        #[arg(long)]
        strict: bool,
        /// Keep the work directory.
        #[arg(long)]
        keep: bool,
        /// List the check names and exit.
        #[arg(long)]
        list: bool,
    },
    /// Seeded random I/O over a few files, verified against an in-memory copy.
    Exercise {
        /// Directory on the file system under test.
        dir: PathBuf,
        /// Number of operations.
        #[arg(long, default_value_t = 10_000)]
        ops: u64,
        /// Seed.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Number of file names.
        #[arg(long, default_value_t = 4)]
        files: usize,
        /// Largest file size reached (bytes).
        #[arg(long, default_value_t = 32 << 20)]
        max_size: u64,
        /// Flip a byte behind the exerciser's back before the final check (must fail).
        #[arg(long)]
        self_test_corrupt: bool,
        /// Keep the work directory.
        #[arg(long)]
        keep: bool,
    },
    /// Internal: one system call for the suite (often as another uid).
    #[command(hide = true)]
    Probe {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<OsString>,
    },
}

fn main() -> ExitCode {
    match Cli::parse().cmd {
        Cmd::Probe { args } => ExitCode::from(ext4kit_posix_suite::probe::main(&args) as u8),
        Cmd::Run {
            dir,
            filter,
            strict,
            keep,
            list,
        } => {
            if list {
                selected(&filter).iter().for_each(|c| println!("{}", c.name));
                return ExitCode::SUCCESS;
            }
            let Some(dir) = dir else {
                eprintln!("ext4kit-posix run: DIR is required");
                return ExitCode::from(2);
            };
            run(dir, filter, strict, keep)
        }
        Cmd::Exercise {
            dir,
            ops,
            seed,
            files,
            max_size,
            self_test_corrupt,
            keep,
        } => {
            let o = ExerciseOptions {
                dir,
                ops,
                seed,
                files,
                max_size,
                self_test_corrupt,
                keep,
            };
            match exercise(&o) {
                Ok(r) => {
                    let secs = r.elapsed.as_secs_f64();
                    println!(
                        "ok: {} ops, seed {}, {} files, {:.2}s ({:.0} ops/s), {} MiB written, {} MiB verified{}",
                        r.ops,
                        seed,
                        files,
                        secs,
                        r.ops as f64 / secs.max(1e-9),
                        r.bytes_written >> 20,
                        r.bytes_verified >> 20,
                        if r.unsupported.is_empty() {
                            String::new()
                        } else {
                            format!("; NOT exercised (EOPNOTSUPP): {}", r.unsupported.join(", "))
                        }
                    );
                    ExitCode::SUCCESS
                }
                Err(report) => {
                    println!("{report}");
                    ExitCode::from(1)
                }
            }
        }
    }
}

fn run(dir: PathBuf, filter: Vec<String>, strict: bool, keep: bool) -> ExitCode {
    let exe = match std::env::current_exe() {
        Ok(e) => e,
        Err(e) => {
            eprintln!("cannot find own executable: {e}");
            return ExitCode::from(2);
        }
    };
    let opts = SuiteOptions { dir, filter, exe, keep };
    let reports = match run_suite(&opts, |r| println!("{}", r.line())) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("ext4kit-posix run: {e}");
            return ExitCode::from(2);
        }
    };
    let failed = reports
        .iter()
        .filter(|r| matches!(r.outcome, Err(Failure::Fail(_))))
        .count();
    let skipped = reports
        .iter()
        .filter(|r| matches!(r.outcome, Err(Failure::Skip(_))))
        .count();
    let passed = reports.len() - failed - skipped;
    println!("{passed} passed, {failed} failed, {skipped} skipped");
    if failed > 0 || (strict && skipped > 0) {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}
