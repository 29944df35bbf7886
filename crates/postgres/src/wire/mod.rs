//! The PostgreSQL v3 wire format.

pub mod message;
pub mod startup;

pub use message::{error_fields, error_message, read_message, Message, ReadyStatus, Writer, SYNC};
pub use startup::{read_startup, startup_message, Startup, StartupParams, WireError};
