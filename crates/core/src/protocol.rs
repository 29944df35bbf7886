//! Which wire protocol a listener, a server or a session speaks (defined with the
//! configuration, which names it).

pub use sluice_config::Protocol;
