//! Statement texts' classifications kept by shape, per thread: a
//! [`ShapeTable`](sluice_sqlscan::shapes::ShapeTable) keyed by the PostgreSQL scanner's
//! [`shape_key`] (the tokens with the literals' values and the comments' words left out).
//! Only the classifications of scans that hold for every text of their shape are kept
//! (`PgScan::same_for_shape`: single queries and data-modifying statements without a hint or
//! an unknown function), so `SELECT ... WHERE aid = 12345` is scanned once and
//! `... WHERE aid = 731` is not.
//!
//! In front of the table, the shapes found most recently are kept with a sample of their
//! text ([`ShapeSample`]), by the text's first [`PREFIX`] bytes: a text that matches its
//! sample takes the kept classification without its key being built (a comparison of the
//! bytes between the literals, and a lexing of the literals only).
//!
//! Per thread: no lock on the hot path; each of the runtime's threads keeps at most
//! [`SLOTS`](sluice_sqlscan::shapes::SLOTS) entries, and [`RECENT`] samples.

use crate::classify::{scanned, Scanned};
use sluice_sqlscan::postgres::{shape_key, ShapeKey, ShapeSample};
use sluice_sqlscan::shapes::ShapeTable;
use std::cell::RefCell;
use std::sync::Arc;

/// Samples kept (a power of two: a text's place is its prefix's hash's high bits).
pub const RECENT: usize = 16;
const _: () = assert!(RECENT.is_power_of_two());
/// Bytes of a text that find its sample: a shape whose first literal comes earlier has none.
pub const PREFIX: usize = 16;

/// A kept classification, and a sample of a text of its shape (when one can be taken).
#[derive(Clone)]
struct Kept {
    scanned: Arc<Scanned>,
    sample: Option<Arc<ShapeSample>>,
}

/// A recent sample: its prefix's hash, the sample, its shape's classification.
type Recent = (u64, Arc<ShapeSample>, Arc<Scanned>);

/// A thread's table, its samples, and the key being looked up (built in place; boxed, off
/// the stack).
#[derive(Default)]
struct Cache {
    key: Box<ShapeKey>,
    table: ShapeTable<Kept>,
    /// By [`place`] of the sample's text: the prefix's hash, and what is kept for its shape.
    recent: [Option<Recent>; RECENT],
    /// Texts classified from a sample.
    sampled: u64,
}

thread_local! {
    static CACHE: RefCell<Cache> = RefCell::new(Cache::default());
}

/// The hash of a text's first [`PREFIX`] bytes, if it has that many.
#[inline]
fn place(sql: &[u8]) -> Option<u64> {
    let (a, b) = sql.get(..PREFIX)?.split_at(8);
    let a = u64::from_le_bytes(a.try_into().ok()?);
    let b = u64::from_le_bytes(b.try_into().ok()?);
    Some((a ^ b.rotate_left(29)).wrapping_mul(0x9E37_79B9_7F4A_7C15))
}

/// The place of a prefix's hash among the samples (its high bits: below [`RECENT`]).
#[inline]
fn slot_of(hash: u64) -> usize {
    (hash >> (64 - RECENT.trailing_zeros())) as usize
}

/// Classifies `sql` from the thread's samples or table, or by scanning it, keeping what it
/// may.
pub(crate) fn classify(sql: &[u8]) -> Arc<Scanned> {
    CACHE.with(|cache| match cache.try_borrow_mut() {
        Ok(mut cache) => {
            let Cache {
                key,
                table,
                recent,
                sampled,
            } = &mut *cache;
            if !table.looking() {
                return Arc::new(scanned(sql).0);
            }
            if let Some(h) = place(sql) {
                if let Some((hash, sample, scanned)) = &recent[slot_of(h)] {
                    if *hash == h && sample.same_shape(sql) {
                        table.count_found();
                        *sampled += 1;
                        return scanned.clone();
                    }
                }
            }
            if !shape_key(sql, key) {
                return Arc::new(scanned(sql).0);
            }
            let kept = table.get_or_scan(key.as_bytes(), || {
                let (s, same_for_shape) = scanned(sql);
                let sample = same_for_shape
                    .then(|| ShapeSample::of(sql))
                    .flatten()
                    .filter(|s| s.fixed_prefix() >= PREFIX)
                    .map(Arc::new);
                let kept = Kept {
                    scanned: Arc::new(s),
                    sample,
                };
                (kept, same_for_shape)
            });
            // Where the texts that match the sample will look for it (unless it is there: a
            // text of its shape that does not match it, spaced otherwise, comes this way).
            if let Some(sample) = &kept.sample {
                if let Some(h) = place(sample.text()) {
                    match &mut recent[slot_of(h)] {
                        Some((_, there, _)) if Arc::ptr_eq(there, sample) => {}
                        r => *r = Some((h, sample.clone(), kept.scanned.clone())),
                    }
                }
            }
            kept.scanned
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

    /// Texts classified from the thread's samples.
    fn thread_sampled() -> u64 {
        CACHE.with(|cache| cache.borrow().sampled)
    }

    #[test]
    fn a_text_that_matches_a_recent_sample_is_classified_without_its_key() {
        let texts: [&[u8]; 4] = [
            b"SELECT abalance FROM pgbench_accounts WHERE aid = 12345;",
            b"SELECT abalance FROM pgbench_accounts WHERE aid = 7;",
            b"SELECT abalance FROM pgbench_accounts WHERE aid = 99999999;",
            b"SELECT abalance FROM pgbench_accounts WHERE aid = 5;",
        ];
        let before = thread_sampled();
        let moved = counted(|| {
            for t in texts {
                assert_eq!(*classify(t), scanned(t).0);
            }
        });
        // The first is scanned and sampled; the others match its sample.
        assert_eq!(moved, (3, 4));
        assert_eq!(thread_sampled() - before, 3);
        // The same first bytes, another shape: its own classification.
        let before = thread_sampled();
        for t in [
            &b"SELECT abalance FROM pgbench_accounts WHERE aid = 7 FOR UPDATE;"[..],
            b"SELECT abalance FROM pgbench_accounts WHERE aid = nextval('s');",
            b"SELECT abalance FROM pgbench_accounts WHERE aid = 7;  ",
        ] {
            assert_eq!(*classify(t), scanned(t).0);
        }
        assert_eq!(thread_sampled(), before);
        assert_eq!(
            classify(b"SELECT abalance FROM pgbench_accounts WHERE aid = 7 FOR UPDATE;").route,
            Route::Write
        );
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
