//! A bounds-checked little-endian cursor over the file's bytes. Every read checks the
//! bytes that remain first, so a truncated or hostile file ends in `GgufError::Truncated`.

use super::error::{GgufError, Result};

pub(crate) struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    pub fn new(bytes: &'a [u8]) -> Self {
        Cursor { bytes, pos: 0 }
    }

    pub fn at(bytes: &'a [u8], pos: usize) -> Self {
        Cursor { bytes, pos }
    }

    pub fn pos(&self) -> usize {
        self.pos
    }

    pub fn remaining(&self) -> usize {
        self.bytes.len().saturating_sub(self.pos)
    }

    /// Takes `n` bytes, or fails naming `what` was being read.
    pub fn take(&mut self, n: u64, what: &dyn Fn() -> String) -> Result<&'a [u8]> {
        let available = self.remaining() as u64;
        if n > available {
            return Err(GgufError::Truncated {
                what: what(),
                offset: self.pos as u64,
                needed: n,
                available,
            });
        }
        let start = self.pos;
        self.pos += n as usize; // n <= remaining, so this fits in usize
        Ok(&self.bytes[start..self.pos])
    }

    pub fn array<const N: usize>(&mut self, what: &dyn Fn() -> String) -> Result<[u8; N]> {
        let s = self.take(N as u64, what)?;
        let mut out = [0u8; N];
        out.copy_from_slice(s);
        Ok(out)
    }

    pub fn u8(&mut self, what: &dyn Fn() -> String) -> Result<u8> {
        Ok(self.array::<1>(what)?[0])
    }
    pub fn u32(&mut self, what: &dyn Fn() -> String) -> Result<u32> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }
    pub fn u64(&mut self, what: &dyn Fn() -> String) -> Result<u64> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }

    /// A GGUF string: u64 length then that many bytes (not necessarily UTF-8).
    pub fn string(&mut self, what: &dyn Fn() -> String) -> Result<&'a [u8]> {
        let len = self.u64(&|| format!("length of {}", what()))?;
        self.take(len, what)
    }

    /// Checks that `count` items of at least `min_size` bytes each can still fit, before
    /// anything is allocated for them.
    pub fn check_count(&self, count: u64, min_size: u64, what: &dyn Fn() -> String) -> Result<()> {
        let remaining = self.remaining() as u64;
        match count.checked_mul(min_size) {
            Some(need) if need <= remaining => Ok(()),
            _ => Err(GgufError::AbsurdCount {
                what: what(),
                count,
                offset: self.pos as u64,
                remaining,
            }),
        }
    }
}

impl<'a> Cursor<'a> {
    /// The bytes from `start` up to the cursor.
    pub fn slice_from(&self, start: usize) -> &'a [u8] {
        &self.bytes[start.min(self.pos)..self.pos]
    }
}
