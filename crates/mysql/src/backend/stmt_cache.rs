//! Prepared statements held on one backend connection, keyed by (schema, SQL text), bounded
//! in number: the least recently used statement is closed when the cache is full, so servers'
//! `max_prepared_stmt_count` is never exhausted by the proxy.

use std::collections::HashMap;
use std::sync::Arc;

/// Identity of a prepared statement's text: the schema it was prepared in and the SQL.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct StmtKey {
    /// Schema at prepare time (unqualified names resolve there).
    pub schema: Option<String>,
    /// Statement text.
    pub sql: Box<[u8]>,
}

/// A statement prepared on this connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BackendStmt {
    /// The server's statement id.
    pub id: u32,
    /// Number of parameters.
    pub params: u16,
    /// Number of result columns.
    pub columns: u16,
    /// Parameter types have been sent to the server for this statement.
    pub types_bound: bool,
}

struct Entry {
    stmt: BackendStmt,
    last_used: u64,
}

/// Bounded cache of prepared statements.
pub struct StmtCache {
    capacity: usize,
    tick: u64,
    map: HashMap<Arc<StmtKey>, Entry>,
}

impl StmtCache {
    /// An empty cache holding at most `capacity` statements.
    pub fn new(capacity: usize) -> StmtCache {
        StmtCache {
            capacity: capacity.max(1),
            tick: 0,
            map: HashMap::new(),
        }
    }

    /// Looks up a statement and marks it used.
    pub fn get(&mut self, key: &StmtKey) -> Option<&mut BackendStmt> {
        self.tick += 1;
        let tick = self.tick;
        self.map.get_mut(key).map(|e| {
            e.last_used = tick;
            &mut e.stmt
        })
    }

    /// Adds a statement; returns the server id of the one evicted to make room (or replaced),
    /// which the caller must close with COM_STMT_CLOSE.
    pub fn insert(&mut self, key: Arc<StmtKey>, stmt: BackendStmt) -> Option<u32> {
        self.tick += 1;
        let mut evicted = None;
        if self.map.len() >= self.capacity && !self.map.contains_key(&key) {
            evicted = self.evict_oldest();
        }
        let replaced = self.map.insert(
            key,
            Entry {
                stmt,
                last_used: self.tick,
            },
        );
        replaced.map(|e| e.stmt.id).or(evicted)
    }

    /// Removes and returns the least recently used statement's id.
    pub fn evict_oldest(&mut self) -> Option<u32> {
        let oldest = self
            .map
            .iter()
            .min_by_key(|(_, e)| e.last_used)
            .map(|(k, _)| k.clone())?;
        self.map.remove(&oldest).map(|e| e.stmt.id)
    }

    /// Forgets a statement (after the server lost it).
    pub fn remove(&mut self, key: &StmtKey) -> Option<u32> {
        self.map.remove(key).map(|e| e.stmt.id)
    }

    /// Forgets everything (after a connection reset, which closes all statements).
    pub fn clear(&mut self) {
        self.map.clear();
    }

    /// Number of statements held.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// True if none are held.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(s: &str) -> Arc<StmtKey> {
        Arc::new(StmtKey {
            schema: None,
            sql: s.as_bytes().into(),
        })
    }

    fn stmt(id: u32) -> BackendStmt {
        BackendStmt {
            id,
            params: 0,
            columns: 0,
            types_bound: false,
        }
    }

    #[test]
    fn evicts_least_recently_used() {
        let mut c = StmtCache::new(2);
        assert_eq!(c.insert(key("a"), stmt(1)), None);
        assert_eq!(c.insert(key("b"), stmt(2)), None);
        assert!(c.get(&key("a")).is_some()); // a is now newer than b
        assert_eq!(c.insert(key("c"), stmt(3)), Some(2));
        assert_eq!(c.len(), 2);
        assert!(c.get(&key("b")).is_none());
        assert_eq!(c.remove(&key("a")), Some(1));
    }
}
