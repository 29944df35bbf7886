//! A session's names (prepared statements, portals) in a map that costs one pointer until
//! the client names something: most idle sessions never do, and a session's size is what
//! thousands of idle clients cost. Hashed with foldhash, seeded per process: a lookup runs on
//! every Bind, and SipHash cost more than the rest of it.

use std::collections::HashMap;

/// A map from client-given names (bytes, compared as PostgreSQL compares them: exactly),
/// allocated on first insert.
#[derive(Debug)]
// Boxed on purpose: an empty HashMap is 48 bytes inline, the box 8.
#[allow(clippy::box_collection)]
pub struct NameMap<V>(Option<Box<Map<V>>>);

type Map<V> = HashMap<Box<[u8]>, V, foldhash::fast::RandomState>;

impl<V> Default for NameMap<V> {
    fn default() -> Self {
        NameMap(None)
    }
}

impl<V> NameMap<V> {
    /// The value named `name`.
    pub fn get(&self, name: &[u8]) -> Option<&V> {
        self.0.as_ref()?.get(name)
    }

    /// Whether `name` is in the map.
    pub fn contains_key(&self, name: &[u8]) -> bool {
        self.get(name).is_some()
    }

    /// Sets `name`, returning its previous value.
    pub fn insert(&mut self, name: Box<[u8]>, value: V) -> Option<V> {
        self.0.get_or_insert_with(Box::default).insert(name, value)
    }

    /// Removes `name`, returning its value.
    pub fn remove(&mut self, name: &[u8]) -> Option<V> {
        self.0.as_mut()?.remove(name)
    }

    /// Entries.
    pub fn len(&self) -> usize {
        self.0.as_ref().map_or(0, |m| m.len())
    }

    /// No entries.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Removes every entry and gives the memory back.
    pub fn clear(&mut self) {
        self.0 = None;
    }

    /// Removes every entry, keeping the room for the next ones (portals, closed at the end of
    /// every transaction: a client that binds once binds again).
    pub fn empty(&mut self) {
        if let Some(m) = &mut self.0 {
            m.clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::NameMap;

    #[test]
    fn allocates_on_first_insert_and_frees_on_clear() {
        let mut m: NameMap<u32> = NameMap::default();
        assert!(m.is_empty() && m.0.is_none());
        assert_eq!(m.remove(b"a"), None);
        assert!(m.0.is_none(), "a remove must not allocate");
        assert_eq!(m.insert((*b"a").into(), 1), None);
        assert_eq!(m.insert((*b"a").into(), 2), Some(1));
        assert!(m.contains_key(b"a") && !m.contains_key(b"b"));
        assert_eq!((m.get(b"a"), m.len()), (Some(&2), 1));
        assert_eq!(m.remove(b"a"), Some(2));
        m.insert((*b"b").into(), 3);
        m.empty();
        assert!(m.is_empty() && m.0.is_some(), "emptied, the room stays");
        m.insert((*b"b").into(), 3);
        m.clear();
        assert!(m.is_empty() && m.0.is_none());
        assert_eq!(std::mem::size_of::<NameMap<u32>>(), 8);
    }
}
