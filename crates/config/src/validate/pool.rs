//! Validation of `[pool]`.

use super::*;

impl Config {
    /// `[pool]`.
    pub(super) fn check_pool(&self) -> Result {
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
        let lifetime = p.max_lifetime.get();
        if !lifetime.is_zero() && lifetime.as_millis() < 1000 {
            return Err(ConfigError::new(
                "pool.max_lifetime",
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
        Ok(())
    }
}
