//! Cross-field validation. Every error names the field it is about.

use crate::{Config, ConfigError};
use std::collections::HashSet;

type Result<T = ()> = std::result::Result<T, ConfigError>;

mod clients;
mod monitor;
mod pool;
mod proxy;
mod security;
mod servers;

impl Config {
    /// Checks every rule that serde's types cannot express, section by section.
    pub fn validate(&self) -> Result {
        self.check_proxy()?;
        let listens = self.check_listeners()?;
        self.check_users()?;
        self.check_servers()?;
        self.check_hostgroups_and_rules()?;
        self.check_pool()?;
        self.check_monitor()?;
        self.check_tls()?;
        self.check_digests()?;
        self.check_admin(&listens)?;
        self.validate_login()?;
        if self.log.json && self.log.level.is_empty() {
            return Err(ConfigError::new("log.level", "must not be empty"));
        }
        Ok(())
    }

    /// `name` must be a hostgroup the configuration knows.
    fn known_hostgroup(&self, field: &str, name: &str) -> Result {
        let hostgroups = self.hostgroup_names();
        if hostgroups.iter().any(|h| h == name) {
            return Ok(());
        }
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
