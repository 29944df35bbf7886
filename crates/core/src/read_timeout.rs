//! `[pool] read_timeout`: how long sluice waits on a server that sends nothing while an
//! answer is expected before it takes the server for hung. Shared by every connection of the
//! proxy, so a reload changes it for connections already open too; both protocols' server
//! connections keep one.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

/// The read timeout in force (none: wait forever).
#[derive(Clone, Debug, Default)]
pub struct ReadTimeout(Arc<AtomicU64>);

impl ReadTimeout {
    /// A timeout of `d` (zero: none).
    pub fn new(d: Duration) -> ReadTimeout {
        let t = ReadTimeout::default();
        t.set(d);
        t
    }

    /// Changes it (zero: none).
    pub fn set(&self, d: Duration) {
        self.0
            .store(u64::try_from(d.as_millis()).unwrap_or(u64::MAX), Relaxed);
    }

    /// The timeout, if any.
    pub fn get(&self) -> Option<Duration> {
        match self.0.load(Relaxed) {
            0 => None,
            ms => Some(Duration::from_millis(ms)),
        }
    }
}

/// Resolves after `limit` (never without one).
pub async fn expiry(limit: Option<Duration>) {
    match limit {
        Some(d) => tokio::time::sleep(d).await,
        None => std::future::pending().await,
    }
}

/// The error a read that waited `limit` in vain fails with (kind `TimedOut`).
pub fn timed_out(limit: Option<Duration>) -> std::io::Error {
    let d = sluice_config::HumanDuration(limit.unwrap_or_default());
    std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        format!("sent nothing for {d} ([pool] read_timeout)"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_means_none_and_clones_share() {
        let t = ReadTimeout::new(Duration::ZERO);
        assert_eq!(t.get(), None);
        let c = t.clone();
        t.set(Duration::from_secs(2));
        assert_eq!(c.get(), Some(Duration::from_secs(2)));
        assert!(timed_out(c.get()).to_string().contains("2s"));
    }
}
