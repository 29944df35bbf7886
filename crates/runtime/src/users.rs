//! Client users and their credentials.

use crate::HashMap;
use sluice_config::UserConfig;
use std::sync::atomic::AtomicU32;
use std::sync::Arc;

/// A configured user. Its `Debug` form never shows the password (it may end up in logs).
pub struct User {
    /// Name.
    pub name: Arc<str>,
    /// Password (cleartext: the proxy logs in to servers with it).
    pub password: String,
    /// Per-user connection limit (0 = none).
    pub max_connections: u32,
    /// Connections must use TLS.
    pub require_tls: bool,
    /// How PostgreSQL clients prove the password.
    pub auth_method: sluice_config::PgAuthMethod,
    /// Sessions start reading their own writes.
    pub read_your_writes: bool,
    /// Current client connections.
    pub connections: AtomicU32,
}

impl std::fmt::Debug for User {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("User")
            .field("name", &self.name)
            .field("password", &"<redacted>")
            .field("max_connections", &self.max_connections)
            .finish_non_exhaustive()
    }
}

impl User {
    /// Counts a client connection of this user, unless it is at its `max_connections` (then
    /// nothing is counted, and false).
    pub fn add_connection(&self) -> bool {
        use std::sync::atomic::Ordering::Relaxed;
        let n = self.connections.fetch_add(1, Relaxed) + 1;
        if self.max_connections > 0 && n > self.max_connections {
            self.connections.fetch_sub(1, Relaxed);
            return false;
        }
        true
    }
}

/// A client connection counted against its user's `max_connections`, given back when
/// dropped.
pub struct UserConnection(Arc<User>);

impl UserConnection {
    /// Counts one for `user` (see [`User::add_connection`]).
    pub fn new(user: &Arc<User>) -> Option<UserConnection> {
        user.add_connection().then(|| UserConnection(user.clone()))
    }
}

impl Drop for UserConnection {
    fn drop(&mut self) {
        self.0
            .connections
            .fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// All users, by name.
#[derive(Debug, Default)]
pub struct Users {
    map: HashMap<String, Arc<User>>,
}

impl Users {
    /// Builds the table from the config.
    pub fn from_config(users: &[UserConfig]) -> Users {
        Users {
            map: users
                .iter()
                .map(|u| {
                    (
                        u.name.clone(),
                        Arc::new(User {
                            name: Arc::from(u.name.as_str()),
                            password: u.password.clone(),
                            max_connections: u.max_connections,
                            require_tls: u.require_tls,
                            auth_method: u.auth_method,
                            read_your_writes: u.read_your_writes,
                            connections: AtomicU32::new(0),
                        }),
                    )
                })
                .collect(),
        }
    }

    /// The table for a reloaded config: users whose password and limit did not change are
    /// kept as they are (their connection counts with them).
    pub fn reloaded(&self, users: &[UserConfig]) -> Users {
        let fresh = Users::from_config(users);
        Users {
            map: fresh
                .map
                .into_iter()
                .map(|(name, new)| match self.map.get(&name) {
                    Some(old)
                        if old.password == new.password
                            && old.max_connections == new.max_connections
                            && old.require_tls == new.require_tls
                            && old.auth_method == new.auth_method
                            && old.read_your_writes == new.read_your_writes =>
                    {
                        (name, old.clone())
                    }
                    _ => (name, new),
                })
                .collect(),
        }
    }

    /// Looks a user up.
    pub fn get(&self, name: &str) -> Option<&Arc<User>> {
        self.map.get(name)
    }

    /// Every user.
    pub fn all(&self) -> impl Iterator<Item = &Arc<User>> {
        self.map.values()
    }
}
