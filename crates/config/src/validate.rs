//! Cross-field validation. Every error names the field it is about.

use crate::{Config, ConfigError};
use std::collections::HashSet;

type Result<T = ()> = std::result::Result<T, ConfigError>;

impl Config {
    /// Checks every rule that serde's types cannot express.
    pub fn validate(&self) -> Result {
        check_address("proxy.listen", &self.proxy.listen)?;
        non_empty("proxy.writer_hostgroup", &self.proxy.writer_hostgroup)?;
        non_empty("proxy.reader_hostgroup", &self.proxy.reader_hostgroup)?;
        if self.proxy.writer_hostgroup == self.proxy.reader_hostgroup {
            return Err(ConfigError::new(
                "proxy.reader_hostgroup",
                "must differ from proxy.writer_hostgroup",
            ));
        }
        if self.proxy.max_client_connections == 0 {
            return Err(ConfigError::new(
                "proxy.max_client_connections",
                "must be at least 1",
            ));
        }
        if self.mysql.max_packet_size < 1024 {
            return Err(ConfigError::new(
                "mysql.max_packet_size",
                "must be at least 1024 bytes",
            ));
        }
        if self.proxy.max_request_memory < u64::from(self.mysql.max_packet_size) {
            return Err(ConfigError::new(
                "proxy.max_request_memory",
                format!(
                    "must be at least mysql.max_packet_size ({} bytes): a request of the largest allowed size must fit",
                    self.mysql.max_packet_size
                ),
            ));
        }
        if let Some(v) = &self.mysql.server_version {
            if v.is_empty() || v.contains('\0') {
                return Err(ConfigError::new(
                    "mysql.server_version",
                    "must be a non-empty string without NUL",
                ));
            }
        }

        let hostgroups = self.hostgroup_names();
        let known_hostgroup = |field: &str, name: &str| -> Result {
            if hostgroups.iter().any(|h| h == name) {
                Ok(())
            } else {
                Err(ConfigError::new(
                    field,
                    format!(
                        "unknown hostgroup {name:?} (known: {})",
                        if hostgroups.is_empty() {
                            "none".to_string()
                        } else {
                            hostgroups.join(", ")
                        }
                    ),
                ))
            }
        };

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
                known_hostgroup(&format!("{f}.hostgroup"), hg)?;
            }
        }

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
            if !servers.insert((s.address.as_str(), hg)) {
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
        let any_managed = self.servers.iter().any(|s| s.hostgroup.is_none());
        let any_writer = self
            .servers
            .iter()
            .any(|s| s.hostgroup.as_deref() == Some(&self.proxy.writer_hostgroup));
        if !any_managed && !any_writer {
            return Err(ConfigError::new(
                "servers",
                format!(
                    "no server is in the writer hostgroup {:?}",
                    self.proxy.writer_hostgroup
                ),
            ));
        }

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
            known_hostgroup(&format!("{f}.hostgroup"), &r.hostgroup)?;
            if let Some(u) = &r.user {
                if !users.contains(u.as_str()) {
                    return Err(ConfigError::new(
                        format!("{f}.user"),
                        format!("unknown user {u:?}"),
                    ));
                }
            }
        }

        let p = &self.pool;
        if p.max_connections == 0 {
            return Err(ConfigError::new(
                "pool.max_connections",
                "must be at least 1",
            ));
        }
        if p.connect_timeout.get().is_zero() {
            return Err(ConfigError::new(
                "pool.connect_timeout",
                "must be greater than zero",
            ));
        }
        let read_timeout = p.read_timeout.get();
        if !read_timeout.is_zero() && read_timeout.as_millis() < 1000 {
            return Err(ConfigError::new(
                "pool.read_timeout",
                "must be 0 (no limit) or at least 1s",
            ));
        }
        if p.idle_timeout.get().as_millis() < 1000 {
            return Err(ConfigError::new("pool.idle_timeout", "must be at least 1s"));
        }
        if p.max_connecting == 0 {
            return Err(ConfigError::new(
                "pool.max_connecting",
                "must be at least 1",
            ));
        }
        if self.mysql.stmt_cache_size == 0 {
            return Err(ConfigError::new(
                "mysql.stmt_cache_size",
                "must be at least 1",
            ));
        }
        let m = &self.monitor;
        if m.interval.get().as_millis() < 10 {
            return Err(ConfigError::new(
                "monitor.interval",
                "must be at least 10ms",
            ));
        }
        if m.timeout.get().as_millis() < 10 {
            return Err(ConfigError::new("monitor.timeout", "must be at least 10ms"));
        }
        if m.failure_threshold == 0 {
            return Err(ConfigError::new(
                "monitor.failure_threshold",
                "must be at least 1",
            ));
        }
        if m.user.is_none() && m.password.is_some() {
            return Err(ConfigError::new(
                "monitor.user",
                "is required when monitor.password is set",
            ));
        }
        if self.failover.enabled {
            if !m.enabled {
                return Err(ConfigError::new(
                    "failover.enabled",
                    "needs [monitor] enabled",
                ));
            }
            if self.failover.detection_time.get() < m.interval.get() {
                return Err(ConfigError::new(
                    "failover.detection_time",
                    "must be at least monitor.interval (a failure must be seen before it is acted on)",
                ));
            }
        }
        match (&self.proxy.tls_cert, &self.proxy.tls_key) {
            (Some(_), None) => {
                return Err(ConfigError::new(
                    "proxy.tls_key",
                    "is required with proxy.tls_cert",
                ))
            }
            (None, Some(_)) => {
                return Err(ConfigError::new(
                    "proxy.tls_cert",
                    "is required with proxy.tls_key",
                ))
            }
            _ => {}
        }
        if self.pool.tls && self.pool.tls_ca.as_deref().unwrap_or("").is_empty() {
            return Err(ConfigError::new(
                "pool.tls_ca",
                "is required with pool.tls (the CA the servers' certificates are checked against)",
            ));
        }
        if self.users.iter().any(|u| u.require_tls) && self.proxy.tls_cert.is_none() {
            let i = self.users.iter().position(|u| u.require_tls).unwrap_or(0);
            return Err(ConfigError::new(
                format!("users[{i}].require_tls"),
                "needs [proxy] tls_cert and tls_key",
            ));
        }
        if self.digests.max_entries > 1_000_000 {
            return Err(ConfigError::new(
                "digests.max_entries",
                "must be at most 1000000",
            ));
        }
        if let Some(a) = &self.admin {
            check_address("admin.listen", &a.listen)?;
            if listens.contains(&a.listen) && !a.listen.ends_with(":0") {
                return Err(ConfigError::new(
                    "admin.listen",
                    format!("{} is already used by a client listener", a.listen),
                ));
            }
            let host = a.listen.rsplit_once(':').map(|(h, _)| h).unwrap_or("");
            let loopback =
                matches!(host, "127.0.0.1" | "localhost" | "[::1]") || host.starts_with("127.");
            if !loopback && a.token.as_deref().unwrap_or("").is_empty() {
                return Err(ConfigError::new(
                    "admin.token",
                    "is required when admin.listen is not a loopback address",
                ));
            }
            check_admin_http_limits(a)?;
            if let Some(sql) = &a.sql_listen {
                check_address("admin.sql_listen", sql)?;
                let taken = |other: &String| other == sql && !sql.ends_with(":0");
                if listens.iter().any(&taken) || taken(&a.listen) {
                    return Err(ConfigError::new(
                        "admin.sql_listen",
                        format!("{sql} is already used by another listener"),
                    ));
                }
                non_empty("admin.sql_user", &a.sql_user)?;
                if a.sql_max_connections == 0 {
                    return Err(ConfigError::new(
                        "admin.sql_max_connections",
                        "must be at least 1",
                    ));
                }
                if a.sql_password.as_deref().unwrap_or("").is_empty() {
                    return Err(ConfigError::new(
                        "admin.sql_password",
                        "is required with admin.sql_listen",
                    ));
                }
            }
        }
        self.validate_login()?;
        if self.log.json && self.log.level.is_empty() {
            return Err(ConfigError::new("log.level", "must not be empty"));
        }
        Ok(())
    }
}

/// The HTTP admin listener's bounds: each must bound something.
fn check_admin_http_limits(a: &crate::AdminConfig) -> Result {
    if !(1..=10_000).contains(&a.max_connections) {
        return Err(ConfigError::new(
            "admin.max_connections",
            "must be between 1 and 10000",
        ));
    }
    if a.header_timeout.get().as_millis() < 100 {
        return Err(ConfigError::new(
            "admin.header_timeout",
            "must be at least 100ms",
        ));
    }
    if a.idle_timeout.get().as_millis() < 100 {
        return Err(ConfigError::new(
            "admin.idle_timeout",
            "must be at least 100ms",
        ));
    }
    if !(1024..=64 * 1024 * 1024).contains(&a.max_body_size) {
        return Err(ConfigError::new(
            "admin.max_body_size",
            "must be between 1024 and 67108864 bytes",
        ));
    }
    Ok(())
}

impl Config {
    /// `[login]`.
    fn validate_login(&self) -> Result {
        let l = &self.login;
        let timeout = l.handshake_timeout.get();
        if timeout.as_millis() < 100 {
            return Err(ConfigError::new(
                "login.handshake_timeout",
                "must be at least 100ms",
            ));
        }
        if l.failure_delay.get() >= timeout {
            return Err(ConfigError::new(
                "login.failure_delay",
                "must be shorter than login.handshake_timeout",
            ));
        }
        if l.max_failures > 0 {
            if l.failure_window.get().is_zero() {
                return Err(ConfigError::new(
                    "login.failure_window",
                    "must be greater than zero",
                ));
            }
            if l.block_time.get().is_zero() {
                return Err(ConfigError::new(
                    "login.block_time",
                    "must be greater than zero (or set login.max_failures = 0)",
                ));
            }
        }
        if !(1..=1_000_000).contains(&l.max_tracked_addresses) {
            return Err(ConfigError::new(
                "login.max_tracked_addresses",
                "must be from 1 to 1000000",
            ));
        }
        Ok(())
    }
}

fn non_empty(field: &str, value: &str) -> Result {
    if value.trim().is_empty() {
        Err(ConfigError::new(field, "must not be empty"))
    } else {
        Ok(())
    }
}

/// Accepts `host:port` (IPv4, `[IPv6]` or a host name) with a numeric port.
fn check_address(field: &str, addr: &str) -> Result {
    let bad = |why: &str| {
        Err(ConfigError::new(
            field,
            format!("invalid address {addr:?}: {why}"),
        ))
    };
    let Some((host, port)) = addr.rsplit_once(':') else {
        return bad("expected host:port");
    };
    if host.is_empty() {
        return bad("missing host");
    }
    match port.parse::<u16>() {
        Ok(_) => {}
        Err(_) => return bad("port must be a number from 0 to 65535"),
    }
    if host.contains(':') && !(host.starts_with('[') && host.ends_with(']')) {
        return bad("IPv6 addresses must be written as [addr]:port");
    }
    Ok(())
}
