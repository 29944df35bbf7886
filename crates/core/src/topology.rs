//! The running topology: hostgroups with their servers and pools, and the router.

use crate::hostgroup::{Hostgroup, PoolSettings};
use crate::router::Router;
use crate::server::Server;
use sluice_config::Config;
use std::sync::Arc;

/// Hostgroups, servers and routing built from one configuration.
pub struct Topology<C> {
    /// Hostgroups in configuration order.
    pub hostgroups: Vec<Arc<Hostgroup<C>>>,
    /// The router.
    pub router: Router,
    /// Send reads to the writer when no reader is usable.
    pub reads_fallback_to_writer: bool,
}

impl<C> Topology<C> {
    /// Builds hostgroups, servers and the router from a validated config.
    pub fn from_config(cfg: &Config) -> Topology<C> {
        let names = cfg.hostgroup_names();
        let settings = pool_settings(cfg);
        let mut hostgroups = Vec::new();
        for name in &names {
            let servers: Vec<Arc<Server>> = cfg
                .servers
                .iter()
                .filter(|s| s.hostgroup.as_deref() == Some(name.as_str()))
                .map(|s| {
                    let listed_twice = cfg
                        .servers
                        .iter()
                        .filter(|o| o.address == s.address)
                        .count()
                        > 1;
                    let mut server =
                        Server::new(&s.address, name, s.weight, s.max_connections(&cfg.pool));
                    if listed_twice {
                        server.name = Arc::from(format!("{}@{}", s.address, name));
                    }
                    Arc::new(server)
                })
                .collect();
            hostgroups.push(Hostgroup::new(
                name,
                servers,
                cfg.balance_of(name),
                settings.clone(),
            ));
        }
        Topology {
            hostgroups,
            router: Router::new(
                &cfg.proxy.writer_hostgroup,
                &cfg.proxy.reader_hostgroup,
                &cfg.rules,
                &names,
            ),
            reads_fallback_to_writer: cfg.proxy.reads_fallback_to_writer,
        }
    }

    /// A hostgroup by name.
    pub fn hostgroup(&self, name: &str) -> Option<&Arc<Hostgroup<C>>> {
        self.hostgroups.iter().find(|h| &*h.name == name)
    }

    /// Every server of every hostgroup.
    pub fn servers(&self) -> Vec<Arc<Server>> {
        self.hostgroups.iter().flat_map(|h| h.servers()).collect()
    }
}

/// Pool settings from the `[pool]` section.
pub fn pool_settings(cfg: &Config) -> PoolSettings {
    PoolSettings {
        queue_timeout: cfg.pool.queue_timeout.get(),
        queue_limit: cfg.pool.queue_limit as usize,
        connect_timeout: cfg.pool.connect_timeout.get(),
        retry_after: cfg.pool.retry_after.get(),
        idle_timeout: cfg.pool.idle_timeout.get(),
        max_connecting: cfg.pool.max_connecting,
    }
}
