//! The sluice process, whatever protocol its clients speak: the configuration in force and its
//! hot reload, listeners, the session registry, users, TLS, the buffer shelf, idle-connection
//! upkeep, graceful shutdown and the process statistics. Protocol front ends (MySQL today)
//! plug in through [`Frontend`]; nothing here knows a wire format.
#![forbid(unsafe_code)]

pub mod admission;
pub mod buffers;
mod discovery;
pub mod errors;
pub mod frontend;
pub mod intern;
pub mod listener;
pub mod off_loop;
pub mod process;
pub mod registry;
pub mod runtime;
pub mod stats;
pub mod tables;
pub mod tls;
pub mod users;

/// The maps and sets a login or a connection looks up or changes (users, interned values,
/// the session registry): foldhash, seeded per process, not SipHash.
pub(crate) type HashMap<K, V> = std::collections::HashMap<K, V, foldhash::quality::RandomState>;
/// See [`HashMap`].
pub(crate) type HashSet<T> = std::collections::HashSet<T, foldhash::quality::RandomState>;

pub use errors::{ReloadError, StartError};
pub use frontend::{Frontend, Started};
pub use process::{Process, Running};
pub use registry::{Registry, SessionHandle, SessionKey};
pub use runtime::Runtime;
pub use stats::ProcessStats;
pub use users::{User, Users};
