//! Schemas recently seen to exist for a user. A client that connects with a schema normally
//! costs a round trip to a backend (COM_INIT_DB) to check that the schema exists and that the
//! user may use it, so that a bad one is refused at login as a server would refuse it. For a
//! (user, schema) pair that passed that check within the last [`TTL`], the check is skipped:
//! connect-per-query clients then cost the servers nothing at login.
//!
//! A schema dropped (or a grant revoked) within the TTL is not noticed at login: the client's
//! first statement fails instead, when the backend connection is switched to that schema. A
//! reload of the users empties the cache.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// How long a successful check is trusted.
pub const TTL: Duration = Duration::from_secs(10);
/// Entries kept at most; the map is emptied when full (checks simply happen again).
pub const CAPACITY: usize = 4096;

/// The cache.
#[derive(Default)]
pub struct KnownSchemas {
    /// user → schema → when it was last checked.
    map: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    users: HashMap<String, HashMap<String, Instant>>,
    len: usize,
}

impl KnownSchemas {
    /// True if `user` used `schema` successfully within the TTL.
    pub fn contains(&self, user: &str, schema: &str) -> bool {
        let map = self.map.lock();
        map.users
            .get(user)
            .and_then(|s| s.get(schema))
            .is_some_and(|t| t.elapsed() < TTL)
    }

    /// Records a successful check.
    pub fn insert(&self, user: &str, schema: &str) {
        let mut map = self.map.lock();
        if map.len >= CAPACITY {
            *map = Inner::default();
        }
        let schemas = map.users.entry(user.to_string()).or_default();
        let fresh = schemas.insert(schema.to_string(), Instant::now()).is_none();
        if fresh {
            map.len += 1;
        }
    }

    /// Forgets everything (users or grants may have changed).
    pub fn clear(&self) {
        *self.map.lock() = Inner::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remembers_per_user_until_cleared() {
        let k = KnownSchemas::default();
        assert!(!k.contains("app", "shop"));
        k.insert("app", "shop");
        assert!(k.contains("app", "shop"));
        assert!(!k.contains("other", "shop"));
        k.clear();
        assert!(!k.contains("app", "shop"));
    }

    #[test]
    fn bounded() {
        let k = KnownSchemas::default();
        for i in 0..CAPACITY + 10 {
            k.insert("u", &format!("s{i}"));
        }
        assert!(k.map.lock().len <= CAPACITY);
    }
}
