//! The time stamped on changed inodes. `SOURCE_DATE_EPOCH`, when set, fixes
//! it so that the same operations give byte-identical images.

use ext4kit_format::inode::Timestamp;

/// Now, or `SOURCE_DATE_EPOCH` when set. The variable is read once per
/// process: every write stamps a time, and reading the environment takes
/// its lock.
pub(crate) fn now() -> Timestamp {
    static FIXED: std::sync::OnceLock<Option<i64>> = std::sync::OnceLock::new();
    let fixed = FIXED.get_or_init(|| {
        std::env::var("SOURCE_DATE_EPOCH")
            .ok()
            .and_then(|s| s.parse::<i64>().ok())
    });
    if let Some(secs) = *fixed {
        return Timestamp { secs, nsecs: 0 };
    }
    let d = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    Timestamp {
        secs: d.as_secs() as i64,
        nsecs: d.subsec_nanos(),
    }
}

/// Encodes a timestamp as the 32-bit seconds field and its `_extra` word.
pub(crate) fn encode(t: Timestamp) -> (u32, u32) {
    let epoch = ((t.secs - i64::from(t.secs as i32)) >> 32) as u32 & 3;
    (t.secs as u32, (t.nsecs << 2) | epoch)
}
