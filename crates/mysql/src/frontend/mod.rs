//! The proxy as a server to its clients.

pub mod admin_sql;
pub mod client;
mod commands;
mod conclude;
mod digest;
pub mod exec;
pub mod handshake;
mod ids;
mod local;
pub mod login;
mod lost;
pub mod pins;
mod pipeline;
mod query;
pub mod relay;
mod release;
pub mod request;
pub mod scan;
pub mod session;
mod stalled;
pub mod stmt;
mod sync;
