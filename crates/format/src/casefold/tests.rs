use super::*;

fn f(s: &str) -> String {
    String::from_utf8(fold(s.as_bytes()).unwrap()).unwrap()
}

#[test]
fn folds_case_and_canonical_equivalents_together() {
    assert_eq!(f("ABC"), "abc");
    assert_eq!(f("Straße"), f("STRASSE"));
    // Å as one code point, as A + ring, and as the Angstrom sign.
    assert_eq!(f("\u{c5}"), f("A\u{30a}"));
    assert_eq!(f("\u{212b}"), f("\u{e5}"));
    assert_eq!(f("\u{3a3}"), f("\u{3c2}"));
}

#[test]
fn drops_default_ignorables() {
    assert_eq!(f("a\u{200b}b"), "ab");
    assert_eq!(f("a\u{ad}b\u{feff}"), "ab");
    assert_eq!(f("a\u{80}b"), "a\u{80}b");
}

#[test]
fn invalid_utf8_is_compared_raw() {
    assert_eq!(fold(b"a\xffb"), None);
    let key = FoldedName::new(b"A\xff");
    assert!(key.matches(b"A\xff"));
    assert!(!key.matches(b"a\xff"));
    assert!(FoldedName::new(b"Readme").matches(b"README"));
}

#[test]
fn strict_mode_refuses_invalid_utf8() {
    let strict = Encoding::from_superblock(ENCODING_UTF8_12_1, ENCODING_FLAG_STRICT).unwrap();
    assert!(!strict.accepts(b"a\xff"));
    assert!(strict.accepts("é".as_bytes()));
    let lax = Encoding::from_superblock(ENCODING_UTF8_12_1, 0).unwrap();
    assert!(lax.accepts(b"a\xff"));
    assert_eq!(Encoding::from_superblock(2, 0), None);
}

#[test]
fn hash_input_falls_back_to_raw_when_too_long() {
    // U+0390 folds to three code points (6 bytes) from 2 bytes.
    let long = "\u{390}".repeat(100);
    assert_eq!(&*hash_input(long.as_bytes()), long.as_bytes());
    assert_eq!(&*hash_input(b"AbC"), b"abc");
}

#[test]
fn characters_newer_than_12_1_are_kept() {
    // U+2C2F (Glagolitic, 14.0) would fold to U+2C5F with newer data.
    assert_eq!(f("A\u{2c2f}B"), "a\u{2c2f}b");
    assert_eq!(f("\u{10570}"), "\u{10570}");
}
