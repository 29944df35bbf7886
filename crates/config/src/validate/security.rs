//! Validation of tLS, digests and the admin listeners.

use super::*;

impl Config {
    /// TLS for clients and servers.
    pub(super) fn check_tls(&self) -> Result {
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
        Ok(())
    }

    /// `[digests]`.
    pub(super) fn check_digests(&self) -> Result {
        if self.digests.max_entries > 1_000_000 {
            return Err(ConfigError::new(
                "digests.max_entries",
                "must be at most 1000000",
            ));
        }
        Ok(())
    }

    /// `[admin]`: its listeners must not take a client listener's address.
    pub(super) fn check_admin(&self, listens: &HashSet<String>) -> Result {
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
        Ok(())
    }
}
