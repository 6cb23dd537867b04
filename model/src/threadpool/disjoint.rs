//! Each item of a [`super::ThreadPool::run_items`] job writes its own piece of one output
//! buffer. The pieces are split off the buffer before the job (safe `split_at_mut`), each
//! behind its own lock: only the item's thread ever takes it, so the lock is never
//! contended and costs an atomic pair per item.

use std::sync::{Mutex, MutexGuard};

pub struct Disjoint<'a, T>(Vec<Mutex<&'a mut [T]>>);

impl<'a, T> Disjoint<'a, T> {
    /// `buf` cut into consecutive pieces of `lens` (what is left after them is dropped).
    pub fn split(mut buf: &'a mut [T], lens: impl IntoIterator<Item = usize>) -> Self {
        let mut pieces = Vec::new();
        for len in lens {
            let (a, b) = std::mem::take(&mut buf).split_at_mut(len);
            pieces.push(Mutex::new(a));
            buf = b;
        }
        Disjoint(pieces)
    }

    /// Pieces already split off (as `PackedMatrix::split_out` returns them).
    pub fn from_pieces(pieces: Vec<&'a mut [T]>) -> Self {
        Disjoint(pieces.into_iter().map(Mutex::new).collect())
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Piece `i`, for the item that owns it.
    pub fn piece(&self, i: usize) -> MutexGuard<'_, &'a mut [T]> {
        // A poisoned piece belongs to an item that panicked; the pool re-raises that panic.
        self.0[i].lock().unwrap_or_else(|p| p.into_inner())
    }
}
