//! The copies of prepared statements one server connection holds ([`ServerStatements`]):
//! under which key (name) a client's statement is there, and which one to close to make
//! room. What a statement is, and how its keys are made, is `super::statements`.

use super::epochs::{self, bump_result_epoch};
use super::statements::{mix, Cached, StmtDef};
use std::collections::HashMap;
use std::sync::Arc;

/// The statements one server connection holds, least recently used first out.
#[derive(Debug)]
pub struct ServerStatements {
    limit: usize,
    tick: u64,
    /// The fingerprint of the connection's analysis settings now (see
    /// [`super::statements::analysis_fingerprint`]): part of the key of a statement whose own differs.
    settings: u64,
    /// By key: the statement, when it was last used, and whether it is stale (the server
    /// refused to run it as prepared: it is closed and prepared again at its next use).
    held: HashMap<u64, (Cached, u64, bool), foldhash::fast::RandomState>,
}

/// What making room for a statement requires.
#[derive(Debug)]
pub enum Ensure {
    /// Already there.
    Held,
    /// Must be prepared; `evict` names a statement to close first to stay in bounds.
    Prepare {
        /// The statement to close (its key, for its server name) first, if the connection
        /// is full.
        evict: Option<(u64, Cached)>,
    },
}

impl ServerStatements {
    /// Holding at most `limit` statements (at least 1).
    pub fn new(limit: usize) -> ServerStatements {
        ServerStatements {
            limit: limit.max(1),
            tick: 0,
            settings: 0,
            held: HashMap::default(),
        }
    }

    /// The connection's analysis settings changed (see [`super::statements::analysis_fingerprint`]).
    pub fn set_settings(&mut self, fingerprint: u64) {
        self.settings = fingerprint;
    }

    /// The key `def` has on this connection: its text, types and settings; and the
    /// connection's settings too when they are not the ones `def` was parsed under (such a
    /// copy is analysed under the connection's).
    pub fn key(&self, def: &StmtDef) -> u64 {
        self.keys(def).1
    }

    /// `def`'s key under the settings of its Parse, and its key here now ([`Self::key`]).
    fn keys(&self, def: &StmtDef) -> (u64, u64) {
        self.keys_of(def.server_hash(), def.settings)
    }

    fn keys_of(&self, hash: u64, settings: u64) -> (u64, u64) {
        let own = mix(hash, settings);
        match settings == self.settings {
            true => (own, own),
            false => (own, mix(own, self.settings ^ 0x5bd1_e995)),
        }
    }

    /// Every key a copy of `def` may have here, in the order they are tried (a key twice
    /// where the settings are the connection's): of its copy analysed for it alone first
    /// (where that analysis took place; its own, and at least as faithful as a shared one),
    /// then its shared ones ([`Self::keys`]). (No list is built: this runs at every Bind.)
    fn candidate_keys(&self, def: &StmtDef) -> [u64; 4] {
        let (own, key) = self.keys(def);
        match def.is_resolved() {
            true => {
                let (private, private_now) = self.keys_of(def.own_hash(), def.settings);
                [private, private_now, own, key]
            }
            false => [own, key, own, key],
        }
    }

    /// Makes `def` count as held under its key now (the caller sends what [`Ensure`] says
    /// under that key's name).
    pub fn ensure(&mut self, def: &Arc<StmtDef>) -> (u64, Ensure) {
        self.tick += 1;
        if let Some(k) = self.usable_key(def, Some(self.tick)) {
            return (k, Ensure::Held);
        }
        let key = self.key(def);
        // A stale one, or a different text under the same key (never seen in practice), is
        // replaced: the old one is closed first.
        let mut evict = self.held.remove(&key).map(|(d, ..)| (key, d));
        if evict.is_none() && self.held.len() >= self.limit {
            let oldest = self
                .held
                .iter()
                .min_by_key(|(_, (_, used, _))| *used)
                .map(|(k, _)| *k);
            if let Some(k) = oldest {
                evict = self.held.remove(&k).map(|(d, ..)| (k, d));
            }
        }
        self.held.insert(key, (Cached::of(def), self.tick, false));
        (key, Ensure::Prepare { evict })
    }

    /// Whether `def` is held here as [`ServerStatements::ensure`] would use it (nothing to
    /// prepare).
    pub fn holds(&mut self, def: &Arc<StmtDef>) -> bool {
        self.usable_key(def, None).is_some()
    }

    /// The key of the copy of `def` fit to use here: the one analysed under the settings of
    /// the client's Parse, if the connection has it, whatever its settings now (as
    /// PostgreSQL keeps a statement's analysis, or makes it again itself when `search_path`
    /// changed); else the one under its settings now. Marked used at `tick`, if given.
    fn usable_key(&mut self, def: &Arc<StmtDef>, tick: Option<u64>) -> Option<u64> {
        let tried = self.candidate_keys(def);
        for (i, &k) in tried.iter().enumerate() {
            if tried[..i].contains(&k) {
                continue;
            }
            if let Some((held, used, false)) = self.held.get_mut(&k) {
                if !held.outdated() && held.is(def) {
                    *used = tick.unwrap_or(*used);
                    return Some(k);
                }
            }
        }
        None
    }

    /// Forgets a statement (by key) whose Parse failed.
    pub fn forget(&mut self, key: u64) {
        self.held.remove(&key);
    }

    /// Holds again a statement whose Close the server skipped (it is still there).
    pub fn restore(&mut self, key: u64, def: Cached) {
        self.tick += 1;
        self.held.insert(key, (def, self.tick, false));
    }

    /// The server refused to run a statement as it was prepared (0A000 `cached plan must not
    /// change result type`, after DDL or under another `search_path`): it is closed and
    /// prepared afresh where it is next used, so that the error is not every later
    /// session's.
    pub fn mark_stale(&mut self, key: u64) {
        if let Some((.., stale)) = self.held.get_mut(&key) {
            *stale = true;
        }
    }

    /// Every copy of `def` here is stale: prepared again before its next use.
    pub fn mark_stale_copies(&mut self, def: &Arc<StmtDef>) {
        for key in self.candidate_keys(def) {
            self.mark_stale(key);
        }
    }

    /// The server refused to run a statement as prepared because its result changed (0A000
    /// `cached plan must not change result type`, from `RevalidateCachedQuery`): stale here
    /// (see [`ServerStatements::mark_stale`]), and, unless the change was known already, its
    /// text's result epoch (`backend::epochs`) moves on, so that every copy elsewhere is prepared again
    /// before its next use and every client that parsed the statement before gets the
    /// same error, as each would from PostgreSQL directly (a copy prepared again would
    /// give them rows of the new shape under the description they hold).
    pub fn result_changed(&mut self, key: u64, line: Option<&str>) {
        if let Some(line) = line.and_then(|l| l.parse().ok()) {
            epochs::note_line(line);
        }
        if let Some((held, _, stale)) = self.held.get_mut(&key) {
            *stale = true;
            if !held.outdated() {
                bump_result_epoch(held.epoch_key);
            }
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
