//! MySQL/MariaDB protocol support for sluice: the wire format, authentication, backend
//! connections, and client sessions that route statements through the core.
#![forbid(unsafe_code)]

pub mod agent;
pub mod auth;
pub mod backend;
pub mod front;
pub mod frontend;
pub mod schemas;
pub mod server_info;
pub mod state;
pub mod wire;

pub use front::MysqlFrontend;
