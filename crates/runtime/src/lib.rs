//! The sluice process, whatever protocol its clients speak: the configuration in force and its
//! hot reload, listeners, the session registry, users, TLS, the buffer shelf, idle-connection
//! upkeep, graceful shutdown and the process statistics. Protocol front ends (MySQL today)
//! plug in through [`Frontend`]; nothing here knows a wire format.
#![forbid(unsafe_code)]

pub mod buffers;
pub mod registry;
pub mod tls;
pub mod users;

pub use registry::{Registry, SessionHandle};
pub use users::{User, Users};
