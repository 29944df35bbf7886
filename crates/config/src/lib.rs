//! sluice configuration.
//!
//! The TOML file is the single source of truth. [`Config::from_toml`] parses it and
//! [`Config::validate`] checks every cross-field rule; every error names the offending field
//! (`servers[1].address: ...`) so that `sluice check` can point straight at it.
#![forbid(unsafe_code)]

mod admin;
mod discovery;
mod duration;
mod login;
mod monitor;
mod mysql;
mod postgres;
mod protocol;
mod types;
mod validate;

pub use admin::{AdminConfig, DigestsConfig};
pub use discovery::DiscoveryConfig;
pub use duration::{parse_duration, HumanDuration};
pub use login::LoginConfig;
pub use monitor::{FailoverConfig, MonitorConfig};
pub use mysql::MysqlConfig;
pub use postgres::PostgresConfig;
pub use protocol::Protocol;
pub use types::*;

use std::path::Path;

/// A configuration error that names the field it is about.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{field}: {message}")]
pub struct ConfigError {
    /// Dotted path of the field, e.g. `servers[1].address`; `file` for I/O and syntax errors.
    pub field: String,
    /// What is wrong with it.
    pub message: String,
}

impl ConfigError {
    pub(crate) fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        ConfigError {
            field: field.into(),
            message: message.into(),
        }
    }
}

impl Config {
    /// Parses and validates a TOML document.
    pub fn from_toml(text: &str) -> Result<Config, ConfigError> {
        let mut cfg: Config = toml::from_str(text).map_err(|e| {
            let field = e
                .span()
                .map(|s| field_at(text, s.start))
                .unwrap_or_else(|| "file".to_string());
            ConfigError::new(field, e.message().trim().to_string())
        })?;
        // Which [mysql] keys the file sets (the others may come from their first places).
        let given: Vec<String> = toml::from_str::<toml::Table>(text)
            .ok()
            .and_then(|t| t.get("mysql").and_then(|m| m.as_table()).cloned())
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default();
        let given: Vec<&str> = given.iter().map(String::as_str).collect();
        cfg.fold_mysql_legacy(&given)?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// Reads, parses and validates a config file.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            ConfigError::new("file", format!("cannot read {}: {e}", path.display()))
        })?;
        Config::from_toml(&text)
    }

    /// Serialises the effective configuration (defaults filled in) back to TOML.
    pub fn to_toml(&self) -> String {
        toml::to_string_pretty(self).unwrap_or_else(|e| format!("# cannot serialise config: {e}\n"))
    }
}

/// Best-effort name of the TOML key or table around byte offset `pos`, for syntax errors:
/// `line 7 (servers[1])`.
fn field_at(text: &str, pos: usize) -> String {
    let before = &text[..pos.min(text.len())];
    let line_no = before.matches('\n').count() + 1;
    let mut counts: std::collections::HashMap<String, usize> = Default::default();
    let mut table = String::new();
    for line in before.lines() {
        let l = line.trim();
        if let Some(name) = l.strip_prefix("[[").and_then(|r| r.strip_suffix("]]")) {
            let n = counts.entry(name.trim().to_string()).or_insert(0);
            table = format!("{}[{}]", name.trim(), *n);
            *n += 1;
        } else if let Some(name) = l.strip_prefix('[').and_then(|r| r.strip_suffix(']')) {
            table = name.trim().to_string();
        }
    }
    let key = text[before.rfind('\n').map(|i| i + 1).unwrap_or(0)..]
        .split(['=', '\n'])
        .next()
        .unwrap_or("")
        .trim()
        .to_string();
    match (table.is_empty(), key.is_empty() || key.starts_with('[')) {
        (true, true) => format!("line {line_no}"),
        (true, false) => format!("{key} (line {line_no})"),
        (false, true) => format!("{table} (line {line_no})"),
        (false, false) => format!("{table}.{key} (line {line_no})"),
    }
}

#[cfg(test)]
mod tests;
