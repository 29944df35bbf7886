//! A log-linear latency histogram in microseconds (about 3 % precision, fixed size), mergeable
//! across load-generator processes through a compact text form.

/// Sub-buckets per power of two (5 bits).
const SUB: u64 = 32;
const BUCKETS: usize = (SUB as usize) * 40;

/// Latency histogram.
#[derive(Clone)]
pub struct Histogram {
    counts: Vec<u64>,
    total: u64,
    max: u64,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            counts: vec![0; BUCKETS],
            total: 0,
            max: 0,
        }
    }
}

fn index(v: u64) -> usize {
    if v < SUB {
        return v as usize;
    }
    let e = 63 - v.leading_zeros() as u64; // >= 5
    let sub = (v >> (e - 5)) & (SUB - 1);
    (((e - 4) * SUB + sub) as usize).min(BUCKETS - 1)
}

fn lower_bound(i: usize) -> u64 {
    let i = i as u64;
    if i < SUB {
        return i;
    }
    let e = i / SUB + 4;
    let sub = i % SUB;
    (SUB + sub) << (e - 5)
}

impl Histogram {
    /// Records one value (µs).
    pub fn record(&mut self, micros: u64) {
        self.counts[index(micros)] += 1;
        self.total += 1;
        self.max = self.max.max(micros);
    }

    /// Number of values recorded.
    pub fn count(&self) -> u64 {
        self.total
    }

    /// Largest value recorded (µs).
    pub fn max(&self) -> u64 {
        self.max
    }

    /// The value at quantile `q` (0..=1), µs (lower bound of its bucket).
    pub fn quantile(&self, q: f64) -> u64 {
        if self.total == 0 {
            return 0;
        }
        let want = ((self.total as f64) * q).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (i, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= want {
                return lower_bound(i).min(self.max);
            }
        }
        self.max
    }

    /// Adds another histogram's counts.
    pub fn merge(&mut self, other: &Histogram) {
        for (a, b) in self.counts.iter_mut().zip(&other.counts) {
            *a += b;
        }
        self.total += other.total;
        self.max = self.max.max(other.max);
    }

    /// Compact text: `max;i:c,i:c,…` over non-empty buckets.
    pub fn encode(&self) -> String {
        let body: Vec<String> = self
            .counts
            .iter()
            .enumerate()
            .filter(|(_, &c)| c > 0)
            .map(|(i, c)| format!("{i}:{c}"))
            .collect();
        format!("{};{}", self.max, body.join(","))
    }

    /// Parses [`Histogram::encode`]'s form.
    pub fn decode(s: &str) -> Option<Histogram> {
        let (max, body) = s.split_once(';')?;
        let mut h = Histogram {
            max: max.parse().ok()?,
            ..Histogram::default()
        };
        for pair in body.split(',').filter(|p| !p.is_empty()) {
            let (i, c) = pair.split_once(':')?;
            let (i, c): (usize, u64) = (i.parse().ok()?, c.parse().ok()?);
            *h.counts.get_mut(i)? += c;
            h.total += c;
        }
        Some(h)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_monotonic_and_tight() {
        let mut prev = 0;
        for v in [
            0u64, 1, 31, 32, 33, 63, 64, 100, 1000, 12_345, 1_000_000, 60_000_000,
        ] {
            let i = index(v);
            assert!(i >= prev, "{v}");
            prev = i;
            let lb = lower_bound(i);
            assert!(lb <= v && v - lb <= v / 30 + 1, "{v} -> {lb}");
        }
    }

    #[test]
    fn quantiles_and_round_trip() {
        let mut h = Histogram::default();
        for v in 1..=1000u64 {
            h.record(v * 10);
        }
        let p50 = h.quantile(0.5);
        assert!((4800..=5000).contains(&p50), "{p50}");
        assert!(h.quantile(0.99) >= 9600);
        assert_eq!(h.max(), 10_000);
        let back = Histogram::decode(&h.encode()).unwrap();
        assert_eq!(back.count(), 1000);
        assert_eq!(back.quantile(0.5), p50);
        let mut m = back.clone();
        m.merge(&h);
        assert_eq!(m.count(), 2000);
    }
}
