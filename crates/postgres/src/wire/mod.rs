//! The PostgreSQL v3 wire format.

pub mod message;
pub mod startup;

pub use message::{error_fields, read_message, Message, ReadyStatus, Writer};
pub use startup::{read_startup, startup_message, Startup, StartupParams, WireError};
