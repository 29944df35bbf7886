//! The proxy as a client of backend servers.

mod conn;
mod connector;
mod greeting;
mod login;
pub mod state;
pub mod stmt_cache;
pub mod timeout;

pub use conn::{
    BackendConn, BackendError, OkInfo, Rows, BACKEND_CAPS, BACKEND_COLLATION, TRACKING_SETUP,
};
pub use connector::MysqlConnector;
pub use sluice_runtime::tls::BackendTls;
pub use timeout::ReadTimeout;
