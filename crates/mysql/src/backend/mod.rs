//! The proxy as a client of backend servers.

mod conn;
mod connector;
mod control;
mod greeting;
mod login;
mod open;
pub mod state;
pub mod stmt_cache;

pub use conn::{
    BackendConn, BackendError, OkInfo, Rows, BACKEND_CAPS, BACKEND_COLLATION, TRACKING_SETUP,
};
pub use connector::MysqlConnector;
pub use sluice_core::ReadTimeout;
pub use sluice_runtime::tls::BackendTls;
