//! `[postgres]`: what only PostgreSQL clients and servers have.

use serde::{Deserialize, Serialize};

/// PostgreSQL-only settings.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct PostgresConfig {
    /// Functions the scanner does not know (user functions, extensions) that only read: a
    /// query that calls them, and writes in no other way, may run on a replica. Names as
    /// PostgreSQL stores them (an unquoted name in a query is folded to lower case; a quoted
    /// one is taken as it is), matched without their schema.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub read_only_functions: Vec<String>,
    /// Bytes of prepared statements (their texts and parameter types, as the clients' Parse
    /// messages carry them) the whole process holds at once: the sessions' statements and
    /// the copies prepared on server connections. A Parse beyond it fails with 53200.
    #[serde(default = "default_max_statement_memory")]
    pub max_statement_memory: u64,
    /// Of those bytes, what one session's prepared statements may hold: a Parse beyond it
    /// fails with 53200 for that session, so that no one session can take the whole
    /// process's room.
    #[serde(default = "default_max_statement_memory_per_session")]
    pub max_statement_memory_per_session: u64,
}

fn default_max_statement_memory() -> u64 {
    1 << 30
}

fn default_max_statement_memory_per_session() -> u64 {
    16 << 20
}

impl Default for PostgresConfig {
    fn default() -> Self {
        PostgresConfig {
            read_only_functions: Vec::new(),
            max_statement_memory: default_max_statement_memory(),
            max_statement_memory_per_session: default_max_statement_memory_per_session(),
        }
    }
}

impl PostgresConfig {
    /// Nothing set.
    pub fn is_default(&self) -> bool {
        self == &PostgresConfig::default()
    }
}
