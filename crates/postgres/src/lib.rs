//! PostgreSQL support for sluice: the v3 wire protocol (startup negotiation, bounded message
//! framing), SCRAM-SHA-256 on both sides, server connections with their prepared statements
//! and settings, and client sessions pooled by transaction with read/write splitting.
#![forbid(unsafe_code)]

pub mod agent;
pub mod backend;
pub mod classify;
pub mod front;
pub mod frontend;
pub mod scan_cache;
pub mod scram;
pub mod scram_client;
pub mod wire;

pub use front::PostgresFrontend;

/// A fresh random nonce of printable characters (SCRAM; no commas).
pub(crate) fn nonce() -> String {
    use base64::Engine;
    let mut raw = [0u8; 18];
    let _ = aws_lc_rs::rand::fill(&mut raw);
    base64::engine::general_purpose::STANDARD.encode(raw)
}
