//! Where a digest goes: always into its hash, and into a bounded text when one is wanted. Both
//! can be marked and rewound, so that a list of literals can be replaced once it is known to be
//! one.
//!
//! The hash takes the normalised text's bytes eight at a time: each block of eight is mixed in
//! with one 64×64→128-bit multiplication whose halves are folded together (the construction of
//! wyhash and foldhash), and the last bytes and their number at the end. It is a function of
//! the text's bytes alone, however they are pushed. FNV-1a, which the MySQL digest uses, takes
//! a multiplication per byte: on the tokens of pgbench's select that chain alone cost about as
//! much as all the rest of the digest.

use crate::digest::MAX_TEXT;
use crate::postgres::packed;

/// Receives the normalised text, or nothing of it.
pub(crate) trait Sink {
    /// Appends `bytes`.
    fn push(&mut self, bytes: &[u8]);
    /// The current length and whether the text is full, to rewind to.
    fn mark(&self) -> (usize, bool);
    /// Goes back to a length and fullness [`Sink::mark`] returned.
    fn rewind(&mut self, to: (usize, bool));
}

/// The sink of the hash-only digest.
pub(crate) struct HashOnly;

impl Sink for HashOnly {
    #[inline(always)]
    fn push(&mut self, _: &[u8]) {}
    #[inline(always)]
    fn mark(&self) -> (usize, bool) {
        (0, false)
    }
    #[inline(always)]
    fn rewind(&mut self, _: (usize, bool)) {}
}

/// The normalised text, cut at [`MAX_TEXT`] bytes on a UTF-8 character boundary.
pub(crate) struct Text<'o> {
    out: &'o mut Vec<u8>,
    /// The text reached [`MAX_TEXT`]: nothing more is appended.
    full: bool,
}

impl<'o> Text<'o> {
    /// Writes into `out`, cleared first.
    pub(crate) fn new(out: &'o mut Vec<u8>) -> Self {
        out.clear();
        Text { out, full: false }
    }
}

impl Sink for Text<'_> {
    fn push(&mut self, bytes: &[u8]) {
        if self.full {
            return;
        }
        let room = MAX_TEXT.saturating_sub(self.out.len());
        if bytes.len() <= room {
            self.out.extend_from_slice(bytes);
            return;
        }
        let mut cut = room;
        while cut > 0 && bytes.get(cut).is_some_and(|&b| b & 0xC0 == 0x80) {
            cut -= 1;
        }
        self.out.extend_from_slice(&bytes[..cut]);
        self.full = true;
        // A long word comes in pieces of eight bytes: a character begun in an earlier piece
        // and cut here goes too.
        let len = self.out.len();
        let lead = (len.saturating_sub(4)..len)
            .rev()
            .find(|&i| self.out[i] & 0xC0 != 0x80);
        if let Some(i) = lead {
            let need = match self.out[i] {
                0xC0..=0xDF => 2,
                0xE0..=0xEF => 3,
                0xF0..=0xF7 => 4,
                _ => 1,
            };
            if len - i < need {
                self.out.truncate(i);
            }
        }
    }

    fn mark(&self) -> (usize, bool) {
        (self.out.len(), self.full)
    }

    fn rewind(&mut self, (len, full): (usize, bool)) {
        self.out.truncate(len);
        self.full = full;
    }
}

/// The running hash of the normalised text, which covers all of it whatever the text keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Hash {
    /// The blocks of eight bytes so far.
    h: u64,
    /// The bytes after the last block, little-endian.
    acc: u64,
    /// How many: 0 to 7.
    fill: u32,
}

const SEED: u64 = 0x243F_6A88_85A3_08D3;
const K1: u64 = 0x9E37_79B9_7F4A_7C15;
const K2: u64 = 0xC2B2_AE3D_27D4_EB4F;

/// The high and low halves of a 128-bit product, folded.
#[inline(always)]
fn fold_mul(a: u64, b: u64) -> u64 {
    let m = u128::from(a) * u128::from(b);
    (m as u64) ^ ((m >> 64) as u64)
}

impl Hash {
    /// Appends the `n` low bytes of `w` (1 to 8; the bytes above them are zero).
    #[inline(always)]
    fn push8(&mut self, w: u64, n: u32) {
        let fill = self.fill;
        let shift = 8 * fill;
        self.acc |= w << shift;
        let total = fill + n;
        if total >= 8 {
            self.h = fold_mul(self.h ^ self.acc, K1);
            // What did not fit: `w >> (64 - shift)` in two steps, which gives nothing if the
            // block was empty before instead of shifting by 64.
            self.acc = (w >> 1) >> (63 - shift);
            self.fill = total - 8;
        } else {
            self.fill = total;
        }
    }

    /// The id: the last bytes and their number mixed in.
    fn finish(self) -> u64 {
        fold_mul(fold_mul(self.h ^ self.acc, K1) ^ u64::from(self.fill), K2)
    }
}

/// Little-endian `u64` of up to eight bytes.
#[inline(always)]
fn le(bytes: &[u8]) -> u64 {
    match <[u8; 8]>::try_from(bytes) {
        Ok(b) => u64::from_le_bytes(b),
        Err(_) => bytes.iter().rev().fold(0, |w, &b| (w << 8) | u64::from(b)),
    }
}

/// The digest's output: its hash and its sink.
pub(crate) struct Output<S> {
    hash: Hash,
    pub(crate) sink: S,
}

impl<S: Sink> Output<S> {
    pub(crate) fn new(sink: S) -> Self {
        Output {
            hash: Hash {
                h: SEED,
                acc: 0,
                fill: 0,
            },
            sink,
        }
    }

    /// Appends `bytes`.
    #[inline(always)]
    pub(crate) fn push(&mut self, bytes: &[u8]) {
        let mut blocks = bytes.chunks_exact(8);
        for b in &mut blocks {
            self.hash.push8(le(b), 8);
        }
        let rest = blocks.remainder();
        if !rest.is_empty() {
            self.hash.push8(le(rest), rest.len() as u32);
        }
        self.sink.push(bytes);
    }

    /// Appends `b`, after a space if `space`.
    #[inline(always)]
    pub(crate) fn push_byte(&mut self, space: bool, b: u8) {
        let s = u32::from(space);
        let w = (u64::from(b) << (8 * s)) | (u64::from(s) * 0x20);
        self.hash.push8(w, 1 + s);
        self.sink.push(&w.to_le_bytes()[..1 + s as usize]);
    }

    /// Appends the `n` bytes (1 to 8) of `w`, little-endian (the bytes above them zero), after
    /// a space if `space`.
    #[inline(always)]
    pub(crate) fn push_word8(&mut self, space: bool, w: u64, n: usize) {
        let n32 = n as u32;
        if space && n <= 7 {
            self.hash.push8((w << 8) | 0x20, n32 + 1);
        } else {
            if space {
                self.hash.push8(0x20, 1);
            }
            self.hash.push8(w, n32);
        }
        if space {
            self.sink.push(b" ");
        }
        self.sink.push(w.to_le_bytes().get(..n).unwrap_or_default());
    }

    /// Appends the `n` bytes (1 to 16) packed little-endian in `w` (the bytes above them
    /// zero), after a space if `space`.
    pub(crate) fn push_word(&mut self, space: bool, w: [u64; 2], n: usize) {
        let n32 = n as u32;
        if space && n <= 7 {
            self.hash.push8((w[0] << 8) | 0x20, n32 + 1);
        } else {
            if space {
                self.hash.push8(0x20, 1);
            }
            if n <= 8 {
                self.hash.push8(w[0], n32);
            } else {
                self.hash.push8(w[0], 8);
                self.hash.push8(w[1], n32 - 8);
            }
        }
        if space {
            self.sink.push(b" ");
        }
        let mut bytes = [0u8; 16];
        bytes[..8].copy_from_slice(&w[0].to_le_bytes());
        bytes[8..].copy_from_slice(&w[1].to_le_bytes());
        self.sink.push(bytes.get(..n).unwrap_or_default());
    }

    /// Appends the bytes `start..end` of `src`, with ASCII letters in lower case if `lower`.
    #[inline(always)]
    pub(crate) fn push_span(&mut self, src: &[u8], start: usize, end: usize, lower: bool) {
        let mut at = start;
        while at < end {
            let n = (end - at).min(8);
            let mut w = packed::read_n(src, at, n);
            if lower {
                w = packed::lower(w);
            }
            self.hash.push8(w, n as u32);
            self.sink.push(w.to_le_bytes().get(..n).unwrap_or_default());
            at += n;
        }
    }

    /// A point to come back to.
    #[inline(always)]
    pub(crate) fn mark(&self) -> Mark {
        Mark {
            hash: self.hash,
            text: self.sink.mark(),
        }
    }

    /// Forgets everything pushed since `m`.
    #[inline(always)]
    pub(crate) fn rewind(&mut self, m: Mark) {
        self.hash = m.hash;
        self.sink.rewind(m.text);
    }

    /// The id of the text pushed.
    pub(crate) fn id(&self) -> u64 {
        self.hash.finish()
    }
}

/// A point of the output to rewind to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Mark {
    hash: Hash,
    text: (usize, bool),
}

/// The id of a whole normalised text, pushed at once: what a digest's id must be.
#[cfg(test)]
pub(crate) fn id_of(text: &[u8]) -> u64 {
    let mut out = Output::new(HashOnly);
    out.push(text);
    out.id()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The id depends on the bytes only, not on how they are pushed.
    #[test]
    fn the_id_is_a_function_of_the_bytes() {
        let text: Vec<u8> = (0..100u8).map(|i| i.wrapping_mul(37) ^ 0x5a).collect();
        let mut seed = 0x9e37_79b9_u64;
        for len in 0..text.len() {
            let text = &text[..len];
            let want = id_of(text);
            for _ in 0..20 {
                let mut out = Output::new(HashOnly);
                let mut rest = text;
                while !rest.is_empty() {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    let n = (seed % 17) as usize % (rest.len() + 1);
                    let (now, later) = rest.split_at(n.max(1).min(rest.len()));
                    match (now.len(), seed % 3) {
                        (1, 0) => out.push_byte(false, now[0]),
                        (2, 0) if now[0] == b' ' => out.push_byte(true, now[1]),
                        (n, 1) if n <= 8 => {
                            out.push_word8(false, le(now), n);
                        }
                        (n, 2) if n <= 16 => {
                            let (a, b) = now.split_at(n.min(8));
                            out.push_word(false, [le(a), le(b)], n);
                        }
                        _ => out.push(now),
                    }
                    rest = later;
                }
                assert_eq!(out.id(), want, "{text:?}");
            }
        }
        // Trailing zero bytes count, and so does every byte.
        assert_ne!(id_of(b"a"), id_of(b"a\0"));
        assert_ne!(id_of(b""), id_of(b"\0\0\0\0\0\0\0\0"));
        assert_ne!(id_of(b"SELECT ?"), id_of(b"SELECT ?;"));
    }

    #[test]
    fn text_is_cut_on_a_character_boundary_and_rewinds() {
        let mut buf = Vec::new();
        let mut out = Output::new(Text::new(&mut buf));
        out.push(&vec![b'x'; MAX_TEXT - 1]);
        let at = out.mark();
        out.push("é".as_bytes());
        out.push(b"more");
        let full_id = out.id();
        out.rewind(at);
        out.push(b"y");
        let id = out.id();
        assert_eq!(buf.len(), MAX_TEXT);
        assert_eq!(buf.last(), Some(&b'y'));
        assert_ne!(id, full_id);
        let mut text = vec![b'x'; MAX_TEXT - 1];
        text.push(b'y');
        assert_eq!(id, id_of(&text));
        let mut buf = Vec::new();
        let mut out = Output::new(Text::new(&mut buf));
        out.push(&vec![b'x'; MAX_TEXT - 1]);
        out.push("é".as_bytes());
        assert_eq!(buf.len(), MAX_TEXT - 1, "é is not split");
    }
}
