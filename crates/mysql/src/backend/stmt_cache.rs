//! Prepared statements held on one backend connection, keyed by (schema, SQL text), bounded
//! in number: the least recently used statement is closed when the cache is full. Every cache
//! also counts its statements in its server's [`StmtBudget`], which the session keeps below
//! the server's own `max_prepared_stmt_count` (ProxySQL's long-standing bug is to exhaust it).
//!
//! A cache keeps no statement's text: it knows a statement by two independent hashes of its
//! schema and text, seeded afresh by each process ([`StmtKey`]). The texts are held by the
//! sessions that prepared them, charged to `[mysql] max_statement_memory`; a statement every
//! session closed costs nothing where it stays prepared on a server (256 cached statements
//! of 64 MiB on each of hundreds of connections would be beyond any budget).

use std::collections::HashMap;
use std::hash::{BuildHasher, Hash};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, OnceLock};

/// Prepared statements the proxy keeps open on one server, against a budget set below the
/// server's own limit (MySQL's `max_prepared_stmt_count` counts every client together).
#[derive(Debug, Default)]
pub struct StmtBudget {
    held: AtomicU64,
    limit: AtomicU64,
}

impl StmtBudget {
    /// Statements held now.
    pub fn held(&self) -> u64 {
        self.held.load(Relaxed)
    }
    /// The budget (0: not known yet, no limit).
    pub fn limit(&self) -> u64 {
        self.limit.load(Relaxed)
    }
    /// Sets the budget.
    pub fn set_limit(&self, n: u64) {
        self.limit.store(n, Relaxed)
    }
    /// Counts statements opened (positive) or closed (negative).
    pub fn add(&self, n: i64) {
        if n >= 0 {
            self.held.fetch_add(n as u64, Relaxed);
        } else {
            let _ = self.held.fetch_update(Relaxed, Relaxed, |h| {
                Some(h.saturating_sub(n.unsigned_abs()))
            });
        }
    }
    /// True when at or over the budget.
    pub fn is_full(&self) -> bool {
        let limit = self.limit();
        limit > 0 && self.held() >= limit
    }
}

/// Identity of a prepared statement's text: the schema it was prepared in and the SQL.
/// Its hashes are computed once, so that looking it up in a connection's cache at every
/// execution does not rehash the text; its digest is computed at its first execution.
#[derive(Debug)]
pub struct StmtKey {
    /// Schema at prepare time (unqualified names resolve there).
    pub schema: Option<String>,
    /// Statement text.
    pub sql: Box<[u8]>,
    /// Two independent hashes of both, seeded per process: together, the statement's name in
    /// connections' caches (which keep no text).
    id: StmtId,
    /// Digest id and normalised text, with the escaping mode they were computed in.
    digest: OnceLock<StmtDigest>,
}

/// A prepared statement's digest.
#[derive(Debug)]
pub struct StmtDigest {
    /// Computed with `NO_BACKSLASH_ESCAPES` on.
    pub no_backslash_escapes: bool,
    /// The digest id.
    pub id: u64,
    /// The normalised text (at most `sluice_sqlscan::digest::MAX_TEXT` bytes).
    pub text: Box<[u8]>,
}

impl StmtKey {
    /// The key of `sql` prepared in `schema`.
    pub fn new(schema: Option<String>, sql: Box<[u8]>) -> StmtKey {
        let [a, b] = seeds();
        let id = StmtId(a.hash_one((&schema, &sql)), b.hash_one((&schema, &sql)));
        StmtKey {
            schema,
            sql,
            id,
            digest: OnceLock::new(),
        }
    }

    /// Its digest in escaping mode `no_backslash_escapes`: computed once (the mode rarely
    /// changes; when it does, computed again without being kept).
    pub fn digest<R>(&self, no_backslash_escapes: bool, use_it: impl FnOnce(u64, &[u8]) -> R) -> R {
        let compute = || {
            let mut text = Vec::new();
            let id =
                sluice_sqlscan::digest::normalize_into(&self.sql, no_backslash_escapes, &mut text);
            StmtDigest {
                no_backslash_escapes,
                id,
                text: text.into_boxed_slice(),
            }
        };
        let d = self.digest.get_or_init(compute);
        if d.no_backslash_escapes == no_backslash_escapes {
            use_it(d.id, &d.text)
        } else {
            let d = compute();
            use_it(d.id, &d.text)
        }
    }
}

/// A statement's name in connections' caches (see [`StmtKey`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct StmtId(u64, u64);

/// The process's two seeds for [`StmtId`]s: random, so that no client can choose texts
/// whose names collide.
fn seeds() -> &'static [std::hash::RandomState; 2] {
    static SEEDS: OnceLock<[std::hash::RandomState; 2]> = OnceLock::new();
    SEEDS.get_or_init(|| [std::hash::RandomState::new(), std::hash::RandomState::new()])
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
    map: HashMap<StmtId, Entry>,
    /// The server-wide count this cache contributes to.
    budget: Arc<StmtBudget>,
}

impl StmtCache {
    /// An empty cache holding at most `capacity` statements, counted in `budget`.
    pub fn new(capacity: usize, budget: Arc<StmtBudget>) -> StmtCache {
        StmtCache {
            capacity: capacity.max(1),
            tick: 0,
            map: HashMap::new(),
            budget,
        }
    }

    /// True when the server's budget is used up.
    pub fn server_full(&self) -> bool {
        self.budget.is_full()
    }

    /// Looks up a statement and marks it used.
    pub fn get(&mut self, key: &StmtKey) -> Option<&mut BackendStmt> {
        self.tick += 1;
        let tick = self.tick;
        self.map.get_mut(&key.id).map(|e| {
            e.last_used = tick;
            &mut e.stmt
        })
    }

    /// Adds a statement; returns the server id of the one evicted to make room (or replaced),
    /// which the caller must close with COM_STMT_CLOSE.
    pub fn insert(&mut self, key: &StmtKey, stmt: BackendStmt) -> Option<u32> {
        self.tick += 1;
        let mut evicted = None;
        if self.map.len() >= self.capacity && !self.map.contains_key(&key.id) {
            evicted = self.evict_oldest();
        }
        let entry = Entry {
            stmt,
            last_used: self.tick,
        };
        match self.map.insert(key.id, entry) {
            Some(old) => Some(old.stmt.id),
            None => {
                self.budget.add(1);
                evicted
            }
        }
    }

    /// Removes and returns the least recently used statement's id.
    pub fn evict_oldest(&mut self) -> Option<u32> {
        let oldest = self
            .map
            .iter()
            .min_by_key(|(_, e)| e.last_used)
            .map(|(k, _)| *k)?;
        self.forget(oldest)
    }

    /// Forgets a statement; returns its server id.
    pub fn remove(&mut self, key: &StmtKey) -> Option<u32> {
        self.forget(key.id)
    }

    fn forget(&mut self, id: StmtId) -> Option<u32> {
        let e = self.map.remove(&id)?;
        self.budget.add(-1);
        Some(e.stmt.id)
    }

    /// Forgets everything (after a connection reset, which closes all statements).
    pub fn clear(&mut self) {
        self.budget.add(-(self.map.len() as i64));
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

impl Drop for StmtCache {
    fn drop(&mut self) {
        // The connection is closing: the server frees its statements.
        self.budget.add(-(self.map.len() as i64));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(s: &str) -> StmtKey {
        StmtKey::new(None, s.as_bytes().into())
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
        let mut c = StmtCache::new(2, Arc::default());
        assert_eq!(c.insert(&key("a"), stmt(1)), None);
        assert_eq!(c.insert(&key("b"), stmt(2)), None);
        assert!(c.get(&key("a")).is_some()); // a is now newer than b
        assert_eq!(c.insert(&key("c"), stmt(3)), Some(2));
        assert_eq!(c.len(), 2);
        assert!(c.get(&key("b")).is_none());
        assert_eq!(c.remove(&key("a")), Some(1));
    }

    #[test]
    fn counts_against_the_server_budget() {
        let budget = Arc::new(StmtBudget::default());
        budget.set_limit(2);
        let mut a = StmtCache::new(10, budget.clone());
        let mut b = StmtCache::new(10, budget.clone());
        a.insert(&key("x"), stmt(1));
        assert!(!a.server_full());
        b.insert(&key("y"), stmt(2));
        assert!(a.server_full() && b.server_full());
        assert_eq!(
            b.insert(&key("y"), stmt(3)),
            Some(2),
            "replacing returns the old id"
        );
        assert_eq!(budget.held(), 2, "and does not count twice");
        drop(b);
        assert_eq!(budget.held(), 1);
        a.clear();
        assert_eq!(budget.held(), 0);
    }
}
