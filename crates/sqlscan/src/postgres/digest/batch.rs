//! The digest [`scan`](crate::postgres::scan) computes: the cursor hands each token to a small
//! queue, and the queue feeds a hash-only digester eight tokens at a time.
//!
//! Feeding the digester from inside the cursor's token fetch made that hot function several
//! times larger and the classification slower than the digest's own work; a tight loop over a
//! few queued tokens keeps the digester's state in registers and the fetch small.

use super::{Digester, HashOnly};
use crate::postgres::lexer::{Kind, Token};

/// Tokens per batch.
const BATCH: usize = 8;

/// A hash-only digest fed one token at a time, in batches.
pub(crate) struct Batched {
    digester: Digester<HashOnly>,
    queue: [Token; BATCH],
    queued: usize,
}

impl Batched {
    pub(crate) fn new() -> Self {
        let none = Token {
            kind: Kind::Comment,
            start: 0,
            end: 0,
        };
        Batched {
            digester: Digester::new(HashOnly),
            queue: [none; BATCH],
            queued: 0,
        }
    }

    /// Takes the next token of `src` (not a comment).
    #[inline(always)]
    pub(crate) fn push(&mut self, src: &[u8], t: Token) {
        if let Some(slot) = self.queue.get_mut(self.queued) {
            *slot = t;
            self.queued += 1;
        } else {
            self.flush(src);
            self.queue[0] = t;
            self.queued = 1;
        }
    }

    #[inline(never)]
    fn flush(&mut self, src: &[u8]) {
        for t in self.queue.get(..self.queued).unwrap_or_default() {
            self.digester.feed(src, t);
        }
        self.queued = 0;
    }

    /// The id of the whole text (taken by reference: moving the queue would copy it).
    pub(crate) fn finish(&mut self, src: &[u8]) -> u64 {
        self.flush(src);
        self.digester.finish()
    }
}
