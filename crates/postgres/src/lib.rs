//! PostgreSQL support for sluice. This first part is the wire format a front end needs before
//! anything else: the startup packet (protocol version, parameters, SSL/GSSENC/cancel
//! requests), version negotiation, the framing of every later message, bounded in size, and
//! SCRAM-SHA-256 from the server's side. Sessions and the data path build on it (issue 12).
#![forbid(unsafe_code)]

pub mod scram;
pub mod wire;
