//! A session's names (prepared statements, portals) in a map that costs one pointer until
//! the client names something: most idle sessions never do, and a session's size is what
//! thousands of idle clients cost. Hashed with foldhash, seeded per process: a lookup runs on
//! every Bind, and SipHash cost more than the rest of it.

use std::collections::HashMap;

/// The bytes of a prepared statement's or portal's name that tell it apart: PostgreSQL's
/// tables of both keep a name's first `NAMEDATALEN - 1` bytes (63), so two names alike that
/// far are one name there ("already exists", and either finds it).
pub const NAME_BYTES: usize = 63;

/// What of `name` tells it apart (see [`NAME_BYTES`]).
pub fn key(name: &[u8]) -> &[u8] {
    &name[..name.len().min(NAME_BYTES)]
}

/// Whether two client-given names name the same statement or portal.
pub fn same(a: &[u8], b: &[u8]) -> bool {
    key(a) == key(b)
}

/// A map from client-given names (bytes, compared as PostgreSQL compares them: exactly, up
/// to [`NAME_BYTES`]), allocated on first insert.
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
        self.0.as_ref()?.get(key(name))
    }

    /// Whether `name` is in the map.
    pub fn contains_key(&self, name: &[u8]) -> bool {
        self.get(name).is_some()
    }

    /// Sets `name`, returning its previous value.
    pub fn insert(&mut self, name: Box<[u8]>, value: V) -> Option<V> {
        let name = match name.len() > NAME_BYTES {
            true => key(&name).into(),
            false => name,
        };
        self.0.get_or_insert_with(Box::default).insert(name, value)
    }

    /// Removes `name`, returning its value.
    pub fn remove(&mut self, name: &[u8]) -> Option<V> {
        self.0.as_mut()?.remove(key(name))
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

/// A session's portals: the unnamed one in a field of its own, the named ones in a
/// [`NameMap`], both in a box allocated at the first Bind (as a [`NameMap`] is: an idle
/// session's size is what thousands of idle clients cost). Most clients only ever bind the
/// unnamed portal (pgbench, JDBC, pgx, psycopg), so the Bind, Execute and end of every
/// transaction of theirs finds, replaces and drops it without hashing its name.
#[derive(Debug)]
pub struct Portals<V>(Option<Box<PortalRoom<V>>>);

#[derive(Debug)]
struct PortalRoom<V> {
    unnamed: Option<V>,
    named: NameMap<V>,
}

impl<V> Default for Portals<V> {
    fn default() -> Self {
        Portals(None)
    }
}

impl<V> Portals<V> {
    /// The portal named `name` (`""`: the unnamed one).
    pub fn get(&self, name: &[u8]) -> Option<&V> {
        let room = self.0.as_ref()?;
        match name.is_empty() {
            true => room.unnamed.as_ref(),
            false => room.named.get(name),
        }
    }

    /// Whether `name` is open.
    pub fn contains_key(&self, name: &[u8]) -> bool {
        self.get(name).is_some()
    }

    /// Opens `name`, returning the portal it replaces.
    pub fn insert(&mut self, name: &[u8], value: V) -> Option<V> {
        let room = self.0.get_or_insert_with(|| {
            Box::new(PortalRoom {
                unnamed: None,
                named: NameMap::default(),
            })
        });
        match name.is_empty() {
            true => room.unnamed.replace(value),
            false => room.named.insert(key(name).into(), value),
        }
    }

    /// Closes `name`, returning it.
    pub fn remove(&mut self, name: &[u8]) -> Option<V> {
        let room = self.0.as_mut()?;
        match name.is_empty() {
            true => room.unnamed.take(),
            false => room.named.remove(name),
        }
    }

    /// Open portals.
    pub fn len(&self) -> usize {
        self.0
            .as_ref()
            .map_or(0, |r| usize::from(r.unnamed.is_some()) + r.named.len())
    }

    /// No portal is open.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Closes every portal, keeping the room for the next ones (portals are closed at the
    /// end of every transaction: a client that binds once binds again).
    pub fn empty(&mut self) {
        if let Some(room) = &mut self.0 {
            room.unnamed = None;
            room.named.empty();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{NameMap, Portals};

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

    /// Names alike in their first 63 bytes are one name, as in PostgreSQL's tables; the map
    /// keeps no more of a name than that.
    #[test]
    fn names_are_told_apart_by_their_first_63_bytes() {
        let long = |tail: &str| format!("{}{tail}", "n".repeat(63)).into_bytes();
        let mut m: NameMap<u32> = NameMap::default();
        m.insert(long("A").into(), 1);
        assert_eq!(m.get(&long("B")), Some(&1));
        assert_eq!(m.get(&long("")), Some(&1));
        assert_eq!(m.insert(long("CCCC").into(), 2), Some(1));
        assert!(m
            .0
            .as_ref()
            .unwrap()
            .keys()
            .all(|k| k.len() == super::NAME_BYTES));
        assert_eq!(m.get(&long("")[..62]), None);
        assert_eq!(m.remove(&long("Z")), Some(2));
        assert!(super::same(&long("x"), &long("y")) && !super::same(b"a", b"b"));
    }

    /// The unnamed portal and named ones, opened, replaced, counted and closed alike; the
    /// unnamed one never hashed into the map, and nothing allocated until one is opened.
    #[test]
    fn portals_keep_the_unnamed_one_apart() {
        let mut p: Portals<u32> = Portals::default();
        assert!(p.is_empty() && p.get(b"").is_none() && p.remove(b"").is_none());
        assert!(p.0.is_none(), "nothing allocated before the first portal");
        assert_eq!(p.insert(b"", 1), None);
        let room = p.0.as_ref().unwrap();
        assert!(
            room.named.0.is_none(),
            "the unnamed portal hashes into no map"
        );
        assert_eq!(p.insert(b"", 2), Some(1));
        assert_eq!(p.insert(b"c1", 3), None);
        assert_eq!((p.get(b""), p.get(b"c1"), p.len()), (Some(&2), Some(&3), 2));
        assert!(p.contains_key(b"c1") && !p.contains_key(b"c2"));
        let long = format!("{}x", "n".repeat(63)).into_bytes();
        p.insert(&long, 4);
        assert_eq!(p.get(&long[..63]), Some(&4), "named portals keep 63 bytes");
        assert_eq!(p.remove(b""), Some(2));
        assert_eq!((p.get(b""), p.len()), (None, 2));
        p.insert(b"", 5);
        p.empty();
        assert!(p.is_empty() && p.get(b"c1").is_none() && p.get(b"").is_none());
        assert!(p.0.is_some(), "emptied, the room stays");
        assert_eq!(std::mem::size_of::<Portals<u32>>(), 8);
    }
}
