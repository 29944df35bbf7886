//! `[postgres]`: what only PostgreSQL clients and servers have.

use serde::{Deserialize, Serialize};

/// PostgreSQL-only settings.
#[derive(Clone, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct PostgresConfig {
    /// Functions the scanner does not know (user functions, extensions) that only read: a
    /// query that calls them, and writes in no other way, may run on a replica. Names as
    /// PostgreSQL stores them (an unquoted name in a query is folded to lower case; a quoted
    /// one is taken as it is), matched without their schema.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub read_only_functions: Vec<String>,
}

impl PostgresConfig {
    /// Nothing set.
    pub fn is_default(&self) -> bool {
        self == &PostgresConfig::default()
    }
}
