//! `[monitor]` and `[failover]`: health checks, and promotion when the primary fails.

use crate::types::yes;
use crate::HumanDuration;
use serde::{Deserialize, Serialize};

/// `[monitor]`: health checks of every server, replication state and lag.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct MonitorConfig {
    /// Run the monitor.
    #[serde(default = "yes")]
    pub enabled: bool,
    /// User the monitor logs in as (default: the first `[[users]]` entry).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// Its password.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password: Option<String>,
    /// How often each server is checked.
    #[serde(default = "default_monitor_interval")]
    pub interval: HumanDuration,
    /// Time allowed for one check (connect, or queries on the monitor's connection).
    #[serde(default = "default_monitor_timeout")]
    pub timeout: HumanDuration,
    /// Failed checks in a row after which a server takes no traffic (one missed check is not
    /// an outage).
    #[serde(default = "default_failure_threshold")]
    pub failure_threshold: u32,
    /// Replicas lagging more than this take no reads until they catch up (default: no limit).
    /// A hostgroup's or server's own `max_replication_lag` overrides it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_replication_lag: Option<HumanDuration>,
    /// PostgreSQL standbys more than this many bytes of WAL behind the primary take no reads
    /// until they catch up (default: no limit). A hostgroup's or server's own overrides it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_replication_lag_bytes: Option<u64>,
}

/// `[failover]`: automatic promotion of a replica when the primary fails.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct FailoverConfig {
    /// Fail over automatically.
    #[serde(default)]
    pub enabled: bool,
    /// The primary must be unreachable this long before a replica is promoted.
    #[serde(default = "default_detection_time")]
    pub detection_time: HumanDuration,
    /// How long new statements wait for a writer while it is failing over, before they fail.
    #[serde(default = "default_write_wait")]
    pub write_wait: HumanDuration,
    /// How long the candidate may take to apply its relay log (and, in a switchover, to catch
    /// up with the primary).
    #[serde(default = "default_catchup_timeout")]
    pub catchup_timeout: HumanDuration,
    /// Switchover: how long to wait for transactions on the old primary to finish.
    #[serde(default = "default_drain_timeout")]
    pub drain_timeout: HumanDuration,
    /// Rejoin a returning old primary as a replica when its history allows it.
    #[serde(default = "yes")]
    pub rejoin: bool,
    /// Replication user for a rejoining server (default: the monitor's credentials).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replication_user: Option<String>,
    /// Its password.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replication_password: Option<String>,
    /// PostgreSQL: a shell command that makes a former primary a standby of the new one
    /// (typically: stop it, `pg_rewind -R`, start it). Run with the servers' addresses in its
    /// environment; without it, a former primary stays out of service until restarted as a
    /// standby by hand.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rewind_command: Option<String>,
    /// How long `rewind_command` may run before it is killed.
    #[serde(default = "default_rewind_timeout")]
    pub rewind_timeout: HumanDuration,
}

impl Default for MonitorConfig {
    fn default() -> Self {
        MonitorConfig {
            enabled: true,
            user: None,
            password: None,
            interval: default_monitor_interval(),
            timeout: default_monitor_timeout(),
            failure_threshold: default_failure_threshold(),
            max_replication_lag: None,
            max_replication_lag_bytes: None,
        }
    }
}

impl Default for FailoverConfig {
    fn default() -> Self {
        FailoverConfig {
            enabled: false,
            detection_time: default_detection_time(),
            write_wait: default_write_wait(),
            catchup_timeout: default_catchup_timeout(),
            drain_timeout: default_drain_timeout(),
            rejoin: true,
            replication_user: None,
            replication_password: None,
            rewind_command: None,
            rewind_timeout: default_rewind_timeout(),
        }
    }
}

fn default_catchup_timeout() -> HumanDuration {
    HumanDuration::from_millis(30_000)
}

fn default_detection_time() -> HumanDuration {
    HumanDuration::from_millis(1_000)
}

fn default_drain_timeout() -> HumanDuration {
    HumanDuration::from_millis(10_000)
}

fn default_failure_threshold() -> u32 {
    3
}

fn default_monitor_interval() -> HumanDuration {
    HumanDuration::from_millis(250)
}

fn default_monitor_timeout() -> HumanDuration {
    HumanDuration::from_millis(500)
}

fn default_rewind_timeout() -> HumanDuration {
    HumanDuration::from_millis(300_000)
}

fn default_write_wait() -> HumanDuration {
    HumanDuration::from_millis(10_000)
}
