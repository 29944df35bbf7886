//! What a protocol front end provides the runtime: its session handler, its topology (pools
//! of its own connection type, seen through [`Cluster`]), its monitor, how it starts, and what
//! a reload changes for it. The MySQL crate implements it; a PostgreSQL crate adds a sibling.

use crate::errors::{ReloadError, StartError};
use crate::listener::Handler;
use sluice_config::Config;
use sluice_core::{Cluster, Protocol};
use sluice_monitor::Monitor;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// A boxed future, for the trait's async methods.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What a started front end hands back.
pub struct Started {
    /// Serves the clients of every listener that speaks its protocol.
    pub handler: Arc<dyn Handler>,
    /// Listeners of its own (for example an admin port in its protocol): name and address.
    pub own_listeners: Vec<(&'static str, SocketAddr)>,
    /// Its background tasks (they end on shutdown).
    pub tasks: Vec<JoinHandle<()>>,
}

/// A protocol front end.
pub trait Frontend: Send + Sync + 'static {
    /// The protocol its clients and servers speak.
    fn protocol(&self) -> Protocol;

    /// Its servers, hostgroups and pools.
    fn cluster(&self) -> Arc<dyn Cluster>;

    /// Its monitor, unless `[monitor] enabled = false`.
    fn monitor(&self) -> Option<&Arc<Monitor>>;

    /// Starts what must run before clients are accepted (the monitor's first round, learning
    /// the servers) and its own listeners; runs until `shutdown` turns true.
    fn start(
        self: Arc<Self>,
        shutdown: watch::Receiver<bool>,
    ) -> BoxFuture<'static, Result<Started, StartError>>;

    /// Refuses a reload this front end cannot apply (nothing has changed yet).
    fn check_reload(&self, _old: &Config, _new: &Config) -> Result<(), ReloadError> {
        Ok(())
    }

    /// Applies its part of a reload after the runtime's (users, TLS, listeners, topology);
    /// what changed.
    fn apply_reload(&self, old: &Config, new: &Config) -> Vec<String>;
}
