//! Client users and their credentials.

use crate::HashMap;
use sluice_config::UserConfig;
use std::sync::atomic::{AtomicU32, Ordering::Relaxed};
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
    /// Current client connections: shared with the user's earlier entries, which a reload
    /// that changed the user replaced (their sessions still count, and give back, here).
    pub connections: Arc<AtomicU32>,
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
    /// The user `u` configures, its sessions counted in `connections`.
    fn of(u: &UserConfig, connections: Arc<AtomicU32>) -> User {
        User {
            name: Arc::from(u.name.as_str()),
            password: u.password.clone(),
            max_connections: u.max_connections,
            require_tls: u.require_tls,
            auth_method: u.auth_method,
            read_your_writes: u.read_your_writes,
            connections,
        }
    }

    /// Whether `u` configures this user as it is.
    fn is(&self, u: &UserConfig) -> bool {
        self.password == u.password
            && self.max_connections == u.max_connections
            && self.require_tls == u.require_tls
            && self.auth_method == u.auth_method
            && self.read_your_writes == u.read_your_writes
    }

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
    /// Users a reload removed while sessions of theirs were open (counted in
    /// [`User::connections`], which every version of a user shares): no one logs in as them,
    /// but their sessions carry on, and log in to servers as the user was last configured.
    /// Forgotten at the first reload after their last session ended.
    retired: HashMap<String, Arc<User>>,
}

impl Users {
    /// Builds the table from the config.
    pub fn from_config(users: &[UserConfig]) -> Users {
        Users {
            map: users
                .iter()
                .map(|u| (u.name.clone(), Arc::new(User::of(u, Default::default()))))
                .collect(),
            retired: HashMap::default(),
        }
    }

    /// The table for a reloaded config: users that did not change are kept as they are; a
    /// changed one keeps counting its sessions where it counted them (its `max_connections`
    /// bounds the sessions already open too).
    pub fn reloaded(&self, users: &[UserConfig]) -> Users {
        let map: HashMap<String, Arc<User>> = users
            .iter()
            .map(|u| {
                let user = match self.map.get(&u.name) {
                    Some(old) if old.is(u) => old.clone(),
                    Some(old) => Arc::new(User::of(u, old.connections.clone())),
                    None => Arc::new(User::of(u, Default::default())),
                };
                (u.name.clone(), user)
            })
            .collect();
        let retired = self
            .map
            .iter()
            .chain(&self.retired)
            .filter(|(name, u)| !map.contains_key(*name) && u.connections.load(Relaxed) > 0)
            .map(|(name, u)| (name.clone(), u.clone()))
            .collect();
        Users { map, retired }
    }

    /// The user a session logged in as, to log it in to a server: a configured one, or one
    /// a reload removed while its sessions are still open.
    pub fn of_session(&self, name: &str) -> Option<Arc<User>> {
        self.map
            .get(name)
            .or_else(|| self.retired.get(name))
            .cloned()
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

#[cfg(test)]
mod tests {
    use super::*;

    fn config(name: &str, password: &str, max: u32) -> UserConfig {
        UserConfig {
            name: name.into(),
            password: password.into(),
            max_connections: max,
            require_tls: false,
            auth_method: Default::default(),
            read_your_writes: false,
        }
    }

    #[test]
    fn a_changed_user_keeps_counting_its_open_sessions() {
        let users = Users::from_config(&[config("a", "pw", 4)]);
        let a = users.get("a").unwrap().clone();
        let open: Vec<_> = (0..3).map(|_| UserConnection::new(&a).unwrap()).collect();
        // A new password and a lower limit: the three open sessions are over it.
        let reloaded = users.reloaded(&[config("a", "new", 2)]);
        let changed = reloaded.get("a").unwrap().clone();
        assert_eq!(changed.password, "new");
        assert!(UserConnection::new(&changed).is_none());
        drop(open);
        let one = UserConnection::new(&changed).unwrap();
        let two = UserConnection::new(&changed).unwrap();
        assert!(UserConnection::new(&changed).is_none());
        drop((one, two));
        // Unchanged: the very same entry.
        let again = reloaded.reloaded(&[config("a", "new", 2)]);
        assert!(Arc::ptr_eq(again.get("a").unwrap(), &changed));
    }

    #[test]
    fn a_removed_users_open_sessions_still_log_in_to_servers() {
        let users = Users::from_config(&[config("a", "pw", 0), config("b", "pw", 0)]);
        let session = UserConnection::new(users.get("a").unwrap()).unwrap();
        // Changed, then removed: its session (of the first version) still counts.
        let changed = users.reloaded(&[config("a", "pw2", 0), config("b", "pw", 0)]);
        let removed = changed.reloaded(&[config("b", "pw", 0)]);
        assert!(removed.get("a").is_none(), "no one logs in as it");
        assert_eq!(removed.of_session("a").unwrap().password, "pw2");
        // Kept across reloads while its session is open, then forgotten.
        let later = removed.reloaded(&[config("b", "pw", 0)]);
        assert!(later.of_session("a").is_some());
        drop(session);
        assert!(later.reloaded(&[config("b", "pw", 0)]).retired.is_empty());
        // Added back: the configured one.
        let back = later.reloaded(&[config("a", "new", 0), config("b", "pw", 0)]);
        assert_eq!(back.of_session("a").unwrap().password, "new");
        assert!(back.retired.is_empty());
    }
}
