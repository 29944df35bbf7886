//! Client users and their credentials.

use sluice_config::UserConfig;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32};
use std::sync::Arc;

/// A configured user.
#[derive(Debug)]
pub struct User {
    /// Name.
    pub name: Arc<str>,
    /// Password (cleartext: the proxy logs in to servers with it).
    pub password: String,
    /// Per-user connection limit (0 = none).
    pub max_connections: u32,
    /// Current client connections.
    pub connections: AtomicU32,
    /// A `caching_sha2_password` full authentication succeeded since start: the fast path is
    /// allowed (MySQL's cache semantics).
    pub sha2_cached: AtomicBool,
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
                            connections: AtomicU32::new(0),
                            sha2_cached: AtomicBool::new(false),
                        }),
                    )
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
