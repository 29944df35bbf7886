//! The query digest table: statistics per (statement shape, user, schema, hostgroup).
//!
//! Bounded: at most `capacity` entries, spread over shards with one short lock each. When a
//! shard is full, the eighth of its entries seen least recently is dropped at once (counted
//! in [`DigestTable::evicted`]), so inserting stays cheap on average and the table never
//! grows.

use crate::stats::LATENCY_BUCKETS;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

const SHARDS: usize = 16;

/// What one statement contributes.
#[derive(Clone, Copy, Debug, Default)]
pub struct DigestSample {
    /// Time from the command's arrival to the end of its response.
    pub elapsed: Duration,
    /// Rows sent to the client.
    pub rows_sent: u64,
    /// Rows the server reported affected.
    pub rows_affected: u64,
    /// The statement ended in an error.
    pub error: bool,
    /// When it ended, if the caller read the clock for `elapsed` already (else the table
    /// reads it).
    pub ended: Option<Instant>,
}

/// Where a statement ran and who sent it.
#[derive(Clone, Copy, Debug)]
pub struct DigestKey<'a> {
    /// The digest id (hash of the normalised text).
    pub id: u64,
    /// Client user.
    pub user: &'a str,
    /// Current schema (empty if none).
    pub schema: &'a str,
    /// Hostgroup that served it.
    pub hostgroup: &'a str,
}

/// Statistics of one (digest, user, schema, hostgroup).
#[derive(Clone, Debug)]
pub struct DigestStats {
    /// The digest id.
    pub id: u64,
    /// The normalised statement text.
    pub text: Arc<str>,
    /// Client user.
    pub user: Arc<str>,
    /// Schema.
    pub schema: Arc<str>,
    /// Hostgroup.
    pub hostgroup: Arc<str>,
    /// Statements.
    pub count: u64,
    /// Total time, microseconds.
    pub sum_us: u64,
    /// Fastest, microseconds.
    pub min_us: u64,
    /// Slowest, microseconds.
    pub max_us: u64,
    /// Statements per latency bucket ([`LATENCY_BUCKETS`], then +Inf), not cumulative.
    pub buckets: [u64; LATENCY_BUCKETS.len() + 1],
    /// Rows sent to clients.
    pub rows_sent: u64,
    /// Rows affected.
    pub rows_affected: u64,
    /// Statements that ended in an error.
    pub errors: u64,
    /// First seen.
    pub first_seen: SystemTime,
    /// Last seen (in a [`DigestTable::snapshot`]: made from `seen` there, so that recording a
    /// statement reads no wall clock).
    pub last_seen: SystemTime,
    /// When it was last seen, on the monotonic clock.
    seen: Instant,
}

impl DigestStats {
    /// Latency quantile `q` (0..1), estimated from the histogram: the upper bound of the
    /// bucket where it falls, never above the slowest statement seen.
    pub fn quantile(&self, q: f64) -> Duration {
        if self.count == 0 {
            return Duration::ZERO;
        }
        let rank = (q * self.count as f64).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (i, n) in self.buckets.iter().enumerate() {
            seen += n;
            if seen >= rank {
                let bound = LATENCY_BUCKETS
                    .get(i)
                    .map(|s| Duration::from_secs_f64(*s))
                    .unwrap_or(Duration::MAX);
                return bound.min(Duration::from_micros(self.max_us));
            }
        }
        Duration::from_micros(self.max_us)
    }
}

/// Keys of a shard's map: already hashes.
type Shard = HashMap<u64, DigestStats, foldhash::fast::RandomState>;

/// The table.
pub struct DigestTable {
    shards: Vec<Mutex<Shard>>,
    /// Hashes (digest, user, schema, hostgroup) into a shard and its key: seeded per process,
    /// and cheap (every statement is recorded).
    keys: foldhash::fast::RandomState,
    per_shard: usize,
    /// Entries dropped to stay within capacity.
    pub evicted: AtomicU64,
}

impl DigestTable {
    /// A table of at most `capacity` entries (0 disables recording).
    pub fn new(capacity: usize) -> DigestTable {
        DigestTable {
            shards: (0..SHARDS).map(|_| Mutex::new(Shard::default())).collect(),
            keys: foldhash::fast::RandomState::default(),
            per_shard: capacity.div_ceil(SHARDS),
            evicted: AtomicU64::new(0),
        }
    }

    /// Most entries kept.
    pub fn capacity(&self) -> usize {
        self.per_shard * SHARDS
    }

    /// Entries now.
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.lock().len()).sum()
    }

    /// True if nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Records one statement; `text` (the normalised statement) is only read for a new entry.
    pub fn record(&self, key: DigestKey<'_>, text: &[u8], s: DigestSample) {
        self.record_with(key, || text, s)
    }

    /// Records one statement; `text` makes the normalised statement, only for a new entry
    /// (the id alone finds an existing one: most statements never need their text).
    pub fn record_with<T: AsRef<[u8]>>(
        &self,
        key: DigestKey<'_>,
        text: impl FnOnce() -> T,
        s: DigestSample,
    ) {
        if self.per_shard == 0 {
            return;
        }
        let k = self
            .keys
            .hash_one((key.id, key.user, key.schema, key.hostgroup));
        let now = s.ended.unwrap_or_else(Instant::now);
        let us = s.elapsed.as_micros().min(u64::MAX as u128) as u64;
        let bucket = crate::stats::bucket_of(s.elapsed);
        let mut shard = self.shards[(k as usize) % SHARDS].lock();
        // A hash collision between different keys would merge them; check and keep apart
        // by simply not recording into someone else's entry.
        if let Some(e) = shard.get_mut(&k) {
            if e.id != key.id
                || &*e.user != key.user
                || &*e.schema != key.schema
                || &*e.hostgroup != key.hostgroup
            {
                return;
            }
            e.count += 1;
            e.sum_us = e.sum_us.saturating_add(us);
            e.min_us = e.min_us.min(us);
            e.max_us = e.max_us.max(us);
            e.buckets[bucket] += 1;
            e.rows_sent += s.rows_sent;
            e.rows_affected += s.rows_affected;
            e.errors += u64::from(s.error);
            e.seen = now;
            return;
        }
        if shard.len() >= self.per_shard {
            self.evict(&mut shard);
        }
        let mut buckets = [0; LATENCY_BUCKETS.len() + 1];
        buckets[bucket] = 1;
        shard.insert(
            k,
            DigestStats {
                id: key.id,
                text: Arc::from(String::from_utf8_lossy(text().as_ref()).as_ref()),
                user: Arc::from(key.user),
                schema: Arc::from(key.schema),
                hostgroup: Arc::from(key.hostgroup),
                count: 1,
                sum_us: us,
                min_us: us,
                max_us: us,
                buckets,
                rows_sent: s.rows_sent,
                rows_affected: s.rows_affected,
                errors: u64::from(s.error),
                first_seen: SystemTime::now(),
                last_seen: SystemTime::UNIX_EPOCH,
                seen: now,
            },
        );
    }

    /// Drops the least recently seen eighth of a full shard (at least one entry).
    fn evict(&self, shard: &mut Shard) {
        let n = (shard.len() / 8).max(1);
        let mut ages: Vec<(Instant, u64)> = shard.iter().map(|(k, e)| (e.seen, *k)).collect();
        ages.select_nth_unstable(n - 1);
        for (_, k) in &ages[..n] {
            shard.remove(k);
        }
        self.evicted.fetch_add(n as u64, Relaxed);
    }

    /// A copy of every entry.
    pub fn snapshot(&self) -> Vec<DigestStats> {
        let (wall, now) = (SystemTime::now(), Instant::now());
        let mut all: Vec<DigestStats> = self
            .shards
            .iter()
            .flat_map(|s| s.lock().values().cloned().collect::<Vec<_>>())
            .collect();
        for e in &mut all {
            // (Never before it was first seen: the two clocks may have drifted apart since.)
            let last = wall.checked_sub(now.saturating_duration_since(e.seen));
            e.last_seen = last.map_or(e.first_seen, |t| t.max(e.first_seen));
        }
        all
    }

    /// Forgets everything.
    pub fn clear(&self) {
        for s in &self.shards {
            s.lock().clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(id: u64) -> DigestKey<'static> {
        DigestKey {
            id,
            user: "app",
            schema: "test",
            hostgroup: "reader",
        }
    }

    fn sample(ms: u64) -> DigestSample {
        DigestSample {
            elapsed: Duration::from_millis(ms),
            rows_sent: 2,
            rows_affected: 0,
            error: false,
            ended: None,
        }
    }

    #[test]
    fn last_seen_is_when_the_latest_statement_ended_on_the_wall_clock() {
        let t = DigestTable::new(10);
        t.record(key(3), b"q", sample(1));
        let first = t.snapshot()[0].first_seen;
        std::thread::sleep(Duration::from_millis(30));
        t.record(
            key(3),
            b"q",
            DigestSample {
                ended: Some(Instant::now()),
                ..sample(1)
            },
        );
        std::thread::sleep(Duration::from_millis(30));
        let e = &t.snapshot()[0];
        // Neither when the entry was made nor when the snapshot was taken: 30 ms from each
        // (at least; 10 ms of it asserted, against the two clocks' reads).
        let since = |a: SystemTime, b: SystemTime| b.duration_since(a).unwrap_or_default();
        assert!(since(first, e.last_seen) >= Duration::from_millis(10));
        assert!(since(e.last_seen, SystemTime::now()) >= Duration::from_millis(10));
        assert_eq!(e.first_seen, first);
    }

    #[test]
    fn aggregates_per_key() {
        let t = DigestTable::new(100);
        t.record(key(1), b"SELECT ?", sample(1));
        t.record(key(1), b"ignored", sample(3));
        t.record(
            DigestKey {
                hostgroup: "writer",
                ..key(1)
            },
            b"SELECT ?",
            DigestSample {
                error: true,
                ..sample(2)
            },
        );
        let mut s = t.snapshot();
        s.sort_by_key(|e| e.hostgroup.clone());
        assert_eq!(s.len(), 2);
        let r = &s[0];
        assert_eq!((&*r.hostgroup, &*r.text), ("reader", "SELECT ?"));
        assert_eq!(
            (r.count, r.min_us, r.max_us, r.sum_us),
            (2, 1000, 3000, 4000)
        );
        assert_eq!((r.rows_sent, r.errors), (4, 0));
        assert_eq!(s[1].errors, 1);
        assert!(r.first_seen <= r.last_seen);
    }

    #[test]
    fn quantiles_come_from_the_histogram() {
        let t = DigestTable::new(10);
        for _ in 0..98 {
            t.record(key(7), b"q", sample(1)); // bucket <= 1 ms
        }
        t.record(key(7), b"q", sample(40)); // <= 50 ms
        t.record(key(7), b"q", sample(45));
        let e = &t.snapshot()[0];
        assert_eq!(e.quantile(0.5), Duration::from_millis(1));
        assert_eq!(e.quantile(0.99), Duration::from_millis(45));
        assert_eq!(e.quantile(1.0), Duration::from_millis(45));
    }

    #[test]
    fn stays_within_capacity_dropping_the_least_recent() {
        let t = DigestTable::new(64);
        for id in 0..10_000 {
            t.record(key(id), b"q", sample(1));
        }
        assert!(t.len() <= t.capacity(), "{} > {}", t.len(), t.capacity());
        assert!(t.evicted.load(Relaxed) >= 10_000 - t.capacity() as u64);
        // The most recent ones are kept.
        let ids: Vec<u64> = t.snapshot().iter().map(|e| e.id).collect();
        assert!(ids.contains(&9_999));
    }

    #[test]
    fn zero_capacity_records_nothing() {
        let t = DigestTable::new(0);
        t.record(key(1), b"q", sample(1));
        assert!(t.is_empty());
    }
}
