//! Applying a changed configuration to the running proxy: reloads of the file, and server
//! changes made over the admin API.

use super::{tls_acceptor, Proxy};
use sluice_config::Config;
use sluice_core::listener::{self, ListenerInfo};
use sluice_monitor::Settings;
use std::sync::Arc;

impl Proxy {
    /// Applies a changed configuration without a restart: users, servers and listeners added
    /// or removed, server weights and connection limits, hostgroup balancing, query rules,
    /// pool settings. Client sessions
    /// and their transactions carry on. A configuration that changes anything else is
    /// refused whole, with the reason, and the running one stays.
    pub async fn reload(&self, new: Config) -> Result<Vec<String>, String> {
        let _one = self.reloading.lock().await;
        let changes = self.apply_config(new.clone())?;
        self.loaded.store(Arc::new(new));
        tracing::info!(changes = %changes.join("; "), "configuration reloaded");
        Ok(changes)
    }

    /// Adds or removes servers at runtime (the admin API): the running configuration changes,
    /// the file does not — the difference shows as drift until written back, and the next
    /// reload makes the running configuration the file's again. `edit` changes a copy of the
    /// running configuration, which must still validate.
    pub async fn change_servers(
        &self,
        edit: impl FnOnce(&mut Config) -> Result<(), String>,
    ) -> Result<Vec<String>, String> {
        let _one = self.reloading.lock().await;
        let mut new = (*self.effective.load_full()).clone();
        edit(&mut new)?;
        let new = Config::from_toml(&new.to_toml()).map_err(|e| format!("not applied: {e}"))?;
        let changes = self.apply_config(new)?;
        tracing::info!(changes = %changes.join("; "), "servers changed over the admin API");
        Ok(changes)
    }

    /// Applies `new` over the running configuration (see [`Proxy::reload`]).
    fn apply_config(&self, new: Config) -> Result<Vec<String>, String> {
        let old = self.effective.load_full();
        let blockers = sluice_core::topology::reload_blockers(&old, &new);
        if !blockers.is_empty() {
            return Err(format!(
                "not applied: changing {} needs a restart",
                blockers.join(", ")
            ));
        }
        // The server taking the writes stays until a switchover has moved them elsewhere.
        let writer = &self.config.proxy.writer_hostgroup;
        for (o, srv) in old.servers.iter().zip(self.topology.all().iter()) {
            let kept = new
                .servers
                .iter()
                .any(|n| n.address == o.address && n.hostgroup == o.hostgroup);
            if !kept && *srv.hostgroup() == **writer {
                return Err(format!(
                    "not applied: {} takes the writes (hostgroup {writer}); switch over to another server before removing it",
                    srv.name
                ));
            }
        }
        // Certificates are re-read (rotation), even when their paths did not change; like new
        // listeners, before anything changes.
        let tls = tls_acceptor(&new).map_err(|e| format!("not applied: TLS: {e}"))?;
        // New listeners are bound first: if one cannot be, nothing changes.
        let mut opened = Vec::new();
        if let Some(serving) = self.serving.get() {
            let slots = self.extra_listeners.lock();
            for spec in &new.listeners {
                if slots.iter().any(|s| s.listen == spec.listen) {
                    continue;
                }
                let l = listener::bind(&spec.listen, new.proxy.reuse_port)
                    .map_err(|e| format!("not applied: cannot listen on {}: {e}", spec.listen))?;
                let info = Arc::new(ListenerInfo {
                    addr: l
                        .local_addr()
                        .map_err(|e| format!("not applied: {}: {e}", spec.listen))?,
                    hostgroup: spec.hostgroup.as_deref().map(Arc::from),
                });
                opened.push((l, info, spec.clone(), serving));
            }
        }
        let mut changes = self.topology.apply(&old, &new);
        {
            let mut slots = self.extra_listeners.lock();
            // Listeners gone from the file stop accepting; their clients carry on.
            slots.retain(|s| {
                let keep = new.listeners.iter().any(|l| l.listen == s.listen);
                if !keep {
                    let _ = s.stop.send(true);
                    tracing::info!(listen = %s.addr, "listener removed");
                    changes.push(format!("listener {} removed", s.listen));
                }
                keep
            });
            for (l, info, spec, serving) in opened {
                tracing::info!(listen = %info.addr, hostgroup = info.hostgroup.as_deref().unwrap_or("(read/write split)"), "listening");
                changes.push(format!("listener {} added", spec.listen));
                slots.push(serving.spawn(l, info, spec.listen));
            }
        }
        if tls.is_some() || self.tls.load().is_some() {
            changes.push(if tls.is_some() {
                "TLS certificate (re)loaded".into()
            } else {
                "TLS off".into()
            });
        }
        self.tls.store(Arc::new(tls));
        if let Some(m) = &self.monitor {
            let creds = |c: &Config| (c.monitor_credentials(), c.replication_credentials());
            if creds(&old) != creds(&new) {
                let ((user, password), replication) = creds(&new);
                if let Some(agent) = &self.monitor_agent {
                    agent.set_credentials(user, password, replication);
                }
                m.recheck_privileges();
                changes.push("monitor credentials".into());
            }
            let settings = Settings::from_config(&new);
            if m.settings() != settings {
                m.set_settings(settings);
                changes.push("monitor and failover settings".into());
            }
        }
        if old.login != new.login {
            self.apply_login(&new);
            changes.push("[login] settings".into());
        }
        if old.pool.read_timeout != new.pool.read_timeout {
            self.connector.read_timeout.set(new.pool.read_timeout.get());
            changes.push(format!("[pool] read_timeout {}", new.pool.read_timeout));
        }
        if old.proxy.max_request_memory != new.proxy.max_request_memory {
            let limit = usize::try_from(new.proxy.max_request_memory).unwrap_or(usize::MAX);
            self.request_memory.set_limit(limit);
            changes.push(format!(
                "[proxy] max_request_memory {}",
                new.proxy.max_request_memory
            ));
        }
        if old.users != new.users {
            let users = self.users.load().reloaded(&new.users);
            self.users.store(Arc::new(users));
            self.schemas.clear();
            changes.push(format!("users: {} configured", new.users.len()));
        }
        self.effective.store(Arc::new(new));
        Ok(changes)
    }

    /// Reads, validates and applies the configuration file the proxy was started from.
    pub async fn reload_from_file(&self) -> Result<Vec<String>, String> {
        let path = self
            .config_path
            .get()
            .ok_or("the proxy was not started from a configuration file")?;
        let new = Config::load(path).map_err(|e| format!("{}: {e}", path.display()))?;
        self.reload(new).await
    }
}
