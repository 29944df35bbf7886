//! Lock-free counters for what the proxy does: statement latency histograms and routing
//! decisions. Read at scrape time by the admin API and `/metrics`.

use crate::router::Reason;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

/// Upper bounds of the latency buckets, in seconds (the last bucket, `+Inf`, is implicit).
pub const LATENCY_BUCKETS: [f64; 14] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// [`LATENCY_BUCKETS`] in nanoseconds.
const BUCKET_NANOS: [u64; LATENCY_BUCKETS.len()] = {
    let mut out = [0u64; LATENCY_BUCKETS.len()];
    let mut i = 0;
    while i < out.len() {
        out[i] = (LATENCY_BUCKETS[i] * 1e9) as u64;
        i += 1;
    }
    out
};

/// The bucket a duration falls in: the first bound it does not exceed (`LATENCY_BUCKETS.len()`
/// for +Inf).
pub fn bucket_of(d: Duration) -> usize {
    let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
    BUCKET_NANOS
        .iter()
        .position(|&b| ns <= b)
        .unwrap_or(BUCKET_NANOS.len())
}

/// A fixed-bucket latency histogram: one relaxed atomic add per bucket hit, no lock.
#[derive(Debug, Default)]
pub struct LatencyHistogram {
    /// Observations per bucket (not cumulative); index `LATENCY_BUCKETS.len()` is `+Inf`.
    buckets: [AtomicU64; LATENCY_BUCKETS.len() + 1],
    /// Sum of all observations, in microseconds.
    sum_us: AtomicU64,
}

/// A consistent-enough copy of a histogram.
#[derive(Clone, Debug, PartialEq)]
pub struct HistogramSnapshot {
    /// `(upper bound in seconds, cumulative count)`, ending with `(+Inf, total)`.
    pub buckets: Vec<(f64, u64)>,
    /// Number of observations.
    pub count: u64,
    /// Sum of observations, in seconds.
    pub sum: f64,
}

impl LatencyHistogram {
    /// Records one observation.
    pub fn observe(&self, d: Duration) {
        self.buckets[bucket_of(d)].fetch_add(1, Relaxed);
        self.sum_us
            .fetch_add(d.as_micros().min(u64::MAX as u128) as u64, Relaxed);
    }

    /// Cumulative buckets, count and sum.
    pub fn snapshot(&self) -> HistogramSnapshot {
        let mut total = 0;
        let mut buckets = Vec::with_capacity(LATENCY_BUCKETS.len() + 1);
        for (i, b) in self.buckets.iter().enumerate() {
            total += b.load(Relaxed);
            let bound = LATENCY_BUCKETS.get(i).copied().unwrap_or(f64::INFINITY);
            buckets.push((bound, total));
        }
        HistogramSnapshot {
            buckets,
            count: total,
            sum: self.sum_us.load(Relaxed) as f64 / 1e6,
        }
    }
}

/// How statements were routed.
#[derive(Debug, Default)]
pub struct RouteStats {
    /// Sent on the session's pinned connection (its state required it).
    pub pinned: AtomicU64,
    /// The listener is pinned to a hostgroup.
    pub listener: AtomicU64,
    /// Inside a transaction: to the writer.
    pub transaction: AtomicU64,
    /// A comment hint chose the hostgroup.
    pub hint: AtomicU64,
    /// A query rule chose the hostgroup.
    pub rule: AtomicU64,
    /// Built-in classification: a read, to the reader hostgroup.
    pub read: AtomicU64,
    /// Built-in classification: may write, to the writer hostgroup.
    pub write: AtomicU64,
    /// Reads sent to the writer because no reader was usable.
    pub read_fallback: AtomicU64,
}

impl RouteStats {
    /// Counts a router decision.
    pub fn count(&self, reason: &Reason) {
        match reason {
            Reason::Listener => &self.listener,
            Reason::Transaction => &self.transaction,
            Reason::Hint => &self.hint,
            Reason::Rule(_) => &self.rule,
            Reason::Read => &self.read,
            Reason::Write => &self.write,
        }
        .fetch_add(1, Relaxed);
    }

    /// `(decision name, count)` for every kind of decision.
    pub fn snapshot(&self) -> [(&'static str, u64); 8] {
        [
            ("pinned", self.pinned.load(Relaxed)),
            ("listener", self.listener.load(Relaxed)),
            ("transaction", self.transaction.load(Relaxed)),
            ("hint", self.hint.load(Relaxed)),
            ("rule", self.rule.load(Relaxed)),
            ("read", self.read.load(Relaxed)),
            ("write", self.write.load(Relaxed)),
            ("read_fallback", self.read_fallback.load(Relaxed)),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets_are_cumulative() {
        let h = LatencyHistogram::default();
        h.observe(Duration::from_micros(300)); // <= 0.5 ms
        h.observe(Duration::from_millis(3)); // <= 5 ms
        h.observe(Duration::from_millis(3));
        h.observe(Duration::from_secs(60)); // +Inf
        let s = h.snapshot();
        assert_eq!(s.count, 4);
        assert_eq!(s.buckets[0], (0.0005, 1));
        assert_eq!(s.buckets[2], (0.0025, 1));
        assert_eq!(s.buckets[3], (0.005, 3));
        assert_eq!(s.buckets[13], (10.0, 3));
        assert_eq!(s.buckets[14].1, 4);
        assert!(s.buckets[14].0.is_infinite());
        assert!((s.sum - 60.0063).abs() < 1e-9, "{}", s.sum);
    }

    #[test]
    fn route_decisions_are_counted_by_kind() {
        let r = RouteStats::default();
        r.count(&Reason::Read);
        r.count(&Reason::Read);
        r.count(&Reason::Rule(3));
        r.pinned.fetch_add(1, Relaxed);
        let s = r.snapshot();
        assert!(s.contains(&("read", 2)));
        assert!(s.contains(&("rule", 1)));
        assert!(s.contains(&("pinned", 1)));
        assert!(s.contains(&("write", 0)));
    }
}
