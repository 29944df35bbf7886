//! The protocol-agnostic core of sluice: servers and their health, hostgroups with pooled
//! connections and a fair wait queue, balancing and query routing.
//!
//! The MySQL crate (and later PostgreSQL) plugs in a connection type and a [`Connector`];
//! everything here is shared.
#![forbid(unsafe_code)]

pub mod balance;
pub mod budget;
pub mod cancel_gate;
pub mod cluster;
pub mod connecting;
pub mod digest;
mod error;
pub mod failed_watch;
pub mod failure;
pub mod hostgroup;
pub mod lifetime;
pub mod login_throttle;
pub mod pool_growth;
mod protocol;
mod read_timeout;
pub mod router;
mod server;
pub mod stats;
pub mod topology;

pub use budget::{Charge, MemoryBudget, OverBudget, Share, StatementMemory};
pub use cancel_gate::{CancelGate, CancelInFlight, CancelTicket};
pub use cluster::{Cluster, HostgroupView};
pub use digest::{DigestKey, DigestSample, DigestStats, DigestTable};
pub use error::{AcquireError, ConnectError};
pub use failed_watch::{unless_failed, FailedWatch};
pub use failure::{ClientError, ErrorKind, Failure, Seen, Side, StmtError};
pub use hostgroup::{Connector, Hostgroup, Lease, PoolKey, PoolSettings, PoolStats};
pub use lifetime::{Aging, Lifetime};
pub use protocol::Protocol;
pub use read_timeout::{expiry, timed_out, ReadTimeout};
pub use server::{Health, Observed, Role, Server, ServerStats};
pub use stats::{HistogramSnapshot, LatencyHistogram, RouteStats};
pub use topology::Topology;
