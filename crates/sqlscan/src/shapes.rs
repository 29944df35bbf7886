//! A bounded table of what statement texts scanned to, by shape key (dialect-neutral: each
//! dialect builds its keys, e.g. [`crate::postgres::shape_key`]).
//!
//! Most traffic repeats a few statement shapes with other values (`... WHERE id = 12345`,
//! then `... WHERE id = 731`). A key is a lexing pass, a fraction of a scan: a text whose
//! key is in the table takes the result kept for it instead of being scanned. The caller
//! keeps only results that hold for every text of their shape, and a key is compared whole,
//! never by its hash alone: a text gets what its scan would give, or it is scanned.
//!
//! Bounded: [`SLOTS`] entries, one per hash (a new shape takes its slot's place). A table
//! that finds few of its texts (fewer than a quarter of [`WINDOW`] lookups in a row: ad-hoc
//! statements, each of its own shape) has its owner stop building keys for [`PAUSE`] texts,
//! so that keys are paid for only while they serve.

use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Lookups in every table of the process, and how many found their key (the metrics read them).
pub static LOOKED_UP: AtomicU64 = AtomicU64::new(0);
/// See [`LOOKED_UP`].
pub static FOUND: AtomicU64 = AtomicU64::new(0);

/// Entries in a table (a power of two: a key's slot is its hash's low bits).
pub const SLOTS: usize = 256;
/// Lookups over which the share found is judged.
pub const WINDOW: u32 = 256;
/// Texts scanned without a lookup after a window where the table served too few.
pub const PAUSE: u32 = 4096;

/// One shape's result.
struct Slot<T> {
    hash: u64,
    key: Box<[u8]>,
    value: T,
}

/// See the module's documentation.
pub struct ShapeTable<T> {
    /// Empty until the first lookup, then [`SLOTS`] long.
    slots: Vec<Option<Slot<T>>>,
    /// Lookups in this window, and how many found their key.
    looked: u32,
    found: u32,
    /// Texts still to scan without a lookup.
    paused: u32,
    /// Keys found and looked up since the table was made.
    total: (u64, u64),
}

impl<T> Default for ShapeTable<T> {
    fn default() -> Self {
        ShapeTable {
            slots: Vec::new(),
            looked: 0,
            found: 0,
            paused: 0,
            total: (0, 0),
        }
    }
}

impl<T: Clone> ShapeTable<T> {
    /// Whether to look the next text up (it then counts in the window), or to scan it
    /// without building its key.
    pub fn looking(&mut self) -> bool {
        if self.paused > 0 {
            self.paused -= 1;
            return false;
        }
        self.looked += 1;
        if self.looked == WINDOW {
            if self.found < WINDOW / 4 {
                self.paused = PAUSE;
            }
            self.looked = 0;
            self.found = 0;
        }
        true
    }

    /// The value kept for `key`, or what `scan` gives — kept if `scan` says it holds for
    /// every text of the key.
    pub fn get_or_scan(&mut self, key: &[u8], scan: impl FnOnce() -> (T, bool)) -> T {
        let hash = foldhash::fast::FixedState::with_seed(0x5ca9_cac4).hash_one(key);
        if self.slots.is_empty() {
            self.slots.resize_with(SLOTS, || None);
        }
        let Some(slot) = self.slots.get_mut(hash as usize & (SLOTS - 1)) else {
            return scan().0;
        };
        self.total.1 += 1;
        LOOKED_UP.fetch_add(1, Relaxed);
        if let Some(s) = slot.as_ref().filter(|s| s.hash == hash && *s.key == *key) {
            self.found += 1;
            self.total.0 += 1;
            FOUND.fetch_add(1, Relaxed);
            return s.value.clone();
        }
        let (value, same_for_shape) = scan();
        if same_for_shape {
            *slot = Some(Slot {
                hash,
                key: key.into(),
                value: value.clone(),
            });
        }
        value
    }

    /// Counts a lookup its owner answered without building the key, from a text that it knows
    /// has a key found here (see [`crate::postgres::ShapeSample`]).
    pub fn count_found(&mut self) {
        self.found += 1;
        self.total.0 += 1;
        self.total.1 += 1;
        LOOKED_UP.fetch_add(1, Relaxed);
        FOUND.fetch_add(1, Relaxed);
    }

    /// Keys found, and keys looked up, since the table was made.
    pub fn counts(&self) -> (u64, u64) {
        self.total
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_kept_by_whole_key_when_the_scan_says_they_hold() {
        let mut t = ShapeTable::default();
        assert!(t.looking());
        assert_eq!(t.get_or_scan(b"k1", || (1, true)), 1);
        assert_eq!(t.get_or_scan(b"k1", || (2, true)), 1);
        // Not kept: scanned every time.
        assert_eq!(t.get_or_scan(b"k2", || (3, false)), 3);
        assert_eq!(t.get_or_scan(b"k2", || (4, false)), 4);
        assert_eq!(t.counts(), (1, 4));
    }

    #[test]
    fn keys_of_one_slot_replace_each_other_and_are_never_confused() {
        let mut t = ShapeTable::default();
        // More keys than slots: some share a slot; each gets its own value or a scan.
        for round in 0..2 {
            for i in 0..(SLOTS * 4) as u64 {
                let key = i.to_le_bytes();
                let got = t.get_or_scan(&key, || (i, true));
                assert_eq!(got, i, "round {round}");
            }
        }
        assert!(t.slots.len() == SLOTS);
    }

    #[test]
    fn a_table_that_serves_few_pauses_then_tries_again() {
        let mut t: ShapeTable<u32> = ShapeTable::default();
        for i in 0..WINDOW {
            assert!(t.looking());
            t.get_or_scan(&i.to_le_bytes(), || (i, true));
        }
        for _ in 0..PAUSE {
            assert!(!t.looking());
        }
        assert!(t.looking());
        // A window that serves (the same key again and again) does not pause.
        for _ in 0..WINDOW * 2 {
            t.get_or_scan(b"same", || (7, true));
            assert!(t.looking());
        }
    }
}
