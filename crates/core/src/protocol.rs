//! Which wire protocol a listener, a server or a session speaks.

use std::fmt;

/// A wire protocol sluice speaks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Protocol {
    /// MySQL / MariaDB.
    #[default]
    Mysql,
    /// PostgreSQL (v3 protocol).
    Postgres,
}

impl Protocol {
    /// The name used in configuration, API objects and metric labels.
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Mysql => "mysql",
            Protocol::Postgres => "postgres",
        }
    }
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
