//! Characters assigned after Unicode 12.1 that have a case folding or a
//! decomposition in the newer data of the `caseless` and
//! `unicode-normalization` crates. The utf8-12.1 tables do not know them
//! and keep them as they are, so the fold does too. The list is what
//! `tests/casefold_debugfs.rs` finds differing from
//! `debugfs dx_hash -c -e utf8` (e2fsprogs 1.47.0) over planes 0 to 2 when
//! they are folded: Latin and Cyrillic additions (13.0-16.0), Glagolitic
//! U+2C2F, Vithkuqi, Todhri, Garay, Tulu-Tigalari, Dives Akuru, Gurung
//! Khema and Kirat Rai. Planes 3 and up hold no cased or decomposable
//! characters.

/// Inclusive ranges, sorted.
const RANGES: &[(u32, u32)] = &[
    (0x1C89, 0x1C89),
    (0x2C2F, 0x2C2F),
    (0xA7C0, 0xA7C0),
    (0xA7C7, 0xA7C7),
    (0xA7C9, 0xA7C9),
    (0xA7CB, 0xA7CC),
    (0xA7D0, 0xA7D0),
    (0xA7D6, 0xA7D6),
    (0xA7D8, 0xA7D8),
    (0xA7DA, 0xA7DA),
    (0xA7DC, 0xA7DC),
    (0xA7F5, 0xA7F5),
    (0x10570, 0x1057A),
    (0x1057C, 0x1058A),
    (0x1058C, 0x10592),
    (0x10594, 0x10595),
    (0x105C9, 0x105C9),
    (0x105E4, 0x105E4),
    (0x10D50, 0x10D65),
    (0x11383, 0x11383),
    (0x11385, 0x11385),
    (0x1138E, 0x1138E),
    (0x11391, 0x11391),
    (0x113C5, 0x113C5),
    (0x113C7, 0x113C8),
    (0x11938, 0x11938),
    (0x16121, 0x16128),
    (0x16D68, 0x16D6A),
];

/// Whether `c` is kept unfolded as the 12.1 tables keep it.
pub(super) fn is_newer(c: char) -> bool {
    super::in_ranges(RANGES, c)
}
