//! Values many sessions hold alike (a database name, a client's startup settings), shared
//! instead of copied per session: thousands of idle clients of one application then cost one
//! copy. Bounded: when full, values no session holds any more are dropped, and if it is still
//! full the caller gets a copy of its own.

use crate::HashSet;
use parking_lot::Mutex;
use std::borrow::Borrow;
use std::hash::Hash;
use std::sync::Arc;

/// A bounded set of shared values.
#[derive(Debug)]
pub struct Interner<T: ?Sized> {
    values: Mutex<Values<T>>,
    capacity: usize,
}

#[derive(Debug)]
struct Values<T: ?Sized> {
    set: HashSet<Arc<T>>,
    /// The value last made by [`Interner::intern_made`], with the source it was made from.
    last_made: Option<(Box<[u8]>, Arc<T>)>,
}

impl<T: ?Sized + Hash + Eq> Interner<T>
where
    for<'a> Arc<T>: From<&'a T>,
{
    /// An interner of at most `capacity` values.
    pub fn new(capacity: usize) -> Interner<T> {
        Interner {
            values: Mutex::new(Values {
                set: HashSet::default(),
                last_made: None,
            }),
            capacity,
        }
    }

    /// The shared copy of `v`.
    pub fn intern(&self, v: &T) -> Arc<T> {
        let set = &mut self.values.lock().set;
        if let Some(a) = set.get(v) {
            return a.clone();
        }
        if set.len() >= self.capacity {
            set.retain(|a| Arc::strong_count(a) > 1);
            if set.len() >= self.capacity {
                return Arc::from(v);
            }
        }
        let a: Arc<T> = Arc::from(v);
        set.insert(a.clone());
        a
    }

    /// The shared copy of the value `make` makes from `source`, bytes that determine it
    /// (equal sources make equal values). The last one made is remembered with its source:
    /// a run of clients alike (one application's) costs neither making nor hashing it.
    pub fn intern_made<V: Borrow<T>>(&self, source: &[u8], make: impl FnOnce() -> V) -> Arc<T> {
        if let Some((made_from, v)) = &self.values.lock().last_made {
            if **made_from == *source {
                return v.clone();
            }
        }
        let v = self.intern(make().borrow());
        self.values.lock().last_made = Some((source.into(), v.clone()));
        v
    }

    /// Values held now.
    pub fn len(&self) -> usize {
        self.values.lock().set.len()
    }

    /// Holds nothing.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::Interner;
    use std::sync::Arc;

    #[test]
    fn shares_equal_values_and_stays_bounded() {
        let i: Interner<str> = Interner::new(2);
        let a = i.intern("db");
        let b = i.intern("db");
        assert!(Arc::ptr_eq(&a, &b));
        let c = i.intern("other");
        // Full, and both held: a third value is a copy of its own, not stored.
        let d = i.intern("third");
        assert_eq!((&*d, i.len()), ("third", 2));
        assert!(!Arc::ptr_eq(&d, &i.intern("third")));
        // Once nobody holds "other", its place is given to a new value.
        drop(c);
        let e = i.intern("third");
        assert!(Arc::ptr_eq(&e, &i.intern("third")));
        assert_eq!(i.len(), 2);
    }

    #[test]
    fn a_value_made_from_the_source_of_the_last_one_is_not_made_again() {
        let i: Interner<str> = Interner::new(2);
        let made = std::cell::Cell::new(0);
        let make = |v: &'static str| {
            made.set(made.get() + 1);
            v.to_string()
        };
        let a = i.intern_made(b"src-a", || make("A"));
        let b = i.intern_made(b"src-a", || make("A"));
        assert!(Arc::ptr_eq(&a, &b) && made.get() == 1);
        // Another source: made, and shared with what equals it.
        let c = i.intern_made(b"src-c", || make("A"));
        assert!(Arc::ptr_eq(&a, &c) && made.get() == 2);
        let d = i.intern_made(b"src-d", || make("D"));
        assert_eq!((&*d, made.get()), ("D", 3));
        assert!(Arc::ptr_eq(&d, &i.intern("D")));
        // Still bounded: the remembered value counts as held, the others can go.
        drop((a, b, c));
        i.intern("E");
        assert_eq!(i.len(), 2);
        assert!(Arc::ptr_eq(&d, &i.intern_made(b"src-d", || make("never"))));
    }

    #[test]
    fn interns_slices() {
        let i: Interner<[(Box<str>, Box<str>)]> = Interner::new(8);
        let v = vec![("a".into(), "1".into())];
        assert!(Arc::ptr_eq(&i.intern(&v), &i.intern(&v.clone())));
    }
}
