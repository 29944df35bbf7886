//! Harness bodies for coverage-guided fuzzing of sluice's parsers of untrusted bytes.
//!
//! Each target is a `fn(&[u8])` that feeds its input to one family of decoders and panics when
//! an invariant breaks: not only "no panic inside the decoder", but also round trips of
//! decode and encode, framing compared with a reference, no buffer reserved ahead of the bytes
//! that arrived, a response scanner that gives the same answer however the bytes are split,
//! lexer tokens that cover the input in order. The AFL++ binaries in `fuzz/` call these
//! functions; this crate's tests replay the committed seed corpus and every regression input
//! through them, so the harnesses build and run with the ordinary test suite. See
//! `docs/fuzzing.md`.
#![forbid(unsafe_code)]
// A tool around the proxy (tests, benchmarks, fuzzing): a broken invariant or a failed
// set-up step is reported by panicking, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

pub mod chunks;
pub mod handshake;
pub mod packet;
pub mod params;
pub mod pgwire;
pub mod scanner;
pub mod sqlscan;

/// A fuzz target: its name (the corpus folder) and its body.
pub struct Target {
    /// Name, as used by `fuzz/` and the corpus folders.
    pub name: &'static str,
    /// The harness body: panics when an invariant breaks.
    pub run: fn(&[u8]),
}

/// Every target.
pub const TARGETS: &[Target] = &[
    Target {
        name: "packet",
        run: packet::run,
    },
    Target {
        name: "handshake",
        run: handshake::run,
    },
    Target {
        name: "params",
        run: params::run,
    },
    Target {
        name: "scanner",
        run: scanner::run,
    },
    Target {
        name: "sqlscan",
        run: sqlscan::run,
    },
    Target {
        name: "pgwire",
        run: pgwire::run,
    },
];

/// The target called `name`.
pub fn target(name: &str) -> Option<&'static Target> {
    TARGETS.iter().find(|t| t.name == name)
}
