//! Values many sessions hold alike (a database name, a client's startup settings), shared
//! instead of copied per session: thousands of idle clients of one application then cost one
//! copy. Bounded: when full, values no session holds any more are dropped, and if it is still
//! full the caller gets a copy of its own.

use parking_lot::Mutex;
use std::collections::HashSet;
use std::hash::Hash;
use std::sync::Arc;

/// A bounded set of shared values.
#[derive(Debug)]
pub struct Interner<T: ?Sized> {
    set: Mutex<HashSet<Arc<T>>>,
    capacity: usize,
}

impl<T: ?Sized + Hash + Eq> Interner<T>
where
    for<'a> Arc<T>: From<&'a T>,
{
    /// An interner of at most `capacity` values.
    pub fn new(capacity: usize) -> Interner<T> {
        Interner {
            set: Mutex::new(HashSet::new()),
            capacity,
        }
    }

    /// The shared copy of `v`.
    pub fn intern(&self, v: &T) -> Arc<T> {
        let mut set = self.set.lock();
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

    /// Values held now.
    pub fn len(&self) -> usize {
        self.set.lock().len()
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
    fn interns_slices() {
        let i: Interner<[(Box<str>, Box<str>)]> = Interner::new(8);
        let v = vec![("a".into(), "1".into())];
        assert!(Arc::ptr_eq(&i.intern(&v), &i.intern(&v.clone())));
    }
}
