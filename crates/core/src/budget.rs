//! A process-wide memory budget: how many bytes of something (large client requests) the
//! whole proxy may hold at once. Holders take a [`Charge`] that grows as they buffer more and
//! gives its bytes back when dropped, so no path can forget to release them. A budget may be
//! part of another ([`MemoryBudget::within`]: one session's share of the process's): its
//! charges hold their bytes against both.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;

/// A limit on bytes held across the process, and what is held now.
#[derive(Debug)]
pub struct MemoryBudget {
    limit: AtomicUsize,
    used: AtomicUsize,
    /// The budget this one is part of: what is held here is held there too.
    outer: Option<Arc<MemoryBudget>>,
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
    /// The budget that refused is the one the charge's budget is part of (see
    /// [`MemoryBudget::within`]), not its own.
    pub outer: bool,
}

impl MemoryBudget {
    /// A budget of `limit` bytes, nothing held.
    pub fn new(limit: usize) -> Arc<MemoryBudget> {
        Arc::new(MemoryBudget {
            limit: AtomicUsize::new(limit),
            used: AtomicUsize::new(0),
            outer: None,
        })
    }

    /// A budget of a configured byte count (as [`MemoryBudget::configured`]) that is part of
    /// `outer`: a charge against it holds its bytes against both, and is refused where
    /// either cannot cover them.
    pub fn within(outer: &Arc<MemoryBudget>, bytes: u64) -> Arc<MemoryBudget> {
        Arc::new(MemoryBudget {
            limit: AtomicUsize::new(usize::try_from(bytes).unwrap_or(usize::MAX)),
            used: AtomicUsize::new(0),
            outer: Some(outer.clone()),
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
            .map_err(|used| OverBudget {
                wanted: n,
                used,
                limit,
                outer: false,
            })?;
        if let Some(outer) = &self.outer {
            if let Err(over) = outer.take(n) {
                self.used.fetch_sub(n, Relaxed);
                return Err(OverBudget {
                    outer: true,
                    ..over
                });
            }
        }
        Ok(())
    }

    /// Gives back `n` bytes held (here and in the budget this one is part of).
    fn give(&self, n: usize) {
        self.used.fetch_sub(n, Relaxed);
        if let Some(outer) = &self.outer {
            outer.give(n);
        }
    }
}

/// One holder's share of a budget (a session's of the process's): a budget
/// [`within`](MemoryBudget::within) it, made when first needed (most holders never need one).
#[derive(Debug, Default)]
pub struct Share(Option<Arc<MemoryBudget>>);

impl Share {
    /// The share, within `outer`, its limit `bytes` as configured now (a reload applies to
    /// the next charge).
    pub fn within(&mut self, outer: &Arc<MemoryBudget>, bytes: u64) -> &Arc<MemoryBudget> {
        let budget = self
            .0
            .get_or_insert_with(|| MemoryBudget::within(outer, bytes));
        budget.set_configured(bytes);
        budget
    }
}

/// The memory a protocol's prepared statements may hold: the process's budget (`[mysql]` or
/// `[postgres]` `max_statement_memory`) and each session's share of it
/// (`max_statement_memory_per_session`), both changed by a reload for the next prepare.
#[derive(Debug)]
pub struct StatementMemory {
    /// The configuration section, as the refusals name it (`[mysql]`, `[postgres]`).
    section: &'static str,
    process: Arc<MemoryBudget>,
    per_session: AtomicU64,
}

impl StatementMemory {
    /// `total` bytes for the process, `per_session` for each session, named by `section`.
    pub fn new(section: &'static str, total: u64, per_session: u64) -> StatementMemory {
        StatementMemory {
            section,
            process: MemoryBudget::configured(total),
            per_session: AtomicU64::new(per_session),
        }
    }

    /// The budget a session charges its statements to: its `share` (made at its first
    /// prepare), within the process's.
    pub fn of_session<'a>(&self, share: &'a mut Share) -> &'a Arc<MemoryBudget> {
        share.within(&self.process, self.per_session.load(Relaxed))
    }

    /// Applies reloaded limits; what changed, said for the reload's summary.
    pub fn reload(&self, total: u64, per_session: u64, changes: &mut Vec<String>) {
        let section = self.section;
        if self.process.limit() != usize::try_from(total).unwrap_or(usize::MAX) {
            self.process.set_configured(total);
            changes.push(format!("{section} max_statement_memory {total}"));
        }
        if self.per_session.swap(per_session, Relaxed) != per_session {
            changes.push(format!(
                "{section} max_statement_memory_per_session {per_session}"
            ));
        }
    }

    /// The message for a statement whose text does not fit (`over`, from a charge against
    /// a session's budget): which limit, and how much is held.
    pub fn refusal(section: &str, over: &OverBudget) -> String {
        let why = if over.outer {
            format!(
                "the prepared statements of all sessions may hold at most {} bytes ({section} max_statement_memory) and {} are in use",
                over.limit, over.used
            )
        } else {
            format!(
                "the prepared statements of one session may hold at most {} bytes ({section} max_statement_memory_per_session) and this session's hold {}",
                over.limit, over.used
            )
        };
        format!(
            "sluice: out of memory for prepared statements: this statement's {} bytes do not fit, because {why}; close some and retry",
            over.wanted
        )
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
        self.budget.give(n);
        self.bytes -= n;
    }

    /// Gives back everything held (the charge stays, empty, for the next bytes).
    pub fn release(&mut self) {
        if self.bytes > 0 {
            self.budget.give(self.bytes);
            self.bytes = 0;
        }
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        if self.bytes > 0 {
            self.budget.give(self.bytes);
        }
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
                limit: 100,
                outer: false,
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

    #[test]
    fn a_budget_within_another_holds_its_bytes_in_both() {
        let process = MemoryBudget::new(100);
        let a = MemoryBudget::within(&process, 60);
        let b = MemoryBudget::within(&process, 60);
        let mut x = a.charge();
        x.grow(50).unwrap();
        assert_eq!((a.used(), process.used()), (50, 50));
        // Its own limit refuses first.
        let over = x.grow(20).unwrap_err();
        assert_eq!((over.outer, over.limit, over.used), (false, 60, 50));
        let mut y = b.charge();
        y.grow(40).unwrap();
        // Within b's share, beyond the process's: refused, and b holds nothing more.
        let over = y.grow(20).unwrap_err();
        assert_eq!((over.outer, over.limit, over.used), (true, 100, 90));
        assert_eq!((b.used(), process.used()), (40, 90));
        x.shrink(30);
        y.grow(20).unwrap();
        assert_eq!((a.used(), b.used(), process.used()), (20, 60, 80));
        drop(x);
        y.release();
        assert_eq!((a.used(), b.used(), process.used()), (0, 0, 0));
        y.grow(60).unwrap();
        drop(b);
        drop(y);
        assert_eq!(process.used(), 0);
    }
}
