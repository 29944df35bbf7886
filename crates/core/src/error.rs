//! Errors of the core: why a connection could not be had.

use std::time::Duration;

/// A failed attempt to open a backend connection.
#[derive(Clone, Debug, thiserror::Error)]
#[error("{message}")]
pub struct ConnectError {
    /// True if the server itself is unreachable or broken (refused, timed out, reset): it is
    /// shunned and another server is tried. False if it answered and refused us (for example
    /// bad credentials): the client sees the server's error.
    pub server_down: bool,
    /// Human-readable reason.
    pub message: String,
    /// The server's error code, when it sent one.
    pub code: Option<u16>,
    /// The server's SQL state, when it sent one.
    pub sqlstate: Option<[u8; 5]>,
    /// The rest of the server's error, by its protocol's own field codes, for a client of
    /// that protocol to be given as the server worded it (PostgreSQL: `D` detail, `H` hint,
    /// `F`/`L`/`R` where in the server's source...). Empty where the protocol has none.
    pub fields: Vec<(u8, String)>,
}

impl ConnectError {
    /// The server could not be reached or broke down.
    pub fn down(message: impl Into<String>) -> Self {
        ConnectError {
            server_down: true,
            message: message.into(),
            code: None,
            sqlstate: None,
            fields: Vec::new(),
        }
    }
    /// The server answered with an error.
    pub fn refused(code: u16, sqlstate: [u8; 5], message: impl Into<String>) -> Self {
        ConnectError {
            server_down: false,
            message: message.into(),
            code: Some(code),
            sqlstate: Some(sqlstate),
            fields: Vec::new(),
        }
    }
    /// This error with the rest of the server's error (see [`ConnectError::fields`]).
    pub fn with_fields(mut self, fields: Vec<(u8, String)>) -> Self {
        self.fields = fields;
        self
    }
}

/// Why no backend connection could be lent.
#[derive(Clone, Debug, thiserror::Error)]
pub enum AcquireError {
    /// Every connection stayed busy for the whole queue timeout.
    #[error(
        "no connection to hostgroup '{hostgroup}' became free within {} ms: all {busy} of {limit} connections busy, {queued} statements queued",
        waited.as_millis()
    )]
    Timeout {
        /// Hostgroup name.
        hostgroup: String,
        /// How long the statement waited: the queue timeout in force.
        waited: Duration,
        /// Connections open or opening.
        busy: u32,
        /// Sum of the servers' connection limits.
        limit: u32,
        /// Statements in the queue when it gave up.
        queued: usize,
    },
    /// The wait queue was full.
    #[error("hostgroup '{hostgroup}' is overloaded: {queued} statements already waiting for a connection")]
    QueueFull {
        /// Hostgroup name.
        hostgroup: String,
        /// Queue length.
        queued: usize,
    },
    /// No server of the hostgroup can take traffic.
    #[error("no usable server in hostgroup '{hostgroup}': {reason}")]
    NoServer {
        /// Hostgroup name.
        hostgroup: String,
        /// The last failure seen.
        reason: String,
    },
    /// The hostgroup does not exist.
    #[error("unknown hostgroup '{0}'")]
    UnknownHostgroup(String),
    /// A server answered the login with an error.
    #[error("{0}")]
    Connect(ConnectError),
}
