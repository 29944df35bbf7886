//! The running topology: hostgroups with their servers and pools, and the router.

use crate::hostgroup::{Hostgroup, PoolSettings};
use crate::router::Router;
use crate::server::{Role, Server};
use arc_swap::ArcSwap;
use sluice_config::Config;
use sluice_config::ServerConfig;
use std::sync::{Arc, Weak};

/// Hostgroup name shown for a managed server the monitor has not placed yet.
pub const UNASSIGNED: &str = "(unassigned)";

/// Hostgroups, servers and routing built from one configuration.
pub struct Topology<C> {
    /// Hostgroups in configuration order (replaced whole when a reload adds or removes one).
    groups: ArcSwap<Vec<Arc<Hostgroup<C>>>>,
    /// Every configured server, in configuration order (replaced whole when a reload adds or
    /// removes servers).
    servers: ArcSwap<Vec<Arc<Server>>>,
    /// The router.
    pub router: Router,
    /// Send reads to the writer when no reader is usable.
    pub reads_fallback_to_writer: bool,
    /// Hostgroups a reload removed, while sessions still hold their connections: one added
    /// again by the same name is the same hostgroup, so its servers' limits count the
    /// connections still lent.
    retired: parking_lot::Mutex<Vec<Weak<Hostgroup<C>>>>,
}

/// `lease` if `alive` finds its connection open; otherwise the connection is discarded (its
/// server closed it while it was idle) and `None` says to take another.
fn kept_if_alive<C>(
    mut lease: crate::hostgroup::Lease<C>,
    alive: &impl Fn(&C) -> bool,
) -> Option<crate::hostgroup::Lease<C>> {
    if alive(lease.conn_ref()) {
        return Some(lease);
    }
    tracing::debug!(server = %lease.server().name, "pooled connection unfit (closed by its server, or past max_lifetime); discarded");
    lease.discard();
    None
}

impl<C> Topology<C> {
    /// Builds hostgroups, servers and the router from a validated config. Servers without a
    /// hostgroup (and, with failover on, the writer and reader servers) are *managed*: the
    /// monitor places them in the writer or reader hostgroup by their role.
    pub fn from_config(cfg: &Config) -> Topology<C> {
        let names = cfg.hostgroup_names();
        let settings = pool_settings(cfg);
        let all: Vec<Arc<Server>> = cfg
            .servers
            .iter()
            .map(|s| Arc::new(build_server(cfg, s)))
            .collect();
        let hostgroups = names
            .iter()
            .map(|name| {
                let members = cfg
                    .servers
                    .iter()
                    .zip(&all)
                    .filter(|(s, _)| s.hostgroup.as_deref() == Some(name.as_str()))
                    .map(|(_, server)| server.clone())
                    .collect();
                Hostgroup::new(name, members, cfg.balance_of(name), settings.clone())
            })
            .collect();
        Topology {
            groups: ArcSwap::from_pointee(hostgroups),
            servers: ArcSwap::from_pointee(all),
            router: Router::new(
                &cfg.proxy.writer_hostgroup,
                &cfg.proxy.reader_hostgroup,
                &cfg.rules,
                &names,
            ),
            reads_fallback_to_writer: cfg.proxy.reads_fallback_to_writer,
            retired: Default::default(),
        }
    }

    /// A hostgroup by name.
    pub fn hostgroup(&self, name: &str) -> Option<Arc<Hostgroup<C>>> {
        self.groups
            .load()
            .iter()
            .find(|h| &*h.name == name)
            .cloned()
    }

    /// Every hostgroup, in configuration order.
    pub fn hostgroups(&self) -> Arc<Vec<Arc<Hostgroup<C>>>> {
        self.groups.load_full()
    }

    /// Every configured server, in configuration order.
    pub fn all(&self) -> Arc<Vec<Arc<Server>>> {
        self.servers.load_full()
    }

    /// Every configured server (a copy of the list).
    pub fn servers(&self) -> Vec<Arc<Server>> {
        self.servers.load().to_vec()
    }

    /// The writer hostgroup.
    pub fn writer(&self) -> Option<Arc<Hostgroup<C>>> {
        self.hostgroup(&self.router.writer)
    }

    /// The reader hostgroup.
    pub fn reader(&self) -> Option<Arc<Hostgroup<C>>> {
        self.hostgroup(&self.router.reader)
    }

    /// Places a managed server by its role: a primary in the writer hostgroup, a replica in
    /// the reader hostgroup, anything else in neither.
    pub fn place(&self, server: &Arc<Server>, role: Role) {
        let (w, r) = (self.writer(), self.reader());
        let in_writer = role == Role::Primary;
        let in_reader = role == Role::Replica;
        if let Some(w) = w {
            if in_writer {
                w.add_server(server.clone());
            } else {
                w.remove_server(server);
            }
        }
        if let Some(r) = r {
            if in_reader {
                r.add_server(server.clone());
            } else {
                r.remove_server(server);
            }
        }
        let name = match role {
            Role::Primary => self.router.writer.clone(),
            Role::Replica => self.router.reader.clone(),
            _ => Arc::from(UNASSIGNED),
        };
        server.set_hostgroup(&name);
    }

    /// Lends a connection for a routing decision: from its hostgroup, or, for a read when no
    /// reader is usable and `reads_fallback_to_writer` is on, from the writer (never for a
    /// listener pinned to a hostgroup). A pooled connection `alive` finds closed by its
    /// server is discarded and another taken.
    pub async fn lease_for<K>(
        &self,
        decision: &crate::router::Decision,
        key: &crate::hostgroup::PoolKey,
        connector: &Arc<K>,
        alive: impl Fn(&C) -> bool,
    ) -> Result<crate::hostgroup::Lease<C>, crate::error::AcquireError>
    where
        K: crate::hostgroup::Connector<C> + 'static,
        C: Send + 'static,
    {
        use crate::error::AcquireError;
        let acquire_in = |name: Arc<str>| {
            let hg = self.hostgroup(&name);
            let alive = &alive;
            async move {
                let Some(hg) = hg else {
                    return Err(AcquireError::UnknownHostgroup(name.to_string()));
                };
                for _ in 0..1000 {
                    if let Some(lease) = kept_if_alive(hg.acquire(key, connector).await?, alive) {
                        return Ok(lease);
                    }
                }
                hg.acquire(key, connector).await
            }
        };
        let mut result = acquire_in(decision.hostgroup.clone()).await;
        let fallback = decision.reason != crate::router::Reason::Listener
            && self.reads_fallback_to_writer
            && decision.hostgroup == self.router.reader
            && decision.hostgroup != self.router.writer;
        if fallback
            && matches!(
                result,
                Err(AcquireError::NoServer { .. } | AcquireError::UnknownHostgroup(_))
            )
        {
            self.router
                .stats
                .read_fallback
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            result = acquire_in(self.router.writer.clone()).await;
        }
        result
    }

    /// [`Topology::lease_for`]'s usual case without a future: an idle, `alive` connection in
    /// the decided hostgroup, lent at once; `None` (nothing changed, a dead connection
    /// discarded) when `lease_for` must do the rest (wait, open, fall back to the writer).
    pub fn try_lease_for(
        &self,
        decision: &crate::router::Decision,
        key: &crate::hostgroup::PoolKey,
        alive: impl Fn(&C) -> bool,
    ) -> Option<crate::hostgroup::Lease<C>>
    where
        C: Send + 'static,
    {
        // Borrowed where it is listed (no count of it goes up and down for every lease).
        let groups = self.groups.load();
        let group = groups.iter().find(|h| *h.name == *decision.hostgroup)?;
        kept_if_alive(group.try_acquire(key)?, &alive)
    }

    /// The managed server in the writer hostgroup, if any.
    pub fn primary(&self) -> Option<Arc<Server>> {
        let w = self.writer()?;
        w.servers().into_iter().find(|s| s.managed)
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

/// The name a configured server entry goes by (in the admin API, the metrics, the logs): its
/// address, or `address@hostgroup` when the address has entries in several hostgroups. (Given
/// when the entry is made: an entry kept across a reload keeps its name.)
fn server_name(cfg: &Config, s: &ServerConfig) -> String {
    match cfg
        .servers
        .iter()
        .filter(|o| o.address == s.address)
        .count()
    {
        1 => s.address.clone(),
        _ => format!(
            "{}@{}",
            s.address,
            s.hostgroup.as_deref().unwrap_or(UNASSIGNED)
        ),
    }
}

/// A server as configured (not yet in any hostgroup).
fn build_server(cfg: &Config, s: &ServerConfig) -> Server {
    let hostgroup = s.hostgroup.as_deref().unwrap_or(UNASSIGNED);
    let mut server = Server::new(
        &s.address,
        hostgroup,
        s.weight,
        s.max_connections(&cfg.pool),
    );
    server.name = Arc::from(server_name(cfg, s));
    server.managed = cfg.is_managed(s);
    server.discovered = s.discovered.as_deref().map(Arc::from);
    server.set_max_lag(cfg.max_lag_of(s));
    server.set_max_lag_bytes(cfg.max_lag_bytes_of(s));
    server
}

/// What identifies a configured server across reloads: its address and its configured
/// hostgroup (none for servers the monitor places).
fn server_key(s: &ServerConfig) -> (&str, Option<&str>) {
    (s.address.as_str(), s.hostgroup.as_deref())
}

/// Why `new` cannot be applied to a proxy running `old` without a restart (empty: it can).
/// Reloadable: users, servers and listeners added or removed, server weights, connection
/// limits and lag limits, hostgroup balancing, rules, pool timeouts and limits, monitor and
/// failover timings.
pub fn reload_blockers(old: &Config, new: &Config) -> Vec<String> {
    let mut why = Vec::new();
    let mut differs = |what: &str, same: bool| {
        if !same {
            why.push(what.to_string());
        }
    };
    let proxy = |c: &Config| {
        let mut p = c.proxy.clone();
        (p.tls_cert, p.tls_key) = (None, None); // reloadable
        p.max_request_memory = 0; // reloadable
        p
    };
    differs("[proxy]", proxy(old) == proxy(new));
    let repinned = new.listeners.iter().any(|n| {
        old.listeners.iter().any(|o| {
            o.listen == n.listen && (o.hostgroup != n.hostgroup || o.protocol != n.protocol)
        })
    });
    differs(
        "a listener's hostgroup or protocol (remove it in one reload, add it back in the next)",
        !repinned,
    );

    differs(
        "the protocols servers speak (a front end starts with the process)",
        old.protocols() == new.protocols(),
    );
    differs(
        "[pool] tls or tls_ca",
        (old.pool.tls, &old.pool.tls_ca) == (new.pool.tls, &new.pool.tls_ca),
    );
    differs(
        "[monitor] enabled",
        old.monitor.enabled == new.monitor.enabled,
    );
    differs("[admin]", old.admin == new.admin);
    differs("[digests]", old.digests == new.digests);
    differs("[log]", old.log == new.log);
    let postgres = |c: &Config| {
        let mut p = c.postgres.clone();
        p.max_statement_memory = 0; // reloadable
        p.max_statement_memory_per_session = 0; // reloadable
        p
    };
    differs("[postgres]", postgres(old) == postgres(new));
    why
}

impl<C> Topology<C> {
    /// Applies the reloadable parts of `cfg` to a topology built from `old` (see
    /// [`reload_blockers`]); returns what changed.
    /// Sessions keep running: new statements see the new weights, limits and rules; a
    /// connection limit lowered below the connections open closes the extra ones as they come
    /// back to the pool.
    pub fn apply(&self, old: &Config, cfg: &Config) -> Vec<String> {
        let mut changes = Vec::new();
        let settings = pool_settings(cfg);
        for hg in self.hostgroups().iter() {
            if hg.settings() != settings {
                hg.set_settings(settings.clone());
                changes.push(format!("hostgroup {}: pool settings", hg.name));
            }
            let balance = cfg.balance_of(&hg.name);
            if hg.balance() != balance {
                hg.set_balance(balance);
                changes.push(format!("hostgroup {}: balance {balance:?}", hg.name));
            }
        }
        // Hostgroups added and removed (the writer and reader hostgroups always exist).
        let names = cfg.hostgroup_names();
        let groups = self.hostgroups();
        let mut next_groups = Vec::with_capacity(names.len());
        for name in &names {
            match groups.iter().find(|h| *h.name == **name) {
                Some(h) => next_groups.push(h.clone()),
                None => {
                    let balance = cfg.balance_of(name);
                    next_groups.push(self.revive(name, &settings, balance).unwrap_or_else(|| {
                        Hostgroup::new(name, Vec::new(), balance, settings.clone())
                    }));
                    changes.push(format!("hostgroup {name}: added"));
                }
            }
        }
        let removed: Vec<_> = groups
            .iter()
            .filter(|h| !names.iter().any(|n| **n == *h.name))
            .cloned()
            .collect();
        // Until the rules change (below, once new hostgroups have their servers), every
        // hostgroup, old and new, is there: no statement is routed by a rule to a hostgroup
        // that is not (yet, or any more).
        let mut both = next_groups.clone();
        both.extend(removed.iter().cloned());
        self.groups.store(Arc::new(both));
        // Servers added and removed; the others keep their pools and statistics.
        let current = self.all();
        let mut next = Vec::with_capacity(cfg.servers.len());
        for s in &cfg.servers {
            // The running list is in the order of `old`'s servers.
            let existing = old
                .servers
                .iter()
                .position(|o| server_key(o) == server_key(s))
                .and_then(|i| current.get(i));
            match existing {
                Some(srv) => next.push(srv.clone()),
                None => {
                    let srv = Arc::new(build_server(cfg, s));
                    if let Some(hg) = s.hostgroup.as_deref().and_then(|h| self.hostgroup(h)) {
                        hg.add_server(srv.clone());
                    }
                    changes.push(format!(
                        "{}: added{}",
                        srv.name,
                        if srv.managed {
                            " (the monitor places it)"
                        } else {
                            ""
                        }
                    ));
                    next.push(srv);
                }
            }
        }
        for srv in current.iter() {
            if !next.iter().any(|n| Arc::ptr_eq(n, srv)) {
                // No new statements; sessions holding a connection there finish on it.
                srv.set_offline(Some("removed from the configuration".into()));
                for hg in self.hostgroups().iter() {
                    hg.remove_server(srv);
                }
                changes.push(format!("{}: removed", srv.name));
            }
        }
        self.servers.store(Arc::new(next));
        for (s, server) in cfg.servers.iter().zip(self.all().iter()) {
            if server.weight() != s.weight {
                changes.push(format!(
                    "{}: weight {} -> {}",
                    server.name,
                    server.weight(),
                    s.weight
                ));
                server.set_weight(s.weight);
            }
            let lag = cfg.max_lag_of(s);
            if server.max_lag() != lag {
                changes.push(format!(
                    "{}: max_replication_lag {}",
                    server.name,
                    lag.map_or("none".into(), |d| format!("{} s", d.as_secs_f64()))
                ));
                server.set_max_lag(lag);
            }
            let bytes = cfg.max_lag_bytes_of(s);
            if server.max_lag_bytes() != bytes {
                changes.push(format!(
                    "{}: max_replication_lag_bytes {}",
                    server.name,
                    bytes.map_or("none".into(), |b| b.to_string())
                ));
                server.set_max_lag_bytes(bytes);
            }
            let max = s.max_connections(&cfg.pool);
            if server.max_connections() != max {
                changes.push(format!(
                    "{}: max_connections {} -> {max}",
                    server.name,
                    server.max_connections()
                ));
                server.set_max_connections(max);
            }
        }
        if !self.router.has_rules(&cfg.rules) {
            self.router.set_rules(&cfg.rules);
            changes.push(format!("rules: {} in force", cfg.rules.len()));
        }
        self.groups.store(Arc::new(next_groups));
        self.router.set_hostgroups(&names);
        for h in &removed {
            // Statements waiting there (routed before the rules changed) are let go.
            h.set_vacancy_reason(Some(
                "the hostgroup was removed from the configuration".into(),
            ));
            for server in h.servers() {
                h.remove_server(&server);
            }
            let mut retired = self.retired.lock();
            retired.retain(|w| w.strong_count() > 0);
            retired.push(Arc::downgrade(h));
            changes.push(format!("hostgroup {}: removed", h.name));
        }
        changes
    }

    /// The hostgroup named `name` that a reload removed, if sessions still hold it (its
    /// connections lent): in service again, with the settings in force.
    fn revive(
        &self,
        name: &str,
        settings: &PoolSettings,
        balance: crate::balance::Balance,
    ) -> Option<Arc<Hostgroup<C>>> {
        let mut retired = self.retired.lock();
        retired.retain(|w| w.strong_count() > 0);
        let pos = retired
            .iter()
            .position(|w| w.upgrade().is_some_and(|h| *h.name == *name))?;
        let h = retired.swap_remove(pos).upgrade()?;
        h.set_vacancy_reason(None);
        h.set_settings(settings.clone());
        h.set_balance(balance);
        Some(h)
    }
}

#[cfg(test)]
mod reload_tests {
    use super::reload_blockers;
    use sluice_config::Config;

    fn config(postgres: &str) -> Config {
        let text = format!(
            "[[listeners]]\nlisten = \"127.0.0.1:6432\"\nprotocol = \"postgres\"\n\n[[users]]\nname = \"app\"\npassword = \"app\"\n\n[[servers]]\naddress = \"127.0.0.1:5432\"\nprotocol = \"postgres\"\nhostgroup = \"writer\"\n\n[postgres]\n{postgres}\n"
        );
        Config::from_toml(&text).unwrap()
    }

    #[test]
    fn a_reload_applies_the_statement_budget_but_not_read_only_functions() {
        let old = config("read_only_functions = [\"f\"]");
        let budget = config("read_only_functions = [\"f\"]\nmax_statement_memory = 1048576");
        assert!(reload_blockers(&old, &budget).is_empty());
        let share =
            config("read_only_functions = [\"f\"]\nmax_statement_memory_per_session = 4096");
        assert!(reload_blockers(&old, &share).is_empty());
        let functions = config("read_only_functions = [\"f\", \"g\"]");
        assert_eq!(reload_blockers(&old, &functions), ["[postgres]"]);
    }
}
