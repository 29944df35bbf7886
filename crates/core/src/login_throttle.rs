//! Failed logins per source address: a bounded table that slows down and then blocks an
//! address guessing passwords, like MariaDB's `max_connect_errors` host blocking but for
//! failed authentication, with a block that expires by itself.
//!
//! Addresses are counted alone for IPv4 and by /64 for IPv6 (one host usually holds a whole
//! /64, so counting single IPv6 addresses would limit nothing). Decisions take the time as an
//! argument so they can be tested without waiting.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::net::{IpAddr, Ipv6Addr};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

/// At most one "failed login" log line per address in this interval (blocks always log).
pub const LOG_INTERVAL: Duration = Duration::from_secs(10);

/// Entries compared when the table is full and one must be forgotten.
const EVICTION_SAMPLE: usize = 64;

/// What an address is counted under: itself for IPv4 (and IPv4-mapped IPv6), its /64 for IPv6.
pub fn source_key(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let s = v6.segments();
                IpAddr::V6(Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0))
            }
        },
        v4 => v4,
    }
}

/// How failures are counted and punished.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ThrottleSettings {
    /// Failures within `window` that block the address; 0: never block.
    pub max_failures: u32,
    /// Counting window.
    pub window: Duration,
    /// How long a block lasts.
    pub block: Duration,
    /// Delay before a failure is answered.
    pub delay: Duration,
    /// Most addresses remembered.
    pub max_tracked: usize,
}

impl ThrottleSettings {
    /// From `[login]`.
    pub fn from_config(l: &sluice_config::LoginConfig) -> ThrottleSettings {
        ThrottleSettings {
            max_failures: l.max_failures,
            window: l.failure_window.get(),
            block: l.block_time.get(),
            delay: l.failure_delay.get(),
            max_tracked: l.max_tracked_addresses as usize,
        }
    }
}

#[derive(Clone, Copy, Debug)]
struct Entry {
    window_start: Instant,
    failures: u32,
    blocked_until: Option<Instant>,
    last_seen: Instant,
    last_logged: Option<Instant>,
    /// Failures since the last log line.
    unlogged: u32,
}

/// What to do about a failed login.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Failure {
    /// Wait this long before answering.
    pub delay: Duration,
    /// Failures from the address in the current window.
    pub failures: u32,
    /// This failure blocked the address (for `ThrottleSettings::block`).
    pub blocked: bool,
    /// Log it now, with this many failures since the previous line (rate-limited).
    pub log: Option<u32>,
}

/// The table of failed logins.
#[derive(Debug)]
pub struct LoginThrottle {
    settings: Mutex<ThrottleSettings>,
    table: Mutex<HashMap<IpAddr, Entry>>,
    /// Failed logins counted.
    pub failures: AtomicU64,
    /// Connections refused because their address was blocked.
    pub refused: AtomicU64,
}

impl LoginThrottle {
    /// An empty table.
    pub fn new(settings: ThrottleSettings) -> LoginThrottle {
        LoginThrottle {
            settings: Mutex::new(settings),
            table: Mutex::new(HashMap::new()),
            failures: AtomicU64::new(0),
            refused: AtomicU64::new(0),
        }
    }

    /// Replaces the settings (a reload); blocks in force keep their end time.
    pub fn set_settings(&self, settings: ThrottleSettings) {
        *self.settings.lock() = settings;
    }

    /// `Some(remaining)` if `ip` is blocked at `now` (and counts the refusal).
    pub fn blocked(&self, ip: IpAddr, now: Instant) -> Option<Duration> {
        let ip = source_key(ip);
        let mut table = self.table.lock();
        let e = table.get_mut(&ip)?;
        match e.blocked_until {
            Some(until) if until > now => {
                self.refused.fetch_add(1, Relaxed);
                Some(until - now)
            }
            Some(_) => {
                // The block is over: the address starts afresh.
                table.remove(&ip);
                None
            }
            None => None,
        }
    }

    /// Records a failed login from `ip` at `now`.
    pub fn failed(&self, ip: IpAddr, now: Instant) -> Failure {
        let ip = source_key(ip);
        self.failures.fetch_add(1, Relaxed);
        let s = *self.settings.lock();
        let mut table = self.table.lock();
        if !table.contains_key(&ip) && table.len() >= s.max_tracked.max(1) {
            forget_stalest(&mut table);
        }
        let e = table.entry(ip).or_insert(Entry {
            window_start: now,
            failures: 0,
            blocked_until: None,
            last_seen: now,
            last_logged: None,
            unlogged: 0,
        });
        if now.saturating_duration_since(e.window_start) > s.window {
            e.window_start = now;
            e.failures = 0;
        }
        e.failures = e.failures.saturating_add(1);
        e.unlogged = e.unlogged.saturating_add(1);
        e.last_seen = now;
        let blocked = s.max_failures > 0
            && e.failures >= s.max_failures
            && e.blocked_until.is_none_or(|u| u <= now);
        if blocked {
            e.blocked_until = Some(now + s.block);
        }
        let due = e
            .last_logged
            .is_none_or(|t| now.saturating_duration_since(t) >= LOG_INTERVAL);
        let log = (due || blocked).then(|| {
            e.last_logged = Some(now);
            std::mem::take(&mut e.unlogged)
        });
        Failure {
            delay: s.delay,
            failures: e.failures,
            blocked,
            log,
        }
    }

    /// A failed login from `ip` (as `user`): counted, logged (rate-limited per address; never
    /// the password), then the configured delay waited, before the client is answered.
    pub async fn failed_login(&self, ip: IpAddr, user: &str) {
        let f = self.failed(ip, Instant::now());
        if let Some(since_last) = f.log {
            tracing::warn!(peer = %ip, user, failures = f.failures, since_last_log = since_last, "failed login");
        }
        if f.blocked {
            tracing::warn!(peer = %ip, failures = f.failures, "address blocked after repeated failed logins");
        }
        if !f.delay.is_zero() {
            tokio::time::sleep(f.delay).await;
        }
    }

    /// A successful login from `ip`: its failures are forgotten (as MariaDB resets a host's
    /// error count when it logs in).
    pub fn succeeded(&self, ip: IpAddr) {
        let ip = source_key(ip);
        let mut table = self.table.lock();
        if table.get(&ip).is_some_and(|e| e.blocked_until.is_none()) {
            table.remove(&ip);
        }
    }

    /// Addresses remembered now.
    pub fn tracked(&self) -> usize {
        self.table.lock().len()
    }
}

/// Makes room: forgets the address seen least recently among a sample (bounded work per
/// failure however large the table), sparing blocked ones while the sample has another.
fn forget_stalest(table: &mut HashMap<IpAddr, Entry>) {
    let victim = table
        .iter()
        .take(EVICTION_SAMPLE)
        .min_by_key(|(_, e)| (e.blocked_until.is_some(), e.last_seen))
        .map(|(ip, _)| *ip);
    if let Some(ip) = victim {
        table.remove(&ip);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(max_failures: u32, max_tracked: usize) -> ThrottleSettings {
        ThrottleSettings {
            max_failures,
            window: Duration::from_secs(60),
            block: Duration::from_secs(30),
            delay: Duration::from_millis(100),
            max_tracked,
        }
    }

    fn ip(n: u8) -> IpAddr {
        IpAddr::from([127, 0, 0, n])
    }

    #[test]
    fn repeated_failures_block_until_the_block_expires() {
        let t = LoginThrottle::new(settings(3, 100));
        let t0 = Instant::now();
        let f = t.failed(ip(2), t0);
        assert_eq!((f.failures, f.blocked, f.log), (1, false, Some(1)));
        assert_eq!(f.delay, Duration::from_millis(100));
        let f = t.failed(ip(2), t0 + Duration::from_secs(1));
        assert_eq!(
            (f.failures, f.blocked, f.log),
            (2, false, None),
            "rate-limited log"
        );
        assert_eq!(t.blocked(ip(2), t0), None);
        let f = t.failed(ip(2), t0 + Duration::from_secs(2));
        assert_eq!((f.failures, f.blocked, f.log), (3, true, Some(2)));
        let later = t0 + Duration::from_secs(10);
        assert_eq!(t.blocked(ip(2), later), Some(Duration::from_secs(22)));
        assert_eq!(
            t.blocked(ip(3), later),
            None,
            "other addresses are not affected"
        );
        assert_eq!(t.blocked(ip(2), t0 + Duration::from_secs(33)), None);
        assert_eq!(t.failed(ip(2), t0 + Duration::from_secs(34)).failures, 1);
        assert_eq!(t.refused.load(Relaxed), 1);
    }

    #[test]
    fn the_window_restarts_and_success_forgets() {
        let t = LoginThrottle::new(settings(3, 100));
        let t0 = Instant::now();
        t.failed(ip(2), t0);
        t.failed(ip(2), t0);
        assert_eq!(t.failed(ip(2), t0 + Duration::from_secs(61)).failures, 1);
        t.succeeded(ip(2));
        assert_eq!(t.tracked(), 0);
        let never = LoginThrottle::new(settings(0, 100));
        for _ in 0..100 {
            assert!(!never.failed(ip(2), t0).blocked);
        }
        assert_eq!(never.blocked(ip(2), t0), None);
    }

    #[test]
    fn ipv6_counts_by_64() {
        let a: IpAddr = "2001:db8:1:2:aaaa::1".parse().unwrap();
        let b: IpAddr = "2001:db8:1:2:bbbb::2".parse().unwrap();
        let c: IpAddr = "2001:db8:1:3::1".parse().unwrap();
        let mapped: IpAddr = "::ffff:127.0.0.2".parse().unwrap();
        assert_eq!(source_key(a), source_key(b));
        assert_ne!(source_key(a), source_key(c));
        assert_eq!(source_key(mapped), ip(2));
        let t = LoginThrottle::new(settings(2, 100));
        let t0 = Instant::now();
        t.failed(a, t0);
        assert!(t.failed(b, t0).blocked);
        assert!(t.blocked(a, t0).is_some());
        assert!(t.blocked(c, t0).is_none());
    }

    #[test]
    fn the_table_is_bounded_and_spares_blocked_addresses() {
        let t = LoginThrottle::new(settings(1, 2));
        let t0 = Instant::now();
        assert!(t.failed(ip(1), t0).blocked);
        t.set_settings(settings(5, 2));
        t.failed(ip(2), t0 + Duration::from_secs(1));
        t.failed(ip(3), t0 + Duration::from_secs(2));
        assert_eq!(t.tracked(), 2);
        assert!(t.blocked(ip(1), t0 + Duration::from_secs(3)).is_some());
    }
}
