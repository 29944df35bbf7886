//! Validation of servers, hostgroups and rules.

use super::*;

impl Config {
    /// `[[servers]]`.
    pub(super) fn check_servers(&self) -> Result {
        if self.servers.is_empty() {
            return Err(ConfigError::new(
                "servers",
                "at least one [[servers]] entry is required",
            ));
        }
        let mut servers = HashSet::new();
        for (i, s) in self.servers.iter().enumerate() {
            let f = format!("servers[{i}]");
            check_address(&format!("{f}.address"), &s.address)?;
            let hg = s.hostgroup.as_deref().unwrap_or("(monitor-assigned)");
            if s.hostgroup.is_none() && !self.monitor.enabled {
                return Err(ConfigError::new(
                    format!("{f}.hostgroup"),
                    "is required when [monitor] is disabled (without it, roles come from the monitor)",
                ));
            }
            non_empty(&format!("{f}.hostgroup"), hg)?;
            if !servers.insert((s.protocol, s.address.as_str(), hg)) {
                return Err(ConfigError::new(
                    format!("{f}.address"),
                    format!("{} is listed twice in hostgroup {hg:?}", s.address),
                ));
            }
            if s.weight > 1_000_000 {
                return Err(ConfigError::new(
                    format!("{f}.weight"),
                    "must be at most 1000000",
                ));
            }
            if s.max_connections == Some(0) {
                return Err(ConfigError::new(
                    format!("{f}.max_connections"),
                    "must be at least 1",
                ));
            }
        }
        for p in self.protocols() {
            let of = || self.servers.iter().filter(move |s| s.protocol == p);
            let any_managed = of().any(|s| s.hostgroup.is_none());
            let any_writer =
                of().any(|s| s.hostgroup.as_deref() == Some(&self.proxy.writer_hostgroup));
            if !any_managed && !any_writer {
                return Err(ConfigError::new(
                    "servers",
                    format!(
                        "no {p} server is in the writer hostgroup {:?}",
                        self.proxy.writer_hostgroup
                    ),
                ));
            }
        }
        Ok(())
    }

    /// `[[hostgroups]]` and `[[rules]]`.
    pub(super) fn check_hostgroups_and_rules(&self) -> Result {
        let mut hg_names = HashSet::new();
        for (i, h) in self.hostgroups.iter().enumerate() {
            non_empty(&format!("hostgroups[{i}].name"), &h.name)?;
            if !hg_names.insert(h.name.as_str()) {
                return Err(ConfigError::new(
                    format!("hostgroups[{i}].name"),
                    format!("hostgroup {:?} is defined twice", h.name),
                ));
            }
        }

        for (i, r) in self.rules.iter().enumerate() {
            let f = format!("rules[{i}]");
            regex::Regex::new(&r.pattern).map_err(|e| {
                ConfigError::new(
                    format!("{f}.match"),
                    format!("invalid regular expression: {e}"),
                )
            })?;
            self.known_hostgroup(&format!("{f}.hostgroup"), &r.hostgroup)?;
            if let Some(u) = &r.user {
                if !self.users.iter().any(|x| x.name == *u) {
                    return Err(ConfigError::new(
                        format!("{f}.user"),
                        format!("unknown user {u:?}"),
                    ));
                }
            }
        }
        Ok(())
    }
}
