//! What a login was told (its ParameterStatus values), kept per pool, hostgroup and startup
//! settings, so that the next login alike is answered without a server connection, as
//! PgBouncer answers logins from the parameters its pool's first connection reported: a
//! login no longer waits for a free connection of a busy pool (nor fails after
//! `queue_timeout`), nor opens one. The first login of each kind takes a connection, which
//! proves that the database exists and the startup settings are accepted; a later change
//! of a value (a server upgraded, a default altered) reaches the client as ParameterStatus
//! at its first statement, as the connection serving it reports it. A server's refusal of
//! one of sluice's own logins (a database dropped, a role's password changed, a connection
//! limit) forgets every kind: the next login of each proves itself again.

use crate::backend::conn::StartupSettings;
use std::collections::{BTreeMap, HashMap};
use std::hash::BuildHasher;
use std::sync::{Arc, Mutex};

/// Kinds of login remembered at most (beyond them, all are forgotten and learnt again).
const MAX_WELCOMES: usize = 1024;

/// The parameters a login was told, by the kind of login.
#[derive(Default)]
pub struct Welcomes {
    told: Mutex<HashMap<u64, Arc<BTreeMap<String, String>>>>,
    hasher: foldhash::quality::RandomState,
}

impl Welcomes {
    /// The kind of a login: its pool (user and database), the hostgroup its listener serves
    /// logins from, and the settings its startup packet asked for.
    pub fn key(
        &self,
        pool: &sluice_core::PoolKey,
        hostgroup: &str,
        startup: &StartupSettings,
    ) -> u64 {
        self.hasher.hash_one((pool, hostgroup, startup))
    }

    /// What the last login of this kind was told, if one succeeded.
    pub fn get(&self, key: u64) -> Option<Arc<BTreeMap<String, String>>> {
        self.told.lock().ok()?.get(&key).cloned()
    }

    /// A login of this kind succeeded and was told `params`.
    pub fn put(&self, key: u64, params: Arc<BTreeMap<String, String>>) {
        let Ok(mut told) = self.told.lock() else {
            return;
        };
        if told.len() >= MAX_WELCOMES && !told.contains_key(&key) {
            told.clear();
        }
        told.insert(key, params);
    }

    /// A server refused a login of sluice's own: no kind is known good any more.
    pub fn forget(&self) {
        if let Ok(mut told) = self.told.lock() {
            told.clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logins_alike_share_what_they_were_told_and_the_kinds_are_bounded() {
        let w = Welcomes::default();
        let pool = |db: &str| sluice_core::PoolKey {
            user: "app".into(),
            database: Some(db.into()),
            variant: 0,
        };
        let utc: Box<StartupSettings> =
            vec![("TimeZone".into(), "SET TimeZone = 'UTC'".into())].into();
        let k = w.key(&pool("a"), "writer", &utc);
        assert_eq!(k, w.key(&pool("a"), "writer", &utc));
        for other in [
            w.key(&pool("b"), "writer", &utc),
            w.key(&pool("a"), "reader", &utc),
            w.key(&pool("a"), "writer", &[]),
        ] {
            assert_ne!(k, other);
        }
        assert!(w.get(k).is_none());
        let told = Arc::new(BTreeMap::from([(
            "server_version".to_string(),
            "15".to_string(),
        )]));
        w.put(k, told.clone());
        assert!(Arc::ptr_eq(&w.get(k).unwrap(), &told));
        for n in 0..MAX_WELCOMES as u64 * 2 {
            w.put(n, told.clone());
            assert!(w.told.lock().unwrap().len() <= MAX_WELCOMES);
        }
        w.forget();
        assert!(w.get(k).is_none());
    }
}
