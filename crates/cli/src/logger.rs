//! Messages from the library crates (`log`) to stderr. Write errors are
//! ignored: a detached mount server keeps running after the terminal that
//! started it is gone. `EXT4KIT_LOG=debug|info|warn|error` sets the level.

use std::io::Write;

struct Stderr;

impl log::Log for Stderr {
    /// fuser warns about things that are normal for us (an unmount already
    /// done by `umount`), so its messages show only at debug level.
    fn enabled(&self, m: &log::Metadata<'_>) -> bool {
        let max = if m.target().starts_with("fuser") {
            log::max_level().min(log::LevelFilter::Error).max(debug_only())
        } else {
            log::max_level()
        };
        m.level() <= max
    }

    fn log(&self, r: &log::Record<'_>) {
        if self.enabled(r.metadata()) {
            let _ = writeln!(std::io::stderr(), "{}: {}", r.level(), r.args());
        }
    }

    fn flush(&self) {}
}

fn debug_only() -> log::LevelFilter {
    if log::max_level() >= log::LevelFilter::Debug {
        log::max_level()
    } else {
        log::LevelFilter::Error
    }
}

static LOGGER: Stderr = Stderr;

pub fn init() {
    let level = match std::env::var("EXT4KIT_LOG").as_deref() {
        Ok("debug") => log::LevelFilter::Debug,
        Ok("info") => log::LevelFilter::Info,
        Ok("error") => log::LevelFilter::Error,
        _ => log::LevelFilter::Warn,
    };
    if log::set_logger(&LOGGER).is_ok() {
        log::set_max_level(level);
    }
}
