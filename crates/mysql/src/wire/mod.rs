//! The MySQL wire format: framing, constants, and the packets the proxy reads or writes.

pub mod buf;
pub mod consts;
pub mod handshake;
pub mod ok;
pub mod packet;
pub mod resultset;

pub use consts::{cap, com, status};
