//! How a harness splits a byte stream into reads, from one seed byte of its input: the same
//! bytes arrive whole, a byte at a time, or in uneven pieces, as they may from a socket.

/// A deterministic sequence of read sizes.
#[derive(Clone, Debug)]
pub struct Chunks {
    state: u32,
}

impl Chunks {
    /// Sizes derived from `seed`; seed 0 delivers everything at once.
    pub fn new(seed: u8) -> Chunks {
        Chunks {
            state: u32::from(seed),
        }
    }

    /// Size of the next read, when `left` bytes remain (at least 1 if `left > 0`).
    pub fn next(&mut self, left: usize) -> usize {
        if self.state == 0 {
            return left;
        }
        // A small linear congruential generator: cheap, and the same for the same seed.
        self.state = self.state.wrapping_mul(1_103_515_245).wrapping_add(12_345);
        let r = (self.state >> 16) as usize;
        let size = match r % 8 {
            0 => 1,
            1..=5 => 1 + r % 24,
            6 => 1 + r % 300,
            _ => 4096,
        };
        size.min(left)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_positive_and_bounded() {
        let mut whole = Chunks::new(0);
        assert_eq!(whole.next(77), 77);
        let mut c = Chunks::new(9);
        for left in [1usize, 5, 1000, 10_000] {
            let n = c.next(left);
            assert!((1..=left).contains(&n));
        }
    }
}
