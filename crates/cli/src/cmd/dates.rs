//! Times as people read them — `ls -l`'s styles (`--time-style`,
//! `--full-time`), stat(1)'s full form, dumpe2fs's `ctime(3)` form — in
//! the local time zone (`TZ`, else /etc/localtime), and seconds since
//! 1970 for programs (`--time-style epoch`, and every `--json`).

use ext4kit_format::inode::Timestamp;
use jiff::Zoned;
use jiff::tz::TimeZone;

/// How `ls -l` and `stat` print a time (GNU ls's `--time-style` names).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum TimeStyle {
    /// `Nov 27 18:42` within six months of now, `Nov 27  2025` otherwise
    /// (ls's default).
    #[default]
    Locale,
    /// `2026-11-27 18:42`.
    LongIso,
    /// `2026-11-27 18:42:59.071359722 +0000` (`--full-time`, stat's form).
    FullIso,
    /// `11-27 18:42` within six months of now, `2026-11-27` otherwise.
    Iso,
    /// `1795592877.071359722`: seconds since 1970-01-01 UTC.
    Epoch,
}

/// Half of an average Gregorian year: GNU ls's limit for a "recent" time.
const SIX_MONTHS: i64 = 31_556_952 / 2;

/// `t` in `style`, "recent" judged against `now` (seconds).
pub fn format(t: Timestamp, style: TimeStyle, now: i64) -> String {
    if style == TimeStyle::Epoch {
        return format!("{}.{:09}", t.secs, t.nsecs);
    }
    let Some(z) = zoned(t) else {
        return format!("{}.{:09}", t.secs, t.nsecs);
    };
    let recent = t.secs <= now && now - t.secs < SIX_MONTHS;
    match style {
        TimeStyle::Locale if recent => z.strftime("%b %e %H:%M").to_string(),
        TimeStyle::Locale => z.strftime("%b %e  %Y").to_string(),
        TimeStyle::LongIso => z.strftime("%Y-%m-%d %H:%M").to_string(),
        TimeStyle::Iso if recent => z.strftime("%m-%d %H:%M").to_string(),
        TimeStyle::Iso => z.strftime("%Y-%m-%d ").to_string(),
        TimeStyle::FullIso | TimeStyle::Epoch => full_iso(&z, t.nsecs),
    }
}

/// `2026-11-27 18:42:59.071359722 +0000`.
fn full_iso(z: &Zoned, nsecs: u32) -> String {
    format!("{}.{nsecs:09} {}", z.strftime("%Y-%m-%d %H:%M:%S"), z.strftime("%z"))
}

/// dumpe2fs's form, `ctime(3)`'s: `Fri Nov 27 18:42:59 2026`; `n/a` for 0,
/// which the superblock uses for "never".
pub fn ctime(secs: i64) -> String {
    if secs == 0 {
        return "n/a".into();
    }
    zoned(Timestamp { secs, nsecs: 0 })
        .map_or_else(|| secs.to_string(), |z| z.strftime("%a %b %e %H:%M:%S %Y").to_string())
}

/// Seconds now, for [`format`]'s "recent".
pub fn now() -> i64 {
    jiff::Timestamp::now().as_second()
}

fn zoned(t: Timestamp) -> Option<Zoned> {
    let ts = jiff::Timestamp::new(t.secs, i32::try_from(t.nsecs).ok()?).ok()?;
    Some(ts.to_zoned(TimeZone::system()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(secs: i64, nsecs: u32) -> Timestamp {
        Timestamp { secs, nsecs }
    }

    /// With TZ unset the zone is the machine's; these compare shapes and
    /// the UTC offset's effect by formatting both sides the same way.
    #[test]
    fn styles_have_ls_shapes() {
        let now = 1_795_592_877;
        let t = at(now - 60, 71_359_722);
        let full = format(t, TimeStyle::FullIso, now);
        assert_eq!(full.len(), "2026-11-27 18:41:57.071359722 +0000".len(), "{full}");
        assert!(full.contains(".071359722 "), "{full}");
        assert_eq!(format(t, TimeStyle::Epoch, now), "1795592817.071359722");
        assert_eq!(format(t, TimeStyle::LongIso, now).len(), 16);
        let recent = format(t, TimeStyle::Locale, now);
        let old = format(at(now - 400 * 86_400, 0), TimeStyle::Locale, now);
        assert!(recent.contains(':') && !old.contains(':'), "{recent} / {old}");
        assert_eq!(recent.len(), 12);
        assert_eq!(old.len(), 12);
        assert!(
            !format(at(now + 86_400, 0), TimeStyle::Locale, now).contains(':'),
            "a future time shows its year"
        );
        assert_eq!(ctime(0), "n/a");
        assert_eq!(ctime(now).len(), 24);
    }
}
