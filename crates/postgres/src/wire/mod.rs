//! The PostgreSQL v3 wire format.

pub mod message;
pub mod startup;

pub use message::{
    ends_session, error_fields, error_message, error_parts, read_message, ErrorParts, Message,
    ReadyStatus, Writer, FLUSH, SYNC,
};
pub use startup::{read_startup, startup_message, Startup, StartupParams, WireError};
