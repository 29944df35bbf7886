//! Server connections: opening and logging in ([`connect`]), the connection itself with the
//! state it carries ([`conn`]), and the prepared statements it holds ([`statements`]).

pub mod conn;
pub mod connect;
pub mod statements;

pub use conn::PgConn;
pub use connect::PgConnector;
