//! Facts learned from the backend servers once: a version string to announce until the
//! primary's own is known, and the collation table (client collation ids to character-set
//! variables).

use arc_swap::ArcSwap;
use std::collections::HashMap;
use std::sync::Arc;

/// A collation: id, character set and name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Collation {
    /// Character set name.
    pub charset: String,
    /// Collation name.
    pub name: String,
}

/// What the proxy knows about the servers behind it.
#[derive(Clone, Debug)]
pub struct ServerFacts {
    /// Version string announced to clients until the primary's own is known: the configured
    /// one, or the one learned from the first server that answered.
    pub version: String,
    /// Collations by id.
    pub collations: HashMap<u16, Collation>,
    /// Server-wide defaults for character_set_client/connection/results and collation_connection,
    /// which a client gets when it asks for a collation the server does not know.
    pub default_charset_vars: [String; 4],
    /// True once read from a real server (otherwise built-in fallbacks).
    pub learned: bool,
}

impl ServerFacts {
    fn fallback(version: String) -> ServerFacts {
        let collations = [
            (8u16, "latin1", "latin1_swedish_ci"),
            (33, "utf8mb3", "utf8mb3_general_ci"),
            (45, "utf8mb4", "utf8mb4_general_ci"),
            (46, "utf8mb4", "utf8mb4_bin"),
            (47, "latin1", "latin1_bin"),
            (63, "binary", "binary"),
            (83, "utf8mb3", "utf8mb3_bin"),
            (224, "utf8mb4", "utf8mb4_unicode_ci"),
        ]
        .into_iter()
        .map(|(id, cs, name)| {
            (
                id,
                Collation {
                    charset: cs.into(),
                    name: name.into(),
                },
            )
        })
        .collect();
        ServerFacts {
            version,
            collations,
            default_charset_vars: [
                "utf8mb4".into(),
                "utf8mb4".into(),
                "utf8mb4".into(),
                "utf8mb4_general_ci".into(),
            ],
            learned: false,
        }
    }

    /// The four character-set variables a fresh direct connection with collation `id` has:
    /// character_set_client, character_set_connection, character_set_results,
    /// collation_connection.
    pub fn charset_vars(&self, id: u16) -> [String; 4] {
        match self.collations.get(&id) {
            Some(c) => [
                c.charset.clone(),
                c.charset.clone(),
                c.charset.clone(),
                c.name.clone(),
            ],
            None => self.default_charset_vars.clone(),
        }
    }
}

/// Shared, updatable server facts.
pub struct ServerInfo {
    facts: ArcSwap<ServerFacts>,
    version_override: Option<String>,
}

impl ServerInfo {
    /// The configured version string, if any (it wins over every server's).
    pub fn version_override(&self) -> Option<&str> {
        self.version_override.as_deref()
    }

    /// Starts with built-in fallbacks; `version_override` is the configured version string.
    pub fn new(version_override: Option<String>) -> ServerInfo {
        let version = version_override
            .clone()
            .unwrap_or_else(|| "5.5.5-10.11.0-MariaDB-sluice".into());
        ServerInfo {
            facts: ArcSwap::from_pointee(ServerFacts::fallback(version)),
            version_override,
        }
    }

    /// Current facts.
    pub fn get(&self) -> Arc<ServerFacts> {
        self.facts.load_full()
    }

    /// True once learned from a server.
    pub fn learned(&self) -> bool {
        self.facts.load().learned
    }

    /// Learns the facts from a logged-in backend connection.
    pub async fn learn(
        &self,
        conn: &mut crate::backend::BackendConn,
    ) -> Result<(), crate::backend::BackendError> {
        let rows = conn
            .query_rows(
                "SELECT ID, CHARACTER_SET_NAME, COLLATION_NAME FROM information_schema.COLLATIONS",
            )
            .await?;
        let mut collations = HashMap::new();
        for r in rows {
            if let (Some(Some(id)), Some(Some(cs)), Some(Some(name))) =
                (r.first(), r.get(1), r.get(2))
            {
                if let Ok(id) = id.parse::<u16>() {
                    collations.insert(
                        id,
                        Collation {
                            charset: cs.clone(),
                            name: name.clone(),
                        },
                    );
                }
            }
        }
        let defaults = conn
            .query_rows("SELECT @@global.character_set_client, @@global.character_set_connection, @@global.character_set_results, @@global.collation_connection")
            .await?;
        let d = defaults.into_iter().next().unwrap_or_default();
        let get = |i: usize| d.get(i).cloned().flatten().unwrap_or_default();
        let version = self
            .version_override
            .clone()
            .unwrap_or_else(|| conn.server_version.clone());
        self.facts.store(Arc::new(ServerFacts {
            version,
            collations,
            default_charset_vars: [get(0), get(1), get(2), get(3)],
            learned: true,
        }));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_collations_get_server_defaults() {
        let f = ServerFacts::fallback("x".into());
        assert_eq!(f.charset_vars(224)[3], "utf8mb4_unicode_ci");
        assert_eq!(f.charset_vars(255)[3], "utf8mb4_general_ci");
    }
}
