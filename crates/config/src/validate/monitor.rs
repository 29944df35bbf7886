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
        Ok(())
    }
}
