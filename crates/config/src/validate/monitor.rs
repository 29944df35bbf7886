//! Validation of `[monitor]` and `[failover]`.

use super::*;

impl Config {
    /// `[monitor]` and `[failover]`.
    pub(super) fn check_monitor(&self) -> Result {
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
        for (i, d) in self.discovery.iter().enumerate() {
            let f = format!("discovery[{i}]");
            let sources = usize::from(d.dns.is_some())
                + usize::from(d.srv.is_some())
                + usize::from(d.from_primary)
                + usize::from(d.command.is_some());
            if sources != 1 {
                return Err(ConfigError::new(
                    f,
                    "needs exactly one of dns, srv, from_primary and command",
                ));
            }
            if !m.enabled {
                return Err(ConfigError::new(
                    f,
                    "needs [monitor] enabled (the monitor checks discovered servers and gives them their role)",
                ));
            }
            if let Some(dns) = &d.dns {
                if !dns
                    .rsplit_once(':')
                    .is_some_and(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok_and(|p| p > 0))
                {
                    return Err(ConfigError::new(format!("{f}.dns"), "must be name:port"));
                }
            }
            if let Some(ns) = &d.nameserver {
                if ns.parse::<std::net::SocketAddr>().is_err() {
                    return Err(ConfigError::new(
                        format!("{f}.nameserver"),
                        "must be ip:port",
                    ));
                }
                if d.dns.is_none() && d.srv.is_none() {
                    return Err(ConfigError::new(
                        format!("{f}.nameserver"),
                        "applies to dns and srv only",
                    ));
                }
            }
            if d.max_servers == 0 || d.max_servers > 256 {
                return Err(ConfigError::new(
                    format!("{f}.max_servers"),
                    "must be between 1 and 256",
                ));
            }
            if d.interval.get() < std::time::Duration::from_millis(100) {
                return Err(ConfigError::new(
                    format!("{f}.interval"),
                    "must be at least 100ms",
                ));
            }
            if (d.port.is_some() || !d.names.is_empty())
                && !(d.from_primary && d.protocol == crate::Protocol::Postgres)
            {
                return Err(ConfigError::new(
                    f,
                    "port and names apply to from_primary on PostgreSQL only",
                ));
            }
        }
        Ok(())
    }
}
