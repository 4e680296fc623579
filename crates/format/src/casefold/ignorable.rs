//! `Default_Ignorable_Code_Point` (Unicode 12.1 `DerivedCoreProperties.txt`):
//! characters the casefold tables of e2fsprogs 1.47 (and the kernel before
//! 6.12's "don't special case ignorable code points") map to nothing, so
//! `a\u{200B}b` and `ab` name the same entry. Checked against
//! `debugfs -R "dx_hash -c -e utf8 …"` over every BMP code point.

/// Inclusive ranges, sorted.
const RANGES: &[(u32, u32)] = &[
    (0xAD, 0xAD),
    (0x34F, 0x34F),
    (0x61C, 0x61C),
    (0x115F, 0x1160),
    (0x17B4, 0x17B5),
    (0x180B, 0x180E),
    (0x200B, 0x200F),
    (0x202A, 0x202E),
    (0x2060, 0x206F),
    (0x3164, 0x3164),
    (0xFE00, 0xFE0F),
    (0xFEFF, 0xFEFF),
    (0xFFA0, 0xFFA0),
    (0xFFF0, 0xFFF8),
    (0x1BCA0, 0x1BCA3),
    (0x1D173, 0x1D17A),
    (0xE0000, 0xE0FFF),
];

/// Whether `c` is dropped by the fold.
pub(super) fn is_ignorable(c: char) -> bool {
    super::in_ranges(RANGES, c)
}
