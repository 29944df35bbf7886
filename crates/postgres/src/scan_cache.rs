//! Statement texts' classifications kept by shape, per thread: a
//! [`ShapeTable`](sluice_sqlscan::shapes::ShapeTable) keyed by the PostgreSQL scanner's
//! [`shape_key`] (the tokens with the literals' values and the comments' words left out).
//! Only the classifications of scans that hold for every text of their shape are kept
//! (`PgScan::same_for_shape`: single queries and data-modifying statements without a hint or
//! an unknown function), so `SELECT ... WHERE aid = 12345` is scanned once and
//! `... WHERE aid = 731` is not.
//!
//! Per thread: no lock on the hot path; each of the runtime's threads keeps at most
//! [`SLOTS`](sluice_sqlscan::shapes::SLOTS) entries.

use crate::classify::{scanned, Scanned};
use sluice_sqlscan::postgres::{shape_key, ShapeKey};
use sluice_sqlscan::shapes::ShapeTable;
use std::cell::RefCell;
use std::sync::Arc;

/// A thread's table, and the key being looked up (built in place; boxed, off the stack).
#[derive(Default)]
struct Cache {
    key: Box<ShapeKey>,
    table: ShapeTable<Arc<Scanned>>,
}

thread_local! {
    static CACHE: RefCell<Cache> = RefCell::new(Cache::default());
}

/// Classifies `sql` from the thread's table, or by scanning it, keeping what it may.
pub(crate) fn classify(sql: &[u8]) -> Arc<Scanned> {
    CACHE.with(|cache| match cache.try_borrow_mut() {
        Ok(mut cache) => {
            let Cache { key, table } = &mut *cache;
            if !table.looking() || !shape_key(sql, key) {
                return Arc::new(scanned(sql).0);
            }
            table.get_or_scan(key.as_bytes(), || {
                let (s, same_for_shape) = scanned(sql);
                (Arc::new(s), same_for_shape)
            })
        }
        Err(_) => Arc::new(scanned(sql).0),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classify::classify;
    use sluice_core::router::Route;
    use sluice_sqlscan::shapes::{PAUSE, WINDOW};

    /// How many texts this thread classified from its table, and how many it looked up there.
    fn thread_counts() -> (u64, u64) {
        CACHE.with(|cache| cache.borrow().table.counts())
    }

    /// What the thread's counts moved by while `f` ran: (found, looked up).
    fn counted(f: impl FnOnce()) -> (u64, u64) {
        let before = thread_counts();
        f();
        let after = thread_counts();
        (after.0 - before.0, after.1 - before.1)
    }

    #[test]
    fn a_shape_seen_is_classified_from_the_table_as_a_scan_would() {
        let texts: [&[u8]; 3] = [
            b"SELECT abalance FROM pgbench_accounts WHERE aid = 12345;",
            b"SELECT abalance FROM pgbench_accounts WHERE aid = 7;",
            b"SELECT abalance FROM pgbench_accounts WHERE aid = 99999999;",
        ];
        let moved = counted(|| {
            for t in texts {
                assert_eq!(*classify(t), scanned(t).0);
            }
        });
        assert_eq!(moved, (2, 3));
        let s = classify(b"UPDATE t SET a = 'xy' WHERE id = 1");
        assert_eq!(
            counted(|| assert_eq!(classify(b"UPDATE t SET a = 'z' WHERE id = 22"), s)),
            (1, 1)
        );
        assert_eq!(s.route, Route::Write);
    }

    #[test]
    fn what_a_literal_or_a_place_decides_is_scanned_every_time() {
        for (a, b) in [
            (
                &b"EXPLAIN (ANALYZE 'off') DELETE FROM t"[..],
                &b"EXPLAIN (ANALYZE 'on') DELETE FROM t"[..],
            ),
            (b"SET search_path = 'a'", b"SET search_path = 'b, c'"),
            (
                b"SELECT 1 /* sluice:reader */",
                b"SELECT 1234 /* sluice:reader */",
            ),
            (b"SELECT f(1)", b"SELECT f(1234)"),
        ] {
            let moved = counted(|| {
                assert_eq!(*classify(a), scanned(a).0);
                assert_eq!(*classify(b), scanned(b).0);
            });
            assert_eq!(moved.0, 0, "{:?}", String::from_utf8_lossy(b));
        }
        assert_eq!(
            classify(b"EXPLAIN (ANALYZE 'off') DELETE FROM t").route,
            Route::Read
        );
        assert_eq!(
            classify(b"EXPLAIN (ANALYZE 'on') DELETE FROM t").route,
            Route::Write
        );
        let hinted = classify(b"SELECT 1234 /* sluice:reader */");
        assert_eq!(hinted.hint, Some((22, 28)));
        // A comment's words are not part of a shape, but a hint in one is never taken from a
        // text without it (nor the other way round).
        let plain = classify(b"SELECT a FROM t /* request 1 */");
        assert_eq!(plain.hint, None);
        assert_eq!(
            counted(|| assert_eq!(classify(b"SELECT a FROM t /* request 2 */"), plain)),
            (1, 1)
        );
        let hinted = classify(b"SELECT a FROM t /* sluice:reader */");
        assert_eq!(hinted.hint, Some((26, 32)));
        assert_eq!(classify(b"SELECT a FROM t /* request 3 */").hint, None);
    }

    #[test]
    fn a_thread_of_ad_hoc_shapes_stops_building_keys_then_tries_again() {
        let moved = counted(|| {
            for i in 0..WINDOW {
                let text = format!("SELECT c{i} FROM t WHERE x = 1");
                classify(text.as_bytes());
            }
        });
        assert_eq!(moved, (0, u64::from(WINDOW)));
        // Paused: nothing looked up, and the texts classified all the same.
        let moved = counted(|| {
            for _ in 0..PAUSE {
                assert_eq!(classify(b"SELECT 1 FROM t").route, Route::Read);
            }
        });
        assert_eq!(moved, (0, 0));
        let moved = counted(|| {
            classify(b"SELECT 2 FROM t");
            classify(b"SELECT 3 FROM t");
        });
        assert_eq!(moved, (1, 2));
    }
}
