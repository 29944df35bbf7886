//! A process-wide memory budget: how many bytes of something (large client requests) the
//! whole proxy may hold at once. Holders take a [`Charge`] that grows as they buffer more and
//! gives its bytes back when dropped, so no path can forget to release them.

use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;

/// A limit on bytes held across the process, and what is held now.
#[derive(Debug)]
pub struct MemoryBudget {
    limit: AtomicUsize,
    used: AtomicUsize,
}

/// The budget could not cover a charge.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{wanted} more bytes would exceed the {limit}-byte budget ({used} bytes in use)")]
pub struct OverBudget {
    /// Bytes asked for.
    pub wanted: usize,
    /// Bytes held when it was refused.
    pub used: usize,
    /// The limit.
    pub limit: usize,
}

impl MemoryBudget {
    /// A budget of `limit` bytes, nothing held.
    pub fn new(limit: usize) -> Arc<MemoryBudget> {
        Arc::new(MemoryBudget {
            limit: AtomicUsize::new(limit),
            used: AtomicUsize::new(0),
        })
    }

    /// A budget of a configured byte count (beyond what the address space can hold: no
    /// limit).
    pub fn configured(bytes: u64) -> Arc<MemoryBudget> {
        MemoryBudget::new(usize::try_from(bytes).unwrap_or(usize::MAX))
    }

    /// Changes the limit (a reload). Bytes already held stay held; new charges see the new
    /// limit.
    pub fn set_limit(&self, limit: usize) {
        self.limit.store(limit, Relaxed);
    }

    /// Changes the limit to a configured byte count (as [`MemoryBudget::configured`]).
    pub fn set_configured(&self, bytes: u64) {
        self.set_limit(usize::try_from(bytes).unwrap_or(usize::MAX));
    }

    /// The limit.
    pub fn limit(&self) -> usize {
        self.limit.load(Relaxed)
    }

    /// Bytes held now.
    pub fn used(&self) -> usize {
        self.used.load(Relaxed)
    }

    /// An empty charge against this budget.
    pub fn charge(self: &Arc<Self>) -> Charge {
        Charge {
            budget: self.clone(),
            bytes: 0,
        }
    }

    fn take(&self, n: usize) -> Result<(), OverBudget> {
        let limit = self.limit();
        self.used
            .fetch_update(Relaxed, Relaxed, |u| {
                u.checked_add(n).filter(|total| *total <= limit)
            })
            .map(|_| ())
            .map_err(|used| OverBudget {
                wanted: n,
                used,
                limit,
            })
    }
}

/// Bytes held against a [`MemoryBudget`]; given back when dropped.
#[derive(Debug)]
pub struct Charge {
    budget: Arc<MemoryBudget>,
    bytes: usize,
}

impl Charge {
    /// Holds `n` more bytes, or nothing if the budget cannot cover them.
    pub fn grow(&mut self, n: usize) -> Result<(), OverBudget> {
        self.budget.take(n)?;
        self.bytes += n;
        Ok(())
    }

    /// Holds at least `n` bytes in all (grows by the difference, if any).
    pub fn cover(&mut self, n: usize) -> Result<(), OverBudget> {
        match n.checked_sub(self.bytes) {
            Some(more) if more > 0 => self.grow(more),
            _ => Ok(()),
        }
    }

    /// A new, empty charge against the same budget.
    pub fn sibling(&self) -> Charge {
        Charge {
            budget: self.budget.clone(),
            bytes: 0,
        }
    }

    /// Bytes held by this charge.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Gives back `n` of the bytes held (all of them if it holds fewer).
    pub fn shrink(&mut self, n: usize) {
        let n = n.min(self.bytes);
        self.budget.used.fetch_sub(n, Relaxed);
        self.bytes -= n;
    }

    /// Gives back everything held (the charge stays, empty, for the next bytes).
    pub fn release(&mut self) {
        if self.bytes > 0 {
            self.budget.used.fetch_sub(self.bytes, Relaxed);
            self.bytes = 0;
        }
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        self.budget.used.fetch_sub(self.bytes, Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charges_are_bounded_and_given_back() {
        let b = MemoryBudget::new(100);
        let mut a = b.charge();
        a.grow(60).unwrap();
        let mut c = b.charge();
        let e = c.grow(50).unwrap_err();
        assert_eq!(
            e,
            OverBudget {
                wanted: 50,
                used: 60,
                limit: 100
            }
        );
        c.cover(40).unwrap();
        c.cover(30).unwrap(); // already covered
        assert_eq!((c.bytes(), b.used()), (40, 100));
        drop(a);
        assert_eq!(b.used(), 40);
        c.release();
        assert_eq!((c.bytes(), b.used()), (0, 0));
        c.cover(40).unwrap();
        b.set_limit(10);
        assert!(c.grow(1).is_err());
        drop(c);
        assert_eq!(b.used(), 0);
        assert!(b.charge().grow(usize::MAX).is_err());
    }

    #[test]
    fn a_charge_shrinks_by_at_most_what_it_holds() {
        let b = MemoryBudget::new(100);
        let mut c = b.charge();
        c.grow(70).unwrap();
        c.shrink(30);
        assert_eq!((c.bytes(), b.used()), (40, 40));
        c.shrink(1000);
        assert_eq!((c.bytes(), b.used()), (0, 0));
        c.grow(100).unwrap();
    }
}
