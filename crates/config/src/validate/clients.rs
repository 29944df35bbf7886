//! Validation of listeners and users.

use super::*;
use crate::{PasswordForm, PgAuthMethod, Protocol};

impl Config {
    /// The listeners; returns the addresses they take.
    pub(super) fn check_listeners(&self) -> Result<HashSet<String>> {
        let mut listens = HashSet::new();
        let mut protocols: Vec<Protocol> = Vec::new();
        if let Some(listen) = &self.proxy.listen {
            listens.insert(listen.clone());
            protocols.push(Protocol::Mysql);
        }
        for (i, l) in self.listeners.iter().enumerate() {
            let f = format!("listeners[{i}]");
            check_address(&format!("{f}.listen"), &l.listen)?;
            protocols.push(l.protocol);
            // Port 0 means "any free port", so it may repeat.
            if !l.listen.ends_with(":0") && !listens.insert(l.listen.clone()) {
                return Err(ConfigError::new(
                    format!("{f}.listen"),
                    format!("{} is already used by another listener", l.listen),
                ));
            }
            if let Some(hg) = &l.hostgroup {
                self.for_protocol(l.protocol)
                    .known_hostgroup(&format!("{f}.hostgroup"), hg)?;
            }
        }
        // Every protocol with servers is reachable, and every listener has servers.
        for (i, p) in protocols.iter().enumerate() {
            if !self.servers.iter().any(|s| s.protocol == *p) {
                let field = match (&self.proxy.listen, i) {
                    (Some(_), 0) => "proxy.listen".to_string(),
                    (Some(_), i) => format!("listeners[{}].protocol", i - 1),
                    (None, i) => format!("listeners[{i}].protocol"),
                };
                return Err(ConfigError::new(
                    field,
                    format!("no [[servers]] speak {p} (set protocol = \"{p}\" on its servers)"),
                ));
            }
        }
        for p in self.protocols() {
            if !protocols.contains(&p) {
                return Err(ConfigError::new(
                    "listeners",
                    format!("{p} servers are configured but no listener speaks {p} (add a [[listeners]] entry with protocol = \"{p}\")"),
                ));
            }
        }
        Ok(listens)
    }

    /// `[[users]]`.
    pub(super) fn check_users(&self) -> Result {
        let mut users = HashSet::new();
        for (i, u) in self.users.iter().enumerate() {
            let f = format!("users[{i}]");
            non_empty(&format!("{f}.name"), &u.name)?;
            if u.name.len() > 80 {
                return Err(ConfigError::new(
                    format!("{f}.name"),
                    "is longer than 80 characters",
                ));
            }
            if PasswordForm::of(&u.password) == PasswordForm::Md5Hash
                && u.auth_method == PgAuthMethod::ScramSha256
            {
                return Err(ConfigError::new(
                    format!("{f}.password"),
                    "is an MD5 hash (md5…), which SCRAM-SHA-256 cannot check: set auth_method = \"md5\" (or \"password\"), or give the password itself or its SCRAM secret",
                ));
            }
            if !users.insert(u.name.as_str()) {
                return Err(ConfigError::new(
                    format!("{f}.name"),
                    format!("user {:?} is defined twice", u.name),
                ));
            }
        }
        if self.users.is_empty() {
            return Err(ConfigError::new(
                "users",
                "at least one [[users]] entry is required",
            ));
        }
        Ok(())
    }
}
