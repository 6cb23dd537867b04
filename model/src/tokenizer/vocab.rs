//! The vocabulary: token texts in one arena, their scores and attributes, and the
//! text → id index (an open-addressing [`StrTable`]).

use super::unicode;

/// Open-addressing table of ids whose strings live in an arena: no per-string allocation,
/// and each slot keeps 32 bits of the hash so that probing rarely touches the arena.
pub(crate) struct StrTable {
    /// `hash_hi32 << 32 | id`, or `EMPTY`
    slots: Vec<u64>,
    mask: usize,
}

const EMPTY: u64 = u64::MAX;

#[inline]
fn hash_bytes(b: &[u8]) -> u64 {
    const K: u64 = 0x517c_c1b7_2722_0a95;
    let mut h = b.len() as u64;
    let mut chunks = b.chunks_exact(8);
    for c in &mut chunks {
        h = (h.rotate_left(5) ^ u64::from_le_bytes(c.try_into().unwrap())).wrapping_mul(K);
    }
    let rem = chunks.remainder();
    if !rem.is_empty() {
        let mut buf = [0u8; 8];
        buf[..rem.len()].copy_from_slice(rem);
        h = (h.rotate_left(5) ^ u64::from_le_bytes(buf)).wrapping_mul(K);
    }
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^ (h >> 33)
}

impl StrTable {
    pub fn with_capacity(n: usize) -> Self {
        let cap = (n + n / 2).next_power_of_two().max(16);
        StrTable {
            slots: vec![EMPTY; cap],
            mask: cap - 1,
        }
    }

    /// Inserts `id` under `s`; an existing entry is replaced only if `overwrite`.
    pub fn insert<'k>(&mut self, s: &str, id: u32, overwrite: bool, key: impl Fn(u32) -> &'k str) {
        let (i, tag) = self.probe(s, key);
        if self.slots[i] == EMPTY || overwrite {
            self.slots[i] = tag | id as u64;
        }
    }

    pub fn find<'k>(&self, s: &str, key: impl Fn(u32) -> &'k str) -> Option<u32> {
        let (i, _) = self.probe(s, key);
        let cur = self.slots[i];
        (cur != EMPTY).then_some(cur as u32)
    }

    /// The slot holding `s`, or else the empty slot where it belongs; and `s`'s hash tag.
    #[inline]
    fn probe<'k>(&self, s: &str, key: impl Fn(u32) -> &'k str) -> (usize, u64) {
        let h = hash_bytes(s.as_bytes());
        let tag = h & 0xFFFF_FFFF_0000_0000;
        let mut i = h as usize & self.mask;
        loop {
            let cur = self.slots[i];
            if cur == EMPTY || (cur & 0xFFFF_FFFF_0000_0000 == tag && key(cur as u32) == s) {
                return (i, tag);
            }
            i = (i + 1) & self.mask;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// vocabulary

/// Token texts, scores and attributes, with the text → id index.
pub(crate) struct Vocab {
    arena: String,
    offs: Vec<u32>,
    scores: Vec<f32>,
    attrs: Vec<u16>,
    table: StrTable,
    spm: bool,
}

impl Vocab {
    /// The vocabulary of `texts` (each non-empty; ids in order), with `scores` (may be
    /// empty) and `attrs` (one per token). `spm` picks SentencePiece byte tokens.
    pub fn new<S: AsRef<str>>(
        texts: impl IntoIterator<Item = S>,
        scores: Vec<f32>,
        attrs: Vec<u16>,
        spm: bool,
    ) -> Vocab {
        let mut arena = String::with_capacity(attrs.len() * 8);
        let mut offs = Vec::with_capacity(attrs.len() + 1);
        offs.push(0u32);
        for t in texts {
            arena.push_str(t.as_ref());
            offs.push(arena.len() as u32);
        }
        let n = offs.len() - 1;
        let mut table = StrTable::with_capacity(n);
        let text = |j: u32| &arena[offs[j as usize] as usize..offs[j as usize + 1] as usize];
        for id in 0..n as u32 {
            table.insert(text(id), id, true, text);
        }
        Vocab {
            arena,
            offs,
            scores,
            attrs,
            table,
            spm,
        }
    }
    #[inline]
    pub fn len(&self) -> usize {
        self.offs.len() - 1
    }
    #[inline]
    pub fn text(&self, id: u32) -> &str {
        &self.arena[self.offs[id as usize] as usize..self.offs[id as usize + 1] as usize]
    }
    #[inline]
    pub fn find(&self, s: &str) -> Option<u32> {
        self.table.find(s, |id| self.text(id))
    }
    #[inline]
    pub fn score(&self, id: u32) -> f32 {
        self.scores.get(id as usize).copied().unwrap_or(0.0)
    }
    #[inline]
    pub fn attr(&self, id: u32) -> u16 {
        self.attrs[id as usize]
    }
    /// The attribute bits of `id`, to adjust while loading.
    pub fn attr_mut(&mut self, id: u32) -> &mut u16 {
        &mut self.attrs[id as usize]
    }
    /// `llama_vocab::byte_to_token`: `<0xXX>`, else the byte itself as a token (SPM), or
    /// the GPT-2 byte character (BPE).
    pub fn byte_to_token(&self, b: u8) -> Option<u32> {
        if self.spm {
            self.find(&format!("<0x{b:02X}>"))
                .or_else(|| std::str::from_utf8(&[b]).ok().and_then(|s| self.find(s)))
        } else {
            let mut buf = [0u8; 4];
            self.find(unicode::byte_to_char(b).encode_utf8(&mut buf))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn str_table() {
        let words = ["a", "bb", "ccc", "a", "dddddddddddddddddd"];
        let mut t = StrTable::with_capacity(words.len());
        for (i, w) in words.iter().enumerate() {
            t.insert(w, i as u32, true, |id| words[id as usize]);
        }
        assert_eq!(t.find("a", |id| words[id as usize]), Some(3));
        assert_eq!(t.find("ccc", |id| words[id as usize]), Some(2));
        assert_eq!(t.find("x", |id| words[id as usize]), None);
    }
}
