//! Words read eight bytes at a time: the lexer's keyword lookup and the digest both take a
//! word of up to [`SHORT`] bytes as two little-endian `u64`s padded with zeros, and fold its
//! ASCII letters eight bytes at once.

/// Words up to this length are read as two `u64`s; longer ones are never keywords.
pub(crate) const SHORT: usize = 16;

/// The bytes of a word of `n` bytes (1 to [`SHORT`]) among 16 read: masks for the two `u64`s
/// (none for an empty word).
pub(crate) const MASKS: [[u64; 2]; SHORT + 1] = {
    let mut m = [[0u64; 2]; SHORT + 1];
    let mut n = 1;
    while n <= SHORT {
        let lo = if n >= 8 { 8 } else { n };
        m[n][0] = u64::MAX >> (64 - 8 * lo);
        if n > 8 {
            m[n][1] = u64::MAX >> (64 - 8 * (n - 8));
        }
        n += 1;
    }
    m
};

/// Eight bytes of `src` from `at`, little-endian; zeros past the end.
#[inline(always)]
pub(crate) fn read8(src: &[u8], at: usize) -> u64 {
    match src.get(at..).and_then(<[u8]>::first_chunk::<8>) {
        Some(w) => u64::from_le_bytes(*w),
        None => read8_tail(src, at),
    }
}

/// [`read8`] within eight bytes of the end: the last eight bytes, shifted.
#[inline(never)]
fn read8_tail(src: &[u8], at: usize) -> u64 {
    match src.len().checked_sub(8) {
        Some(from) if at >= from && at < src.len() => read8(src, from) >> (8 * (at - from)),
        _ => src
            .get(at..)
            .unwrap_or_default()
            .iter()
            .take(8)
            .rev()
            .fold(0, |w, &b| (w << 8) | u64::from(b)),
    }
}

/// The word of `len` bytes (1 to [`SHORT`]) at `start` in `src`, as two little-endian `u64`s
/// padded with zeros; `None` if it is longer.
#[inline(always)]
pub(crate) fn read(src: &[u8], start: usize, len: usize) -> Option<[u64; 2]> {
    let [ma, mb] = *MASKS.get(len)?;
    let a = read8(src, start) & ma;
    let b = if len > 8 {
        read8(src, start + 8) & mb
    } else {
        0
    };
    Some([a, b])
}

/// The `n` bytes (1 to 8) at `at` in `src`, as a little-endian `u64` padded with zeros.
#[inline(always)]
pub(crate) fn read_n(src: &[u8], at: usize, n: usize) -> u64 {
    read8(src, at) & MASKS.get(n).map_or(0, |m| m[0])
}

/// `b` in each byte of a `u64`.
pub(crate) const fn bytes(b: u8) -> u64 {
    0x0101_0101_0101_0101 * b as u64
}

/// ASCII letters of eight bytes at once to lower case (other bytes, non-ASCII ones included,
/// are left alone).
#[inline(always)]
pub(crate) fn lower(x: u64) -> u64 {
    let low7 = x & bytes(0x7f);
    // The top bit of a byte is set if its low seven bits are >= 'A', resp. > 'Z'; no carry
    // crosses bytes.
    let from_a = low7.wrapping_add(bytes(0x80 - b'A'));
    let past_z = low7.wrapping_add(bytes(0x80 - b'Z' - 1));
    let upper = from_a & !past_z & !x & bytes(0x80);
    x | (upper >> 2)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_eight_bytes_anywhere() {
        let src: Vec<u8> = (1..=20).collect();
        for len in 0..=src.len() {
            for at in 0..=len + 2 {
                let mut want = [0u8; 8];
                for (i, w) in want.iter_mut().enumerate() {
                    *w = src[..len].get(at + i).copied().unwrap_or(0);
                }
                assert_eq!(
                    read8(&src[..len], at),
                    u64::from_le_bytes(want),
                    "{len} {at}"
                );
            }
        }
        assert_eq!(read8(&src, usize::MAX - 3), 0);
    }

    #[test]
    fn words_fold_eight_bytes_at_a_time() {
        let text = b"SELECT aBc_$9 \xc3\x89t\xc3\xa9 @[`{ZZ";
        for start in 0..text.len() {
            for len in 1..=SHORT.min(text.len() - start) {
                let [a, b] = read(text, start, len).unwrap();
                let mut got = [lower(a).to_le_bytes(), lower(b).to_le_bytes()].concat();
                assert!(got[len..].iter().all(|&b| b == 0), "padded with zeros");
                got.truncate(len);
                assert_eq!(got, text[start..start + len].to_ascii_lowercase());
            }
        }
    }
}
