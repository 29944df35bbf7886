//! Prepared statements across pooled connections. A client's statement is known by its text,
//! its parameter types and the settings its analysis read when the client parsed it
//! ([`StmtDef`]); on a server connection it is prepared lazily under a name derived from them
//! (`sluice_<hash>`), so every client that prepares the same text under the same settings
//! shares it there, and a client with another `search_path`, `TimeZone` or `DateStyle` never
//! uses a copy analysed under someone else's (its tables, its parameter types, its literals'
//! values). A copy prepared where the settings are no longer the ones of the client's Parse
//! (the session changed them since) is keyed by both, for no one with other settings. Each
//! connection holds at most a bounded number; the least recently used one is closed on the
//! server to make room.
//!
//! The parameter types a statement's analysis infers (those its Parse leaves unspecified)
//! depend on the tables when it is analysed. So a client's statement is first prepared
//! under a name of its own, never shared, and analysed afresh, as a direct client's Parse
//! is; sluice describes it there to learn the types that analysis fixed
//! ([`StmtDef::resolve`]). From then on it is shared with the copies of the same text
//! prepared with those very types, given explicitly: a copy prepared before a column's type
//! changed has the old types, as the client that parsed it then keeps them directly
//! (PostgreSQL analyses a prepared statement again with its parameter types fixed), and a
//! client that parses after the change gets the new ones.

use super::epochs::result_epoch;
pub use super::server_statements::{Ensure, ServerStatements};
use std::collections::BTreeMap;
use std::sync::{Arc, Weak};

/// A statement as a client prepared it (a Parse message's content), or a simple query's text.
#[derive(Debug)]
pub struct StmtDef {
    /// The SQL text (shared with the session's view in the registry while it runs); of a
    /// simple query, its first [`QUERY_TEXT_KEPT`] bytes.
    pub sql: std::sync::Arc<[u8]>,
    /// Of a simple query longer than [`QUERY_TEXT_KEPT`]: its digest's text, made from the
    /// whole text (what a new digest shows; the start alone may end inside a literal).
    pub digest_text: Option<Box<[u8]>>,
    /// The parameter type section of the Parse message (count and OIDs), as sent.
    pub types: Vec<u8>,
    /// Hash of both (0 for a simple query, never prepared).
    pub hash: u64,
    /// The fingerprint of the analysis settings in force for the session when the client
    /// parsed it ([`analysis_fingerprint`]; a value of its own when they were changing then,
    /// inside a transaction block or earlier in the same batch).
    pub settings: u64,
    /// What the scanner found in its text (its digest's id among it; shared with the
    /// thread's table of classifications by shape, see [`crate::scan_cache`]).
    pub info: Arc<crate::classify::Scanned>,
    /// The result epoch (`backend::epochs`) of its text when the client parsed it: once a copy anywhere
    /// showed that the text's result changed since (0A000 `cached plan must not change
    /// result type`), the client's statement is refused as PostgreSQL refuses a prepared
    /// statement whose result changed, until the client parses it again — or until sluice,
    /// preparing it afresh, finds its result what the client was told again (the DDL rolled
    /// back or undone: PostgreSQL checks a prepared statement's result at every use).
    epoch: std::sync::atomic::AtomicU32,
    /// Where its result epoch (`backend::epochs`) is kept: its text, types and settings, and the pool (user
    /// and database) its client parsed it in — DDL in one database changes nothing in
    /// another.
    epoch_key: u64,
    /// A Parse's charge for its text and types against `[postgres] max_statement_memory`,
    /// held as long as anyone holds the statement (its session, a server connection's
    /// copy); `Ok(None)` for a simple query's text, which lives only while it runs; or why
    /// the budget refused it (the Parse then fails, and the statement is never held).
    pub charge: Result<Option<sluice_core::Charge>, sluice_core::OverBudget>,
    /// The shape of the result the client was given when it first described the statement
    /// ([`result_shape`]; 0: it never did, and holds no description to go wrong).
    described: std::sync::atomic::AtomicU64,
    /// Its own number: its copy on the server connection where it is first analysed is
    /// prepared under a name of its own ([`StmtDef::server_hash`]).
    nonce: u64,
    /// The parameter types its first analysis on a server fixed ([`StmtDef::resolve`]).
    resolved: std::sync::OnceLock<Resolved>,
}

/// The parameter types a statement's analysis fixed, as a Parse message's type section
/// (count and OIDs), and the hash its shared copies are named by.
#[derive(Debug)]
struct Resolved {
    types: Box<[u8]>,
    hash: u64,
    /// Their bytes, charged as the statement's own.
    _charge: sluice_core::Charge,
}

/// A number no other statement has (see [`StmtDef::nonce`]).
fn next_nonce() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// A pool's part in its statements' epoch key: its user and database.
pub fn pool_scope(key: &sluice_core::PoolKey) -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = seed().build_hasher();
    h.write(key.user.as_bytes());
    h.write_u8(0xff);
    h.write(key.database.as_deref().unwrap_or_default().as_bytes());
    h.finish()
}

/// `sluice_` and 16 hex digits.
const SERVER_NAME_LEN: usize = 23;

/// Hashes statement texts into their server names: fixed for the process (every session
/// must name a text alike), fast (a text is hashed at every Parse).
fn text_hash(sql: &[u8], types: &[u8]) -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = seed().build_hasher();
    h.write(sql);
    h.write_u8(0xff);
    h.write(types);
    h.finish()
}

/// The key a server name made by [`server_name`] stands for.
pub fn key_of_name(name: &[u8]) -> Option<u64> {
    let hex = name.strip_prefix(b"sluice_")?;
    if hex.len() != 16 {
        return None;
    }
    u64::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()
}

/// A second hash of a statement's text and types, independent of [`text_hash`]: how a server
/// connection recognises a statement it holds once no session holds its text.
fn check_hash(sql: &[u8], types: &[u8]) -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = seed().build_hasher();
    h.write_u8(0xa5);
    h.write(types);
    h.write_u8(0xff);
    h.write(sql);
    h.finish()
}

/// A statement a server connection holds. It does not keep the statement's text alive (the
/// sessions that prepared it do, charged to `[postgres] max_statement_memory`): once none
/// does, the statement is recognised by its key and a second hash of its text.
#[derive(Clone, Debug)]
pub struct Cached {
    def: Weak<StmtDef>,
    check: u64,
    /// Where the statement's result epoch is kept (epoch key).
    pub(super) epoch_key: u64,
    /// The result epoch (`backend::epochs`) when it was prepared there: a copy prepared before a change of
    /// its text's result came to light is prepared again before it is used.
    epoch: u32,
}

impl Cached {
    /// `def` as a connection holds it, prepared now.
    pub fn of(def: &Arc<StmtDef>) -> Cached {
        Cached {
            def: Arc::downgrade(def),
            check: check_hash(&def.sql, def.prepared_types()),
            epoch_key: def.epoch_key,
            epoch: result_epoch(def.epoch_key),
        }
    }

    /// Prepared before a change of its text's result came to light.
    pub(super) fn outdated(&self) -> bool {
        self.epoch != result_epoch(self.epoch_key)
    }

    /// Whether it is `def`'s text and types. Once the session that prepared it is gone, the
    /// first `def` recognised by its hash stands for it (the next ones are recognised by
    /// their pointer, not hashed again).
    pub(super) fn is(&mut self, def: &Arc<StmtDef>) -> bool {
        if std::ptr::eq(self.def.as_ptr(), Arc::as_ptr(def)) {
            return true;
        }
        match self.def.upgrade() {
            Some(held) => held.sql == def.sql && held.prepared_types() == def.prepared_types(),
            None if self.check == check_hash(&def.sql, def.prepared_types()) => {
                self.def = Arc::downgrade(def);
                true
            }
            None => false,
        }
    }
}

/// A fingerprint no settings have: for statements parsed while the settings were changing.
pub fn unsettled_fingerprint() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    mix(0x243f_6a88_85a3_08d3, n)
}

/// `a` with `b` folded in (`a` itself for `b` = 0).
pub(super) fn mix(a: u64, b: u64) -> u64 {
    match b {
        0 => a,
        b => a ^ b.rotate_left(29).wrapping_mul(0x9e37_79b9_7f4a_7c15),
    }
}

/// The process's hashing seed for statement names.
fn seed() -> &'static foldhash::quality::SeedableRandomState {
    static SEED: std::sync::OnceLock<foldhash::quality::SeedableRandomState> =
        std::sync::OnceLock::new();
    SEED.get_or_init(foldhash::quality::SeedableRandomState::random)
}

/// How much of a simple query's text its record ([`StmtDef::query`]) keeps. Nothing that
/// reads the record needs the whole text: the scanner reads the client's message, and so
/// does routing (hints and `[[rules]]`); the statement shown in flight shows only its start;
/// the text of a new digest is made from the whole text as the record is (a longer text
/// only). A whole copy of a message of tens of MiB, held while it runs, would be charged
/// nowhere: the message itself is charged to `[proxy] max_request_memory`, and is held once.
pub const QUERY_TEXT_KEPT: usize = 64 * 1024;

/// The normalised text of `sql`'s digest.
fn digest_text_of(sql: &[u8]) -> Vec<u8> {
    let mut text = Vec::new();
    sluice_sqlscan::postgres::digest_text(sql, &mut text);
    text
}

impl StmtDef {
    /// A definition from a Parse message's text and type section.
    pub fn new(sql: &[u8], types: &[u8]) -> StmtDef {
        let hash = text_hash(sql, types);
        StmtDef {
            sql: sql.into(),
            digest_text: None,
            types: types.to_vec(),
            hash,
            settings: 0,
            epoch: result_epoch(hash).into(),
            epoch_key: hash,
            info: crate::classify::classify(sql),
            charge: Ok(None),
            described: Default::default(),
            nonce: next_nonce(),
            resolved: Default::default(),
        }
    }

    /// As [`StmtDef::new`], its bytes charged to `budget`.
    /// `scope`: the client's pool ([`pool_scope`]).
    pub fn charged(
        sql: &[u8],
        types: &[u8],
        settings: u64,
        scope: u64,
        budget: &Arc<sluice_core::MemoryBudget>,
    ) -> StmtDef {
        StmtDef::new(sql, types).charged_to(settings, scope, budget)
    }

    /// A definition [`StmtDef::new`] made, as [`StmtDef::charged`] makes it.
    pub fn charged_to(
        self,
        settings: u64,
        scope: u64,
        budget: &Arc<sluice_core::MemoryBudget>,
    ) -> StmtDef {
        let mut charge = budget.charge();
        let mut def = StmtDef {
            settings,
            charge: charge
                .grow(self.sql.len() + self.types.len())
                .map(|()| Some(charge)),
            ..self
        };
        // Its key depends on the settings: so does its epoch's bucket; and on the pool.
        def.epoch_key = mix(mix(def.hash, settings), scope);
        def.epoch = result_epoch(def.epoch_key).into();
        def
    }

    /// A simple query's text: classified, never prepared (no server name); of a text longer
    /// than [`QUERY_TEXT_KEPT`], only that much is kept (see there).
    // (Always inlined: on the path of every simple query, where it was before a second
    // caller, `long_texts`, came; called, it costs about 60 instructions more per query.)
    #[inline(always)]
    pub fn query(sql: &[u8]) -> StmtDef {
        let digest_text = (sql.len() > QUERY_TEXT_KEPT).then(|| digest_text_of(sql).into());
        StmtDef {
            sql: sql[..sql.len().min(QUERY_TEXT_KEPT)].into(),
            digest_text,
            types: Vec::new(),
            hash: 0,
            settings: 0,
            epoch: 0.into(),
            epoch_key: 0,
            info: crate::classify::classify(sql),
            charge: Ok(None),
            described: Default::default(),
            nonce: 0,
            resolved: Default::default(),
        }
    }

    /// The text its digest shows: the one kept for a long simple query, else made from `sql`.
    pub fn digest_text(&self) -> Vec<u8> {
        match &self.digest_text {
            Some(text) => text.to_vec(),
            None => digest_text_of(&self.sql),
        }
    }

    /// The shape of the result its client was given ([`result_shape`]; 0: never described).
    pub fn described(&self) -> u64 {
        self.described.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The client was given a description of its result of this shape: the first one
    /// stays (PostgreSQL keeps a prepared statement's result as its Parse found it).
    pub fn note_described(&self, shape: u64) {
        let _ = self.described.compare_exchange(
            0,
            shape,
            std::sync::atomic::Ordering::Relaxed,
            std::sync::atomic::Ordering::Relaxed,
        );
    }

    /// A copy of its text showed a changed result since the client parsed it (see
    /// [`StmtDef::epoch`]).
    pub fn result_changed(&self) -> bool {
        self.hash != 0
            && self.epoch.load(std::sync::atomic::Ordering::Relaxed) != result_epoch(self.epoch_key)
    }

    /// Its result was found to be what its client was told (see [`StmtDef::epoch`]): no
    /// longer refused, until a copy shows a change again.
    pub fn result_confirmed(&self) {
        self.epoch.store(
            result_epoch(self.epoch_key),
            std::sync::atomic::Ordering::Relaxed,
        );
    }

    /// The Parse message that prepares it on a server under the name `key` gives: with the
    /// parameter types its first analysis fixed, once known.
    pub fn parse_message(&self, key: u64, out: &mut Vec<u8>) {
        let name = server_name(key);
        let types = self.prepared_types();
        let len = 4 + name.len() + 1 + self.sql.len() + 1 + types.len();
        out.push(b'P');
        out.extend_from_slice(&(len as u32).to_be_bytes());
        out.extend_from_slice(&name);
        out.push(0);
        out.extend_from_slice(&self.sql);
        out.push(0);
        out.extend_from_slice(types);
    }

    /// Its first analysis on a server fixed these parameter types (a ParameterDescription's
    /// body: count and OIDs, as a Parse's type section). Kept once, charged as the
    /// statement's text is; where the budget cannot hold them the statement stays
    /// unresolved: each connection then analyses it afresh under a name of its own (never
    /// shared).
    pub fn resolve(&self, types: &[u8]) {
        let Ok(Some(charge)) = &self.charge else {
            return;
        };
        if self.resolved.get().is_some() || types.len() < 2 {
            return;
        }
        let mut charge = charge.sibling();
        if charge.grow(types.len()).is_err() {
            return;
        }
        let _ = self.resolved.set(Resolved {
            types: types.into(),
            hash: text_hash(&self.sql, types),
            _charge: charge,
        });
    }

    /// Whether its first analysis fixed its parameter types yet ([`StmtDef::resolve`]).
    pub fn is_resolved(&self) -> bool {
        self.resolved.get().is_some()
    }

    /// The type section its copies are prepared with: the types its first analysis fixed,
    /// else the client's.
    pub fn prepared_types(&self) -> &[u8] {
        match self.resolved.get() {
            Some(r) => &r.types,
            None => &self.types,
        }
    }

    /// What names its copies (with the settings, see [`ServerStatements::key`]): its text
    /// and the types its analysis fixed, shared with every statement alike; before that
    /// analysis, a name of its own ([`StmtDef::own_hash`]).
    pub(super) fn server_hash(&self) -> u64 {
        match self.resolved.get() {
            Some(r) => r.hash,
            None => self.own_hash(),
        }
    }

    /// The name of its copy analysed afresh for it alone.
    pub(super) fn own_hash(&self) -> u64 {
        mix(self.hash ^ 0x6a09_e667_f3bc_c908, self.nonce)
    }
}

/// The shape of a statement's result as a RowDescription (`tag` `T`) or NoData (`n`) body
/// describes it: each column's name, type, length and type modifier, which PostgreSQL
/// compares when it checks that a prepared statement's result did not change (not the
/// table and column it comes from: a table dropped and created again alike changes
/// nothing). Never 0.
pub fn result_shape(tag: u8, body: &[u8]) -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = seed().build_hasher();
    h.write_u8(tag);
    let mut rest = body.get(2..).unwrap_or_default();
    h.write(body.get(..2).unwrap_or_default());
    while let Some(n) = rest.iter().position(|&b| b == 0) {
        // Name, then table (4), column (2), type (4), length (2), modifier (4), format (2).
        let (name, after) = rest.split_at(n + 1);
        let Some(fixed) = after.get(..18) else { break };
        h.write(name);
        h.write(&fixed[6..16]);
        rest = &after[18..];
    }
    h.finish().max(1)
}

/// The error for a Parse whose text `[postgres] max_statement_memory` (or its session's share
/// of it) cannot hold now.
pub fn over_budget(over: &sluice_core::OverBudget) -> (&'static str, String) {
    (
        "53200",
        sluice_core::StatementMemory::refusal("[postgres]", over),
    )
}

/// A statement's name on server connections, from its key there ([`ServerStatements::ensure`]):
/// `sluice_` and the key in hex.
pub fn server_name(key: u64) -> [u8; SERVER_NAME_LEN] {
    let mut name = *b"sluice_0000000000000000";
    for (i, b) in name[7..].iter_mut().enumerate() {
        *b = b"0123456789abcdef"[(key >> (60 - 4 * i) & 0xf) as usize];
    }
    name
}

/// The settings a statement's analysis reads (names as sessions track them, lower case;
/// sorted): which tables and functions its names resolve to and its parameters' inferred
/// types (`search_path`, and the role its `$user` names), how its literals convert
/// (`TimeZone`, `timezone_abbreviations`, `DateStyle`, `IntervalStyle`, `lc_monetary`,
/// `xmloption`, `array_nulls`, the client's encoding) and how its text reads
/// (`standard_conforming_strings`, `backslash_quote`, `transform_null_equals`).
const ANALYSIS_SETTINGS: [&str; 14] = [
    "array_nulls",
    "backslash_quote",
    "client_encoding",
    "datestyle",
    "intervalstyle",
    "lc_monetary",
    "role",
    "search_path",
    "session_authorization",
    "standard_conforming_strings",
    "timezone",
    "timezone_abbreviations",
    "transform_null_equals",
    "xmloption",
];

/// A fingerprint of the analysis settings among `applied` (a session's settings beyond the
/// startup of the pool's connections, or a connection's, which its sessions' replays made):
/// 0 when it has none of them.
pub fn analysis_fingerprint(applied: &BTreeMap<String, String>) -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h: Option<foldhash::quality::FoldHasher<'_>> = None;
    for (name, stmt) in applied {
        if ANALYSIS_SETTINGS.binary_search(&name.as_str()).is_ok() {
            let h = h.get_or_insert_with(|| seed().build_hasher());
            h.write(name.as_bytes());
            h.write_u8(0xff);
            h.write(stmt.as_bytes());
            h.write_u8(0xff);
        }
    }
    h.map_or(0, |h| h.finish())
}

#[cfg(test)]
#[path = "statements_tests.rs"]
mod tests;
