//! Why the process could not start, or a reload was refused.

/// Start-up failures.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// A listener could not be bound.
    #[error("cannot listen on {addr}: {error}")]
    Bind {
        /// The address.
        addr: String,
        /// Why.
        error: std::io::Error,
    },
    /// The TLS certificate or key could not be loaded.
    #[error("TLS: {0}")]
    Tls(String),
    /// The monitor's thread could not be started.
    #[error("cannot start the monitor: {0}")]
    Monitor(std::io::Error),
}

/// Why a reload, or a change of servers over the admin API, was not applied (the running
/// configuration stays whole).
#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    /// The process was started without a file.
    #[error("the proxy was not started from a configuration file")]
    NoFile,
    /// The file could not be read or is invalid.
    #[error("{path}: {error}")]
    Load {
        /// The file.
        path: String,
        /// Why.
        error: sluice_config::ConfigError,
    },
    /// The requested change was refused (for example an unknown server).
    #[error("{0}")]
    Refused(String),
    /// The changed configuration does not validate.
    #[error("not applied: {0}")]
    Invalid(String),
    /// Settings that need a restart changed.
    #[error("not applied: changing {} needs a restart", .0.join(", "))]
    NeedsRestart(Vec<String>),
    /// The server taking the writes would be removed.
    #[error("not applied: {server} takes the writes (hostgroup {hostgroup}); switch over to another server before removing it")]
    RemovesWriter {
        /// The server.
        server: String,
        /// The writer hostgroup.
        hostgroup: String,
    },
    /// The TLS certificate or key could not be loaded.
    #[error("not applied: TLS: {0}")]
    Tls(String),
    /// A new listener could not be bound.
    #[error("not applied: cannot listen on {addr}: {error}")]
    Listen {
        /// The address.
        addr: String,
        /// Why.
        error: std::io::Error,
    },
}
