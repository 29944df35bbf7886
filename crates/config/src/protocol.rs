//! Which wire protocol a listener, a server or a session speaks.

use serde::{Deserialize, Serialize};
use std::fmt;

/// A wire protocol sluice speaks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    /// MySQL / MariaDB.
    #[default]
    Mysql,
    /// PostgreSQL (v3 protocol).
    #[serde(alias = "postgresql")]
    Postgres,
}

impl Protocol {
    /// Every protocol, in a fixed order.
    pub const ALL: [Protocol; 2] = [Protocol::Mysql, Protocol::Postgres];

    /// The name used in configuration, API objects and metric labels.
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Mysql => "mysql",
            Protocol::Postgres => "postgres",
        }
    }

    /// True for MySQL (the default, left out when a configuration is written).
    pub fn is_mysql(&self) -> bool {
        *self == Protocol::Mysql
    }
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl crate::Config {
    /// The protocols this configuration has servers for, in [`Protocol::ALL`] order.
    pub fn protocols(&self) -> Vec<Protocol> {
        Protocol::ALL
            .into_iter()
            .filter(|p| self.servers.iter().any(|s| s.protocol == *p))
            .collect()
    }

    /// What one protocol's front end sees: only the servers and listeners of `protocol`
    /// (hostgroup names are resolved within a protocol), everything else as it is.
    pub fn for_protocol(&self, protocol: Protocol) -> crate::Config {
        let mut c = self.clone();
        c.servers.retain(|s| s.protocol == protocol);
        c.discovery.retain(|d| d.protocol == protocol);
        c.listeners.retain(|l| l.protocol == protocol);
        if protocol != Protocol::Mysql {
            c.proxy.listen = None;
        }
        // A rule applies where its hostgroup exists (hints too resolve within a protocol).
        let names = c.hostgroup_names();
        c.rules.retain(|r| names.contains(&r.hostgroup));
        c
    }
}
