//! Server connections: opening and logging in ([`connect`]), the connection itself with the
//! state it carries ([`conn`]), and the prepared statements it holds ([`statements`]), with
//! what DDL was seen to change of their results ([`epochs`]).

pub mod conn;
pub mod connect;
pub mod cursors;
pub mod epochs;
pub mod server_statements;
pub mod statements;

pub use conn::PgConn;
pub use connect::PgConnector;
