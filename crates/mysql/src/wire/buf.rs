//! Little-endian and length-encoded reading and writing.

/// A bounds-checked cursor over a packet payload. Every read returns `None` past the end, so
/// malformed input can never panic.
#[derive(Clone, Copy, Debug)]
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    /// A reader at the start of `buf`.
    pub fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0 }
    }
    /// Bytes not read yet.
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }
    /// The rest, without consuming it.
    pub fn rest(&self) -> &'a [u8] {
        &self.buf[self.pos..]
    }
    /// Current offset.
    pub fn pos(&self) -> usize {
        self.pos
    }
    /// Consumes `n` bytes.
    pub fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let end = self.pos.checked_add(n)?;
        let s = self.buf.get(self.pos..end)?;
        self.pos = end;
        Some(s)
    }
    /// Consumes everything left.
    pub fn take_rest(&mut self) -> &'a [u8] {
        let s = &self.buf[self.pos..];
        self.pos = self.buf.len();
        s
    }
    /// One byte.
    pub fn u8(&mut self) -> Option<u8> {
        self.take(1).map(|b| b[0])
    }
    /// Two bytes, little endian.
    pub fn u16(&mut self) -> Option<u16> {
        self.take(2).map(|b| u16::from_le_bytes([b[0], b[1]]))
    }
    /// Three bytes, little endian.
    pub fn u24(&mut self) -> Option<u32> {
        self.take(3)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], 0]))
    }
    /// Four bytes, little endian.
    pub fn u32(&mut self) -> Option<u32> {
        self.take(4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    /// Eight bytes, little endian.
    pub fn u64(&mut self) -> Option<u64> {
        self.take(8)
            .map(|b| u64::from_le_bytes(b.try_into().unwrap_or([0; 8])))
    }
    /// A length-encoded integer.
    pub fn lenenc(&mut self) -> Option<u64> {
        match self.u8()? {
            n @ 0..=0xfa => Some(n as u64),
            0xfc => self.u16().map(u64::from),
            0xfd => self.u24().map(u64::from),
            0xfe => self.u64(),
            _ => None, // 0xfb (NULL) and 0xff are not integers
        }
    }
    /// A length-encoded string.
    pub fn lenenc_bytes(&mut self) -> Option<&'a [u8]> {
        let n = self.lenenc()?;
        self.take(usize::try_from(n).ok()?)
    }
    /// A NUL-terminated string (without the NUL). Without a NUL, the rest of the buffer.
    pub fn nul_str(&mut self) -> &'a [u8] {
        let rest = self.rest();
        match rest.iter().position(|&b| b == 0) {
            Some(i) => {
                self.pos += i + 1;
                &rest[..i]
            }
            None => self.take_rest(),
        }
    }
}

/// Appends a length-encoded integer.
pub fn put_lenenc(out: &mut Vec<u8>, n: u64) {
    match n {
        0..=0xfa => out.push(n as u8),
        0xfb..=0xffff => {
            out.push(0xfc);
            out.extend_from_slice(&(n as u16).to_le_bytes());
        }
        0x1_0000..=0xff_ffff => {
            out.push(0xfd);
            out.extend_from_slice(&(n as u32).to_le_bytes()[..3]);
        }
        _ => {
            out.push(0xfe);
            out.extend_from_slice(&n.to_le_bytes());
        }
    }
}

/// Appends a length-encoded string.
pub fn put_lenenc_bytes(out: &mut Vec<u8>, s: &[u8]) {
    put_lenenc(out, s.len() as u64);
    out.extend_from_slice(s);
}

/// Size of `n` as a length-encoded integer.
pub fn lenenc_len(n: u64) -> usize {
    match n {
        0..=0xfa => 1,
        0xfb..=0xffff => 3,
        0x1_0000..=0xff_ffff => 4,
        _ => 9,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lenenc_round_trip() {
        for n in [
            0u64,
            250,
            251,
            65535,
            65536,
            0xff_ffff,
            0x100_0000,
            u64::MAX,
        ] {
            let mut v = Vec::new();
            put_lenenc(&mut v, n);
            assert_eq!(v.len(), lenenc_len(n));
            assert_eq!(Reader::new(&v).lenenc(), Some(n));
        }
    }

    #[test]
    fn truncated_input_is_none() {
        assert_eq!(Reader::new(&[0xfc, 1]).lenenc(), None);
        assert_eq!(Reader::new(&[5, b'a']).lenenc_bytes(), None);
        assert_eq!(Reader::new(&[]).u8(), None);
        let mut r = Reader::new(b"abc");
        assert_eq!(r.nul_str(), b"abc");
    }
}
