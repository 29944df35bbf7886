//! What every session of every protocol shares: the configuration in force, users, login
//! throttling and connection-phase budgets, the session registry, counters, statement
//! digests, TLS, and the memory budget for large requests.

use crate::errors::StartError;
use crate::registry::Registry;
use crate::stats::ProcessStats;
use crate::tls::BackendTls;
use crate::users::Users;
use arc_swap::ArcSwap;
use sluice_config::Config;
use sluice_core::connecting::ConnectingGate;
use sluice_core::login_throttle::{LoginThrottle, ThrottleSettings};
use sluice_core::{DigestTable, MemoryBudget};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::{Arc, OnceLock};

/// The state shared by the process and its front ends.
pub struct Runtime {
    /// The configuration the process started with.
    pub config: Config,
    /// Users.
    pub users: Arc<ArcSwap<Users>>,
    /// Failed logins per client address (`[login]`).
    pub throttle: LoginThrottle,
    /// The connection-phase budgets of every listener group.
    login_gates: parking_lot::Mutex<Vec<Arc<ConnectingGate>>>,
    /// Live sessions of every protocol.
    pub sessions: Registry,
    /// Counters.
    pub stats: ProcessStats,
    /// Statistics per statement shape.
    pub digests: DigestTable,
    /// TLS for clients that ask for it (replaced on reload: certificates are re-read).
    pub tls: ArcSwap<Option<tokio_rustls::TlsAcceptor>>,
    /// TLS to servers (`[pool] tls`), verified against `[pool] tls_ca`.
    pub backend_tls: Option<BackendTls>,
    /// Bytes of large client requests all sessions may hold at once
    /// (`[proxy] max_request_memory`).
    pub request_memory: Arc<MemoryBudget>,
    /// The configuration file's content as last applied (at start or by a reload).
    pub loaded: ArcSwap<Config>,
    /// The configuration running now: `loaded`, with servers added or removed over the
    /// admin API. Each topology's server list is in its order.
    pub effective: ArcSwap<Config>,
    /// The configuration file, when the process was started from one (for reloads).
    pub config_path: OnceLock<std::path::PathBuf>,
}

/// The TLS acceptor for `[proxy] tls_cert` / `tls_key`, if configured.
pub fn tls_acceptor(cfg: &Config) -> Result<Option<tokio_rustls::TlsAcceptor>, String> {
    match (&cfg.proxy.tls_cert, &cfg.proxy.tls_key) {
        (Some(c), Some(k)) => {
            crate::tls::acceptor(std::path::Path::new(c), std::path::Path::new(k)).map(Some)
        }
        _ => Ok(None),
    }
}

impl Runtime {
    /// The shared state for a validated configuration.
    pub fn new(config: Config) -> Result<Arc<Runtime>, StartError> {
        let users = Arc::new(ArcSwap::from_pointee(Users::from_config(&config.users)));
        let backend_tls = match (&config.pool.tls, &config.pool.tls_ca) {
            (true, Some(ca)) => {
                Some(BackendTls::from_ca_file(std::path::Path::new(ca)).map_err(StartError::Tls)?)
            }
            _ => None,
        };
        let digests = DigestTable::new(if config.digests.enabled {
            config.digests.max_entries as usize
        } else {
            0
        });
        let tls = ArcSwap::from_pointee(tls_acceptor(&config).map_err(StartError::Tls)?);
        let request_memory = MemoryBudget::configured(config.proxy.max_request_memory);
        Ok(Arc::new(Runtime {
            throttle: LoginThrottle::new(ThrottleSettings::from_config(&config.login)),
            login_gates: Default::default(),
            users,
            sessions: Registry::new(),
            stats: ProcessStats::default(),
            digests,
            tls,
            backend_tls,
            request_memory,
            loaded: ArcSwap::from_pointee(config.clone()),
            effective: ArcSwap::from_pointee(config.clone()),
            config_path: OnceLock::new(),
            config,
        }))
    }

    /// Registers a listener group's connection-phase budget (a reload of `[login]` resizes
    /// it).
    pub fn add_login_gate(&self, gate: Arc<ConnectingGate>) {
        self.login_gates.lock().push(gate);
    }

    /// The admission of a protocol's client listeners: `[proxy] max_client_connections`
    /// logged-in clients, and the `[login]` connection-phase budget (registered, so that a
    /// reload resizes it). `too_many` is what a client over the limit is told.
    pub fn client_admission(&self, too_many: &'static str) -> Arc<crate::admission::Admission> {
        let max = self.config.proxy.max_client_connections;
        let admission = Arc::new(crate::admission::Admission::new(
            max as usize,
            self.config.login.connecting_budget(max),
            too_many,
        ));
        self.add_login_gate(admission.connecting.clone());
        admission
    }

    /// Counts a refused client.
    pub fn refused(&self) {
        self.stats.clients_refused.fetch_add(1, Relaxed);
    }

    /// Applies what a reload changes in the shared state (TLS was checked and is given);
    /// what changed.
    pub(crate) fn apply(
        &self,
        old: &Config,
        new: &Config,
        tls: Option<tokio_rustls::TlsAcceptor>,
    ) -> Vec<String> {
        let mut changes = Vec::new();
        if tls.is_some() || self.tls.load().is_some() {
            changes.push(if tls.is_some() {
                "TLS certificate (re)loaded".into()
            } else {
                "TLS off".into()
            });
        }
        self.tls.store(Arc::new(tls));
        if old.login != new.login {
            self.throttle
                .set_settings(ThrottleSettings::from_config(&new.login));
            let budget = new
                .login
                .connecting_budget(new.proxy.max_client_connections);
            for gate in self.login_gates.lock().iter() {
                gate.set_capacity(budget);
            }
            changes.push("[login] settings".into());
        }
        if old.proxy.max_request_memory != new.proxy.max_request_memory {
            self.request_memory
                .set_configured(new.proxy.max_request_memory);
            changes.push(format!(
                "[proxy] max_request_memory {}",
                new.proxy.max_request_memory
            ));
        }
        if old.users != new.users {
            let users = self.users.load().reloaded(&new.users);
            self.users.store(Arc::new(users));
            changes.push(format!("users: {} configured", new.users.len()));
        }
        changes
    }
}
