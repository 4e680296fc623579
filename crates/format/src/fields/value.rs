//! Reading a field's value from text, as debugfs's `parse_*` functions do.

use super::{Field, Kind};

/// What a value may need from outside this pure crate.
#[derive(Debug, Clone, Copy)]
pub struct Context {
    /// Seconds since the epoch, for the time `now`.
    pub now: i64,
    /// Sixteen random bytes (a version-4 UUID), for `random` and `time`.
    pub random: [u8; 16],
}

/// A parsed value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    /// A number, already encoded in the field's width (times with their
    /// high or epoch bits, signed values in two's complement).
    Num(u64),
    /// Bytes for a text or UUID field.
    Bytes(Vec<u8>),
    /// `calc` for a checksum: the writer recomputes it.
    Calc,
}

/// Reads `text` as a value of `field`; the error says what was expected.
pub fn parse(field: &Field, text: &str, ctx: &Context) -> Result<Value, String> {
    let bits = field.bits();
    let fits = |n: u64| {
        if bits >= 64 || n >> bits == 0 {
            Ok(Value::Num(n))
        } else {
            Err(format!("{text}: too large for {} ({bits} bits)", field.name))
        }
    };
    match field.kind {
        Kind::Uint => fits(number(text)?),
        Kind::Checksum if text.eq_ignore_ascii_case("calc") => Ok(Value::Calc),
        Kind::Checksum => fits(number(text)?),
        Kind::HashAlg => fits(hash_alg(text).map_or_else(|| number(text), Ok)?),
        Kind::Int => signed(text, bits),
        Kind::SbTime => fits(seconds(text, ctx)? as u64),
        Kind::InodeTime => inode_time(seconds(text, ctx)?, field.hi.is_some()),
        Kind::Text => {
            if text.len() > field.lo.len {
                return Err(format!("{text}: longer than {} bytes", field.lo.len));
            }
            Ok(Value::Bytes(text.as_bytes().to_vec()))
        }
        Kind::Uuid => uuid(text, ctx).map(Value::Bytes),
    }
}

/// An unsigned number as `strtoull(…, 0)` reads it: decimal, `0x` hex
/// or `0` octal.
pub fn number(s: &str) -> Result<u64, String> {
    let r = if let Some(h) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        u64::from_str_radix(h, 16)
    } else if s.len() > 1 && s.starts_with('0') {
        u64::from_str_radix(&s[1..], 8)
    } else {
        s.parse()
    };
    r.map_err(|_| format!("{s}: not a number"))
}

fn signed(s: &str, bits: u32) -> Result<Value, String> {
    let (neg, digits) = s.strip_prefix('-').map_or((false, s), |d| (true, d));
    let n = i128::from(number(digits)?) * if neg { -1 } else { 1 };
    let (min, max) = (-(1i128 << (bits - 1)), (1i128 << bits) - 1);
    if n < min || n > max {
        return Err(format!("{s}: out of range for {bits} bits"));
    }
    Ok(Value::Num((n as u64) & (u64::MAX >> (64 - bits))))
}

fn hash_alg(s: &str) -> Option<u64> {
    let names = [
        "legacy",
        "half_md4",
        "tea",
        "legacy_unsigned",
        "half_md4_unsigned",
        "tea_unsigned",
        "siphash",
    ];
    names.iter().position(|n| n.eq_ignore_ascii_case(s)).map(|i| i as u64)
}

/// `now`, `@SECONDS`, `YYYYMMDD[HHMM[SS]]` (UTC) or a plain number.
fn seconds(s: &str, ctx: &Context) -> Result<i64, String> {
    if s.eq_ignore_ascii_case("now") {
        return Ok(ctx.now);
    }
    if let Some(n) = s.strip_prefix('@') {
        return n.parse().map_err(|_| format!("{s}: not @SECONDS"));
    }
    if matches!(s.len(), 8 | 12 | 14) && s.bytes().all(|b| b.is_ascii_digit()) {
        let d = |r: std::ops::Range<usize>| s.get(r).map_or(Ok(0), str::parse::<i64>);
        let parts = (d(0..4), d(4..6), d(6..8), d(8..10), d(10..12), d(12..14));
        if let (Ok(y), Ok(mo), Ok(day), Ok(h), Ok(mi), Ok(sec)) = parts
            && (1..=12).contains(&mo)
            && (1..=31).contains(&day)
        {
            return Ok(days_from_civil(y, mo, day) * 86400 + h * 3600 + mi * 60 + sec);
        }
    }
    number(s).map(|n| n as i64)
}

/// Days from 1970-01-01 to a proleptic Gregorian date.
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (m + if m > 2 { -3 } else { 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The kernel's `ext4_encode_extra_time`: the low 32 bits, and the epoch
/// bits that put the signed low word back at `secs`.
fn inode_time(secs: i64, has_extra: bool) -> Result<Value, String> {
    let lo = secs as u32;
    let epoch = (secs - i64::from(lo as i32)) >> 32;
    if !has_extra {
        return match i32::try_from(secs) {
            Ok(_) => Ok(Value::Num(u64::from(lo))),
            Err(_) => Err(format!("{secs}: outside a 32-bit time")),
        };
    }
    if !(0..4).contains(&epoch) {
        return Err(format!("{secs}: outside the years an inode time holds"));
    }
    Ok(Value::Num(u64::from(lo) | (epoch as u64) << 32))
}

fn uuid(s: &str, ctx: &Context) -> Result<Vec<u8>, String> {
    match s.to_ascii_lowercase().as_str() {
        "null" | "clear" => return Ok(vec![0; 16]),
        "random" | "time" => return Ok(ctx.random.to_vec()),
        _ => {}
    }
    let hex: String = s.chars().filter(|&c| c != '-').collect();
    if hex.len() != 32 || s.len() != 36 {
        return Err(format!("{s}: not a UUID"));
    }
    (0..16)
        .map(|i| u8::from_str_radix(&hex[i * 2..i * 2 + 2], 16).map_err(|_| format!("{s}: not a UUID")))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::super::{INODE, SUPERBLOCK, find};
    use super::*;

    const CTX: Context = Context {
        now: 1_700_000_000,
        random: [7; 16],
    };

    fn val(table: &'static [Field], name: &str, text: &str) -> Result<Value, String> {
        parse(find(table, name).unwrap().0, text, &CTX)
    }

    #[test]
    fn numbers_times_and_names() {
        assert_eq!(val(SUPERBLOCK, "mnt_count", "0x10"), Ok(Value::Num(16)));
        assert_eq!(val(SUPERBLOCK, "mnt_count", "010"), Ok(Value::Num(8)));
        assert!(val(SUPERBLOCK, "mnt_count", "65536").is_err());
        assert_eq!(val(SUPERBLOCK, "max_mnt_count", "-1"), Ok(Value::Num(0xFFFF)));
        assert_eq!(val(SUPERBLOCK, "def_hash_version", "tea"), Ok(Value::Num(2)));
        assert_eq!(
            val(SUPERBLOCK, "lastcheck", "20231114221320"),
            Ok(Value::Num(1_700_000_000))
        );
        assert_eq!(val(SUPERBLOCK, "wtime", "now"), Ok(Value::Num(1_700_000_000)));
        assert_eq!(val(SUPERBLOCK, "uuid", "null"), Ok(Value::Bytes(vec![0; 16])));
        assert!(val(SUPERBLOCK, "volume_name", "seventeen chars!!").is_err());
        assert_eq!(val(INODE, "checksum", "calc"), Ok(Value::Calc));
        // 2038-01-19T03:14:08Z needs the first epoch bit beside a negative low word.
        assert_eq!(val(INODE, "mtime", "@2147483648"), Ok(Value::Num(0x1_8000_0000)));
        assert!(val(INODE, "dtime", "@4294967296").is_err());
    }

    #[test]
    fn names_prefixes_and_indexes() {
        assert_eq!(find(SUPERBLOCK, "s_mnt_count").unwrap().0.name, "mnt_count");
        assert_eq!(find(INODE, "block[IND]").unwrap().1, 12);
        assert_eq!(find(INODE, "i_block[3]").unwrap().1, 3);
        assert!(find(INODE, "block").is_none());
        assert!(find(INODE, "block[15]").is_none());
        assert!(find(SUPERBLOCK, "magic").is_none());
    }

    /// Each table entry writes where the raw structure's own field lies.
    #[test]
    fn store_agrees_with_the_raw_structures() {
        use crate::superblock::RawSuperblock;
        use zerocopy::{FromBytes, IntoBytes};
        let mut buf = vec![0u8; 1024];
        let f = find(SUPERBLOCK, "blocks_count").unwrap().0;
        f.store(&mut buf, 0, &Value::Num(0x1_0000_0002));
        let f2 = find(SUPERBLOCK, "mtime").unwrap().0;
        f2.store(&mut buf, 0, &Value::Num(0x2_0000_0003));
        let sb = RawSuperblock::read_from_bytes(&buf).unwrap();
        assert_eq!((sb.s_blocks_count_lo.get(), sb.s_blocks_count_hi.get()), (2, 1));
        assert_eq!((sb.s_mtime.get(), sb.s_mtime_hi), (3, 2));
        assert_eq!(f.load(sb.as_bytes(), 0), Value::Num(0x1_0000_0002));
        let mut ib = vec![0u8; 256];
        let t = find(INODE, "mtime").unwrap().0;
        ib[t.hi.unwrap().offset] = 0x14; // nanoseconds kept
        t.store(&mut ib, 0, &Value::Num(0x1_0000_0005));
        assert_eq!(ib[t.hi.unwrap().offset], 0x15);
        assert_eq!(t.load(&ib, 0), Value::Num(0x1_0000_0005));
    }
}
