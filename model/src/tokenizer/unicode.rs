//! Code point classification exactly as llama.cpp's `unicode.cpp` does it (its own tables,
//! copied into [`super::unicode_data`]), and the GPT-2 byte ↔ code point mapping.

use std::sync::OnceLock;

use super::unicode_data::{LOWERCASE, RANGES_FLAGS, WHITESPACE};

/// Category flags of one code point (llama.cpp's `unicode_cpt_flags`, same bit layout).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Flags(pub u16);

impl Flags {
    pub const UNDEFINED: u16 = 0x0001;
    pub const NUMBER: u16 = 0x0002;
    pub const LETTER: u16 = 0x0004;
    #[allow(dead_code)]
    pub const SEPARATOR: u16 = 0x0008;
    pub const ACCENT_MARK: u16 = 0x0010;
    pub const PUNCTUATION: u16 = 0x0020;
    pub const SYMBOL: u16 = 0x0040;
    #[allow(dead_code)]
    pub const CONTROL: u16 = 0x0080;
    pub const MASK_CATEGORIES: u16 = 0x00FF;
    pub const WHITESPACE: u16 = 0x0100;

    #[inline]
    pub fn is_number(self) -> bool {
        self.0 & Self::NUMBER != 0
    }
    #[inline]
    pub fn is_letter(self) -> bool {
        self.0 & Self::LETTER != 0
    }
    #[inline]
    pub fn is_accent_mark(self) -> bool {
        self.0 & Self::ACCENT_MARK != 0
    }
    #[inline]
    pub fn is_whitespace(self) -> bool {
        self.0 & Self::WHITESPACE != 0
    }
    /// Non-zero: the code point exists (out-of-range positions read as 0).
    #[inline]
    pub fn any(self) -> bool {
        self.0 != 0
    }
    #[inline]
    pub fn category(self) -> u16 {
        self.0 & Self::MASK_CATEGORIES
    }
}

/// Flags for the first 64K code points as a flat table (128 KiB), the rest by binary search.
fn bmp_table() -> &'static [u16] {
    static TABLE: OnceLock<Vec<u16>> = OnceLock::new();
    TABLE.get_or_init(|| {
        let mut t = vec![0u16; 0x10000];
        for w in RANGES_FLAGS.windows(2) {
            let (start, flags) = w[0];
            let end = w[1].0.min(0x10000);
            if start >= 0x10000 {
                break;
            }
            for v in &mut t[start as usize..end as usize] {
                *v = flags;
            }
        }
        for &ws in WHITESPACE.iter() {
            if ws < 0x10000 {
                t[ws as usize] |= Flags::WHITESPACE;
            }
        }
        t
    })
}

/// `unicode_cpt_flags_from_cpt`.
#[inline]
pub(crate) fn flags(cpt: u32) -> Flags {
    if cpt < 0x10000 {
        return Flags(bmp_table()[cpt as usize]);
    }
    if cpt >= 0x110000 {
        return Flags(Flags::UNDEFINED);
    }
    let i = RANGES_FLAGS.partition_point(|&(start, _)| start <= cpt) - 1;
    let mut f = RANGES_FLAGS[i].1;
    if WHITESPACE.binary_search(&cpt).is_ok() {
        f |= Flags::WHITESPACE;
    }
    Flags(f)
}

/// `unicode_tolower`: simple one-to-one lowercase mapping, identity if none.
pub(crate) fn to_lower(cpt: u32) -> u32 {
    match LOWERCASE.binary_search_by_key(&cpt, |&(c, _)| c) {
        Ok(i) => LOWERCASE[i].1,
        Err(_) => cpt,
    }
}

/// GPT-2's byte → printable code point table (`unicode_byte_to_utf8_map`).
pub(crate) fn byte_to_char(b: u8) -> char {
    BYTE_TABLES.get_or_init(build_byte_tables).0[b as usize]
}

/// The inverse of [`byte_to_char`] (`unicode_utf8_to_byte`).
pub(crate) fn char_to_byte(c: char) -> Option<u8> {
    let (_, inv) = BYTE_TABLES.get_or_init(build_byte_tables);
    let c = c as u32;
    if c < 0x200 {
        let b = inv[c as usize];
        (b >= 0).then_some(b as u8)
    } else {
        None
    }
}

type ByteTables = ([char; 256], [i16; 0x200]);
static BYTE_TABLES: OnceLock<ByteTables> = OnceLock::new();

fn build_byte_tables() -> ByteTables {
    let mut fwd = ['\0'; 256];
    let mut set = [false; 256];
    for ch in (0x21..=0x7E).chain(0xA1..=0xAC).chain(0xAE..=0xFF) {
        fwd[ch] = char::from_u32(ch as u32).unwrap();
        set[ch] = true;
    }
    let mut n = 0;
    for ch in 0..256 {
        if !set[ch] {
            fwd[ch] = char::from_u32(256 + n).unwrap();
            n += 1;
        }
    }
    let mut inv = [-1i16; 0x200];
    for (b, &c) in fwd.iter().enumerate() {
        inv[c as usize] = b as i16;
    }
    (fwd, inv)
}

/// Is `cpt` in the Han ranges llama.cpp lists (`unicode_cpt_is_han`).
#[allow(dead_code)]
pub(crate) fn is_han(cpt: u32) -> bool {
    matches!(cpt,
        0x4E00..=0x9FFF | 0x3400..=0x4DBF | 0x20000..=0x2A6DF | 0x2A700..=0x2B73F
        | 0x2B740..=0x2B81F | 0x2B820..=0x2CEAF | 0x2CEB0..=0x2EBEF | 0xF900..=0xFAFF
        | 0x2F800..=0x2FA1F)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes() {
        assert!(flags('a' as u32).is_letter());
        assert!(flags('7' as u32).is_number());
        assert!(flags(' ' as u32).is_whitespace());
        assert!(flags(0x3000).is_whitespace());
        assert!(flags('é' as u32).is_letter());
        assert!(flags(0x1F999).any()); // 🦙
        assert!(!flags(0x1F999).is_letter());
        assert!(flags(0x20000).is_letter()); // CJK ext B
        assert_eq!(to_lower('A' as u32), 'a' as u32);
        assert_eq!(to_lower('Ä' as u32), 'ä' as u32);
    }

    #[test]
    fn byte_map_roundtrip() {
        assert_eq!(byte_to_char(b' '), 'Ġ');
        assert_eq!(byte_to_char(b'\n'), 'Ċ');
        assert_eq!(byte_to_char(b'a'), 'a');
        for b in 0..=255u8 {
            assert_eq!(char_to_byte(byte_to_char(b)), Some(b));
        }
    }
}
