//! Prepared statements across pooled connections. A client's statement is known by its text
//! and parameter types ([`StmtDef`]); on a server connection it is prepared lazily under a
//! name derived from them (`sluice_<hash>`), so every client that prepares the same text
//! shares it there. Each connection holds at most a bounded number; the least recently used
//! one is closed on the server to make room.

use std::collections::HashMap;
use std::sync::Arc;

/// A statement as a client prepared it (a Parse message's content), or a simple query's text.
#[derive(Debug)]
pub struct StmtDef {
    /// The SQL text (shared with the session's view in the registry while it runs).
    pub sql: std::sync::Arc<[u8]>,
    /// The parameter type section of the Parse message (count and OIDs), as sent.
    pub types: Vec<u8>,
    /// Hash of both: the name it has on servers (0 for a simple query, never prepared).
    pub hash: u64,
    /// Its name on server connections: `sluice_` and the hash in hex.
    name: [u8; SERVER_NAME_LEN],
    /// What the scanner found in its text (its digest's id among it; shared with the
    /// thread's table of classifications by shape, see [`crate::scan_cache`]).
    pub info: Arc<crate::classify::Scanned>,
}

/// `sluice_` and 16 hex digits.
const SERVER_NAME_LEN: usize = 23;

/// Hashes statement texts into their server names: fixed for the process (every session
/// must name a text alike), fast (a text is hashed at every Parse).
fn text_hash(sql: &[u8], types: &[u8]) -> u64 {
    use std::hash::{BuildHasher, Hasher};
    static SEED: std::sync::OnceLock<foldhash::quality::SeedableRandomState> =
        std::sync::OnceLock::new();
    let mut h = SEED
        .get_or_init(foldhash::quality::SeedableRandomState::random)
        .build_hasher();
    h.write(sql);
    h.write_u8(0xff);
    h.write(types);
    h.finish()
}

impl StmtDef {
    /// A definition from a Parse message's text and type section.
    pub fn new(sql: &[u8], types: &[u8]) -> StmtDef {
        let hash = text_hash(sql, types);
        let mut name = *b"sluice_0000000000000000";
        for (i, b) in name[7..].iter_mut().enumerate() {
            *b = b"0123456789abcdef"[(hash >> (60 - 4 * i) & 0xf) as usize];
        }
        StmtDef {
            sql: sql.into(),
            types: types.to_vec(),
            hash,
            name,
            info: crate::classify::classify(sql),
        }
    }

    /// A simple query's text: classified, never prepared (no server name).
    pub fn query(sql: &[u8]) -> StmtDef {
        StmtDef {
            sql: sql.into(),
            types: Vec::new(),
            hash: 0,
            name: [0; SERVER_NAME_LEN],
            info: crate::classify::classify(sql),
        }
    }

    /// Its name on server connections.
    pub fn server_name(&self) -> &[u8] {
        &self.name
    }

    /// The Parse message that prepares it on a server under [`StmtDef::server_name`].
    pub fn parse_message(&self, out: &mut Vec<u8>) {
        let name = self.server_name();
        let len = 4 + name.len() + 1 + self.sql.len() + 1 + self.types.len();
        out.push(b'P');
        out.extend_from_slice(&(len as u32).to_be_bytes());
        out.extend_from_slice(name);
        out.push(0);
        out.extend_from_slice(&self.sql);
        out.push(0);
        out.extend_from_slice(&self.types);
    }
}

/// The statements one server connection holds, least recently used first out.
#[derive(Debug)]
pub struct ServerStatements {
    limit: usize,
    tick: u64,
    /// By hash: the statement, when it was last used, and whether it is stale (the server
    /// refused to run it as prepared: it is closed and prepared again at its next use).
    held: HashMap<u64, (Arc<StmtDef>, u64, bool), foldhash::fast::RandomState>,
}

/// What making room for a statement requires.
#[derive(Debug)]
pub enum Ensure {
    /// Already there.
    Held,
    /// Must be prepared; `evict` names a statement to close first to stay in bounds.
    Prepare {
        /// The statement to close (under its server name) first, if the connection is full.
        evict: Option<Arc<StmtDef>>,
    },
}

impl ServerStatements {
    /// Holding at most `limit` statements (at least 1).
    pub fn new(limit: usize) -> ServerStatements {
        ServerStatements {
            limit: limit.max(1),
            tick: 0,
            held: HashMap::default(),
        }
    }

    /// Makes `def` count as held (the caller sends what [`Ensure`] says).
    pub fn ensure(&mut self, def: &Arc<StmtDef>) -> Ensure {
        self.tick += 1;
        if let Some((held, used, stale)) = self.held.get_mut(&def.hash) {
            if held.sql == def.sql && held.types == def.types && !*stale {
                *used = self.tick;
                return Ensure::Held;
            }
        }
        // A stale one, or a different text under the same hash (never seen in practice), is
        // replaced: the old one is closed first.
        let mut evict = self.held.remove(&def.hash).map(|(d, ..)| d);
        if evict.is_none() && self.held.len() >= self.limit {
            let oldest = self
                .held
                .iter()
                .min_by_key(|(_, (_, used, _))| *used)
                .map(|(h, _)| *h);
            if let Some(h) = oldest {
                evict = self.held.remove(&h).map(|(d, ..)| d);
            }
        }
        self.held.insert(def.hash, (def.clone(), self.tick, false));
        Ensure::Prepare { evict }
    }

    /// Forgets a statement whose Parse failed.
    pub fn forget(&mut self, hash: u64) {
        self.held.remove(&hash);
    }

    /// Holds again a statement whose Close the server skipped (it is still there).
    pub fn restore(&mut self, def: Arc<StmtDef>) {
        self.tick += 1;
        self.held.insert(def.hash, (def, self.tick, false));
    }

    /// The server refused to run a statement as it was prepared (0A000 `cached plan must not
    /// change result type`, after DDL or under another `search_path`): it is closed and
    /// prepared afresh where it is next used, so that the error is not every later
    /// session's.
    pub fn mark_stale(&mut self, hash: u64) {
        if let Some((.., stale)) = self.held.get_mut(&hash) {
            *stale = true;
        }
    }

    /// How many it holds.
    pub fn len(&self) -> usize {
        self.held.len()
    }

    /// True if it holds none.
    pub fn is_empty(&self) -> bool {
        self.held.is_empty()
    }

    /// Forgets everything (after `DISCARD ALL` or `DEALLOCATE ALL` ran on it).
    pub fn clear(&mut self) {
        self.held.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    fn def(sql: &str) -> Arc<StmtDef> {
        Arc::new(StmtDef::new(sql.as_bytes(), &[0, 0]))
    }

    #[test]
    fn statements_are_held_up_to_the_limit_and_the_least_recently_used_goes() {
        let mut s = ServerStatements::new(2);
        let (a, b, c) = (def("select 1"), def("select 2"), def("select 3"));
        assert!(matches!(s.ensure(&a), Ensure::Prepare { evict: None }));
        assert!(matches!(s.ensure(&b), Ensure::Prepare { evict: None }));
        assert!(matches!(s.ensure(&a), Ensure::Held));
        assert!(matches!(s.ensure(&c), Ensure::Prepare { evict: Some(e) } if Arc::ptr_eq(&e, &b)));
        assert_eq!(s.len(), 2);
        s.forget(c.hash);
        assert_eq!(s.len(), 1);
        // A stale one is closed and prepared again under its name, then held.
        s.mark_stale(a.hash);
        assert!(matches!(s.ensure(&a), Ensure::Prepare { evict: Some(e) } if Arc::ptr_eq(&e, &a)));
        assert!(matches!(s.ensure(&a), Ensure::Held));
        assert_eq!(s.len(), 1);
    }

    #[test]
    fn the_parse_message_names_the_statement_by_its_hash() {
        let d = def("select $1");
        let mut out = Vec::new();
        d.parse_message(&mut out);
        assert_eq!(out[0], b'P');
        let len = u32::from_be_bytes([out[1], out[2], out[3], out[4]]) as usize;
        assert_eq!(len + 1, out.len());
        assert!(out.windows(7).any(|w| w == b"sluice_"));
        assert_ne!(def("select 1").hash, def("select 2").hash);
        assert_eq!(def("select 1").hash, def("select 1").hash);
        let name = std::str::from_utf8(d.server_name()).unwrap();
        assert_eq!(name, format!("sluice_{:016x}", d.hash));
    }
}
