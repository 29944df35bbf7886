//! `[login]`: the connection phase — how long a client may take to log in, how many may be
//! logging in at once, and how failed logins from one address are slowed and blocked.

use crate::HumanDuration;
use serde::{Deserialize, Serialize};

/// `[login]`: settings of the connection phase, for every client listener and the SQL admin
/// listener (each listener group has its own budget).
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct LoginConfig {
    /// Time a client has to complete the connection phase (greeting to OK).
    #[serde(default = "default_handshake_timeout")]
    pub handshake_timeout: HumanDuration,
    /// Connections still in the connection phase at once (per listener group); when full, a
    /// new connection closes the one that has been logging in the longest. 0: as many as
    /// `[proxy] max_client_connections`.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub max_connecting: u32,
    /// Failed logins from one address within `failure_window` after which the address is
    /// blocked for `block_time`. 0: never block.
    #[serde(default = "default_max_failures")]
    pub max_failures: u32,
    /// The window over which failed logins from one address are counted.
    #[serde(default = "default_failure_window")]
    pub failure_window: HumanDuration,
    /// How long an address stays blocked.
    #[serde(default = "default_block_time")]
    pub block_time: HumanDuration,
    /// Delay before a failed login is answered (slows down guessing on one connection).
    #[serde(default = "default_failure_delay")]
    pub failure_delay: HumanDuration,
    /// Most addresses whose failed logins are remembered; beyond it the stalest is forgotten.
    #[serde(default = "default_max_tracked")]
    pub max_tracked_addresses: u32,
}

impl Default for LoginConfig {
    fn default() -> Self {
        LoginConfig {
            handshake_timeout: default_handshake_timeout(),
            max_connecting: 0,
            max_failures: default_max_failures(),
            failure_window: default_failure_window(),
            block_time: default_block_time(),
            failure_delay: default_failure_delay(),
            max_tracked_addresses: default_max_tracked(),
        }
    }
}

impl LoginConfig {
    /// The connection-phase budget: `max_connecting`, or `max_client_connections` when 0.
    pub fn connecting_budget(&self, max_client_connections: u32) -> usize {
        if self.max_connecting == 0 {
            max_client_connections as usize
        } else {
            self.max_connecting as usize
        }
    }
}

fn default_handshake_timeout() -> HumanDuration {
    HumanDuration::from_millis(10_000)
}
fn default_max_failures() -> u32 {
    20
}
fn default_failure_window() -> HumanDuration {
    HumanDuration::from_millis(60_000)
}
fn default_block_time() -> HumanDuration {
    HumanDuration::from_millis(300_000)
}
fn default_failure_delay() -> HumanDuration {
    HumanDuration::from_millis(1_000)
}
fn default_max_tracked() -> u32 {
    10_000
}
fn is_zero(n: &u32) -> bool {
    *n == 0
}
