//! sluice's SQL scanner: a single-pass, allocation-free lexer and the classification the router
//! needs — can a statement go to a replica, which session state does it create or depend on,
//! does it carry a routing hint.
//!
//! It is deliberately not a parser. Where the text alone cannot tell, it errs towards the
//! writer and towards pinning: that costs performance, never correctness.
#![forbid(unsafe_code)]

mod classify;
pub mod digest;
mod functions;
pub mod lexer;
pub mod names;
pub mod postgres;
pub mod rewrite;
pub mod shapes;

pub use classify::{scan, scan_with, Command, Effects, Kill, Options, Route, Scan};

/// Where `needle` first stands in `hay`, in any ASCII case.
pub(crate) fn find_ignore_case(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len())
        .position(|w| w.eq_ignore_ascii_case(needle))
}

#[cfg(test)]
mod tests;
