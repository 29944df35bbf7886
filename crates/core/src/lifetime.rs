//! `[pool] max_lifetime`: how long a server connection may be reused. One older than that is
//! closed instead of being lent again (never while a session uses it), as PgBouncer's
//! `server_lifetime` and HikariCP's `maxLifetime` do: a server process's caches grow over
//! its life, and connections opened before a change of the servers' DNS names, load
//! balancers or credentials move over to the new ones in bounded time.
//!
//! The check runs on every lease, so it reads no clock: ages are counted on a clock of whole
//! seconds that the proxy's once-a-second upkeep advances ([`tick`]). A connection is
//! therefore retired between `max_lifetime` and a second or two after, at its next lease.

use std::sync::atomic::{AtomicU32, Ordering::Relaxed};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// Seconds since the clock started, as of the last [`tick`].
static NOW: AtomicU32 = AtomicU32::new(0);
static START: OnceLock<Instant> = OnceLock::new();

/// Whole seconds since the clock started, read now.
fn exact() -> u32 {
    let start = START.get_or_init(Instant::now);
    u32::try_from(start.elapsed().as_secs()).unwrap_or(u32::MAX)
}

/// Advances the clock of whole seconds (the proxy's upkeep, once a second).
pub fn tick() {
    NOW.store(exact(), Relaxed);
}

/// The limit in force, shared by every server connection of the proxy, so that a reload
/// changes it for the connections already open too.
#[derive(Clone, Debug, Default)]
pub struct Lifetime(Arc<AtomicU32>);

/// What a server connection keeps: the limit in force and when it was opened, on the clock
/// of whole seconds. By default no limit: it never expires.
#[derive(Clone, Debug, Default)]
pub struct Aging {
    limit: Lifetime,
    born: u32,
}

impl Lifetime {
    /// A limit of `d`, rounded up to whole seconds (zero: none).
    pub fn new(d: Duration) -> Lifetime {
        let l = Lifetime::default();
        l.set(d);
        l
    }

    /// Changes it (zero: none).
    pub fn set(&self, d: Duration) {
        let secs = d.as_secs() + u64::from(d.subsec_nanos() > 0);
        self.0
            .store(u32::try_from(secs).unwrap_or(u32::MAX), Relaxed);
    }

    /// The limit, if any.
    pub fn get(&self) -> Option<Duration> {
        match self.0.load(Relaxed) {
            0 => None,
            s => Some(Duration::from_secs(u64::from(s))),
        }
    }

    /// The age of a connection opened now, against this limit.
    pub fn stamp(&self) -> Aging {
        Aging {
            limit: self.clone(),
            born: exact(),
        }
    }
}

impl Aging {
    /// True once the connection has served its time.
    pub fn expired(&self) -> bool {
        match self.limit.0.load(Relaxed) {
            0 => false,
            limit => NOW.load(Relaxed).saturating_sub(self.born) >= limit,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_connection_expires_once_the_clock_has_counted_its_lifetime() {
        let off = Lifetime::new(Duration::ZERO);
        assert_eq!(off.get(), None);
        let l = Lifetime::new(Duration::from_millis(1500));
        assert_eq!(l.get(), Some(Duration::from_secs(2)), "rounded up");
        tick();
        let (aging, unlimited) = (l.stamp(), off.stamp());
        assert!(!aging.expired());
        // Two seconds on the clock of whole seconds (as the upkeep would count them).
        let now = NOW.load(Relaxed);
        NOW.store(aging.born + 2, Relaxed);
        assert!(aging.expired());
        assert!(!unlimited.expired(), "no limit: never");
        assert!(!Aging::default().expired());
        // A reload that raises the limit keeps it in service: connections share it.
        l.set(Duration::from_secs(60));
        assert!(!aging.expired());
        NOW.store(now, Relaxed);
    }
}
