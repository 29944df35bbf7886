//! `[digests]` and `[admin]`: statistics per statement shape, and the admin API.

use crate::types::yes;
use crate::HumanDuration;
use serde::{Deserialize, Serialize};

/// `[digests]`: statistics per statement shape.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct DigestsConfig {
    /// Count statements per digest.
    #[serde(default = "yes")]
    pub enabled: bool,
    /// Most (digest, user, schema, hostgroup) entries kept; the least recently seen are
    /// dropped beyond it.
    #[serde(default = "default_digest_entries")]
    pub max_entries: u32,
}

impl Default for DigestsConfig {
    fn default() -> Self {
        DigestsConfig {
            enabled: true,
            max_entries: default_digest_entries(),
        }
    }
}

/// `[admin]`: the HTTP admin API.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct AdminConfig {
    /// `host:port` to listen on (loopback unless a token is set).
    pub listen: String,
    /// Bearer token required on every request (required when not bound to loopback).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// `host:port` of the MySQL-protocol admin listener (`SHOW SERVERS`, ...), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sql_listen: Option<String>,
    /// User name on the MySQL-protocol admin listener.
    #[serde(default = "default_admin_user")]
    pub sql_user: String,
    /// Its password (required with `sql_listen`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sql_password: Option<String>,
    /// Most HTTP connections open at once; more are answered 503 and closed. The admin
    /// listener's own budget of file descriptors, apart from the clients'.
    #[serde(default = "default_admin_max_connections")]
    pub max_connections: u32,
    /// A request's head must arrive whole within this, counted from the connection's opening
    /// or from the first byte of a following request.
    #[serde(default = "default_admin_header_timeout")]
    pub header_timeout: HumanDuration,
    /// A connection on which no byte moves for this long, while no request is being answered,
    /// is closed (idle keep-alive, a stalled body, a client that stops reading).
    #[serde(default = "default_admin_idle_timeout")]
    pub idle_timeout: HumanDuration,
    /// Largest request body accepted, in bytes (413 beyond it).
    #[serde(default = "default_admin_max_body_size")]
    pub max_body_size: u32,
    /// Logged-in sessions on the MySQL-protocol admin listener at once.
    #[serde(default = "default_admin_sql_max")]
    pub sql_max_connections: u32,
}

impl AdminConfig {
    /// An `[admin]` section listening on `listen`, everything else at its default.
    pub fn new(listen: impl Into<String>) -> AdminConfig {
        AdminConfig {
            listen: listen.into(),
            token: None,
            sql_listen: None,
            sql_user: default_admin_user(),
            sql_password: None,
            max_connections: default_admin_max_connections(),
            header_timeout: default_admin_header_timeout(),
            idle_timeout: default_admin_idle_timeout(),
            max_body_size: default_admin_max_body_size(),
            sql_max_connections: default_admin_sql_max(),
        }
    }
}

fn default_admin_header_timeout() -> HumanDuration {
    HumanDuration::from_millis(10_000)
}

fn default_admin_idle_timeout() -> HumanDuration {
    HumanDuration::from_millis(60_000)
}

fn default_admin_max_body_size() -> u32 {
    64 * 1024
}

fn default_admin_max_connections() -> u32 {
    32
}

fn default_admin_sql_max() -> u32 {
    64
}

fn default_admin_user() -> String {
    "admin".into()
}

fn default_digest_entries() -> u32 {
    10_000
}
