//! `[[discovery]]`: where sluice finds replicas at runtime, besides `[[servers]]`.

use crate::{HumanDuration, Protocol};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One source of servers. Exactly one of `dns`, `srv`, `from_primary` and `command`.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct DiscoveryConfig {
    /// The protocol the servers it finds speak.
    #[serde(default, skip_serializing_if = "Protocol::is_mysql")]
    pub protocol: Protocol,
    /// `name:port`: every address (A and AAAA) the name resolves to, re-resolved every
    /// `interval`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dns: Option<String>,
    /// A DNS SRV name (`_postgresql._tcp.db.example`): each record's target (resolved to
    /// its A and AAAA addresses) and port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub srv: Option<String>,
    /// `ip:port` of the DNS server `dns` and `srv` ask (default: the system's resolver
    /// configuration, `/etc/resolv.conf`; `dns` without it also reads `/etc/hosts`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nameserver: Option<String>,
    /// The replicas the primary reports (MariaDB `SHOW REPLICA HOSTS`, with the replicas'
    /// `report_host`/`report_port`; PostgreSQL `pg_stat_replication`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub from_primary: bool,
    /// PostgreSQL `from_primary`: the standbys' port (`pg_stat_replication` has only their
    /// address); default: the primary's port.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
    /// PostgreSQL `from_primary`: `application_name` → `host:port`, for standbys whose
    /// address is not the one they connect from (or that share an address).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub names: BTreeMap<String, String>,
    /// A command (`sh -c`) that prints one `host:port` per line.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// How often to look.
    #[serde(default = "default_interval")]
    pub interval: HumanDuration,
    /// How long one look may take (a command is killed after it).
    #[serde(default = "default_timeout")]
    pub timeout: HumanDuration,
    /// Most servers this source adds; more are ignored (and said so).
    #[serde(default = "default_max_servers")]
    pub max_servers: u32,
}

impl DiscoveryConfig {
    /// What it is, for events and for the servers it adds (`dns name:port`, ...).
    pub fn describe(&self) -> String {
        if let Some(s) = &self.srv {
            return format!("srv {s}");
        }
        match (&self.dns, self.from_primary, &self.command) {
            (Some(d), _, _) => format!("dns {d}"),
            (_, true, _) => format!("{} primary", self.protocol.as_str()),
            (_, _, Some(c)) => format!("command {c}"),
            _ => "nothing".into(),
        }
    }
}

fn default_interval() -> HumanDuration {
    HumanDuration::from_millis(10_000)
}
fn default_timeout() -> HumanDuration {
    HumanDuration::from_millis(5_000)
}
fn default_max_servers() -> u32 {
    16
}
