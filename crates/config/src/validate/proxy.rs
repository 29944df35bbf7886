//! Validation of `[proxy]` and `[mysql]`.

use super::*;

impl Config {
    /// `[proxy]` and `[mysql]`.
    pub(super) fn check_proxy(&self) -> Result {
        match &self.proxy.listen {
            Some(listen) => check_address("proxy.listen", listen)?,
            None if self.listeners.is_empty() => {
                return Err(ConfigError::new(
                    "proxy.listen",
                    "is required when there are no [[listeners]]",
                ))
            }
            None => {}
        }
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
        for (field, bytes) in [
            (
                "postgres.max_statement_memory_per_session",
                self.postgres.max_statement_memory_per_session,
            ),
            (
                "mysql.max_statement_memory_per_session",
                self.mysql.max_statement_memory_per_session,
            ),
        ] {
            if bytes < 1024 {
                return Err(ConfigError::new(field, "must be at least 1024 bytes"));
            }
        }
        if self.mysql.net_read_timeout.get().as_millis() < 100 {
            return Err(ConfigError::new(
                "mysql.net_read_timeout",
                "must be at least 100ms",
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
        Ok(())
    }
}
