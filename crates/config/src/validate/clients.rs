//! Validation of listeners and users.

use super::*;

impl Config {
    /// The listeners; returns the addresses they take.
    pub(super) fn check_listeners(&self) -> Result<HashSet<String>> {
        let mut listens = HashSet::new();
        listens.insert(self.proxy.listen.clone());
        for (i, l) in self.listeners.iter().enumerate() {
            let f = format!("listeners[{i}]");
            check_address(&format!("{f}.listen"), &l.listen)?;
            // Port 0 means "any free port", so it may repeat.
            if !l.listen.ends_with(":0") && !listens.insert(l.listen.clone()) {
                return Err(ConfigError::new(
                    format!("{f}.listen"),
                    format!("{} is already used by another listener", l.listen),
                ));
            }
            if let Some(hg) = &l.hostgroup {
                self.known_hostgroup(&format!("{f}.hostgroup"), hg)?;
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
