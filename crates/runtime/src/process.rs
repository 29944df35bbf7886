//! The running process: the runtime's shared state and its protocol front ends. It binds the
//! listeners and hands each accepted client to the front end of the listener's protocol,
//! keeps the pools tidy, applies reloads, and shuts everything down.

use crate::errors::{ReloadError, StartError};
use crate::frontend::Frontend;
use crate::listener::{self, Handler, ListenerInfo};
use crate::runtime::{tls_acceptor, Runtime};
use sluice_config::{Config, ListenerConfig};
use sluice_core::Protocol;
use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// The runtime and its front ends.
pub struct Process {
    /// The shared state.
    pub runtime: Arc<Runtime>,
    frontends: Vec<Arc<dyn Frontend>>,
    /// Serialises reloads and server changes.
    reloading: tokio::sync::Mutex<()>,
    /// What new listeners need (set when the process starts).
    serving: OnceLock<Serving>,
    /// The `[[listeners]]` being served now (a reload adds and removes them).
    extra_listeners: parking_lot::Mutex<Vec<ListenerSlot>>,
}

/// A started process.
pub struct Running {
    /// The process.
    pub process: Arc<Process>,
    /// Bound addresses: the main listener first, then `[[listeners]]` in order.
    pub addrs: Vec<SocketAddr>,
    /// The front ends' own listeners (for example MySQL's admin SQL port), by name.
    pub own_listeners: Vec<(&'static str, SocketAddr)>,
    shutdown: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

impl Running {
    /// Stops accepting clients and background work. Sessions in progress end with their
    /// clients.
    pub fn shutdown(&self) {
        let _ = self.shutdown.send(true);
    }

    /// A receiver that turns true when the process shuts down (for companion tasks).
    pub fn shutdown_signal(&self) -> watch::Receiver<bool> {
        self.shutdown.subscribe()
    }

    /// The address of a front end's own listener, by name.
    pub fn own_listener(&self, name: &str) -> Option<SocketAddr> {
        self.own_listeners
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, a)| *a)
    }

    /// Waits for the listeners to stop.
    pub async fn wait(mut self) {
        for t in std::mem::take(&mut self.tasks) {
            let _ = t.await;
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.shutdown.send(true);
    }
}

impl Process {
    /// The process over `runtime`, serving through `frontends` (one per protocol).
    pub fn new(runtime: Arc<Runtime>, frontends: Vec<Arc<dyn Frontend>>) -> Arc<Process> {
        Arc::new(Process {
            runtime,
            frontends,
            reloading: tokio::sync::Mutex::new(()),
            serving: OnceLock::new(),
            extra_listeners: parking_lot::Mutex::new(Vec::new()),
        })
    }

    /// Every front end.
    pub fn frontends(&self) -> &[Arc<dyn Frontend>] {
        &self.frontends
    }

    /// Every front end's topology, with its protocol (what the admin tables read).
    pub fn clusters(&self) -> Vec<crate::tables::ClusterOf> {
        self.frontends
            .iter()
            .map(|f| (f.protocol(), f.cluster()))
            .collect()
    }

    /// The front end of `protocol`, if the process serves it.
    pub fn frontend(&self, protocol: Protocol) -> Option<&Arc<dyn Frontend>> {
        self.frontends.iter().find(|f| f.protocol() == protocol)
    }

    /// Binds every listener and starts serving. Port 0 in a listen address picks a free port;
    /// [`Running::addrs`] tells which.
    pub async fn start(self: &Arc<Self>) -> Result<Running, StartError> {
        let config = &self.runtime.config;
        let (tx, rx) = watch::channel(false);
        // The main listener (MySQL, read/write split) if configured, then `[[listeners]]`.
        let main = config
            .proxy
            .listen
            .iter()
            .map(|l| (l.clone(), None, Protocol::Mysql));
        let extra = config.listeners.iter().map(|l| {
            let hostgroup = l.hostgroup.as_deref().map(Arc::from);
            (l.listen.clone(), hostgroup, l.protocol)
        });
        let specs: Vec<(String, Option<Arc<str>>, Protocol)> = main.chain(extra).collect();
        let has_main = config.proxy.listen.is_some();
        // Every listener is bound before anything starts: a port in use fails the start.
        let mut bound = Vec::new();
        for (addr, hostgroup, protocol) in specs {
            let (l, info) = bind(&addr, hostgroup, config.proxy.reuse_port).map_err(|error| {
                StartError::Bind {
                    addr: addr.clone(),
                    error,
                }
            })?;
            bound.push((l, info, protocol));
        }
        let mut tasks = Vec::new();
        let mut handlers = Vec::new();
        let mut own_listeners = Vec::new();
        for f in &self.frontends {
            let started = f.clone().start(rx.clone()).await?;
            handlers.push((f.protocol(), started.handler));
            own_listeners.extend(started.own_listeners);
            tasks.extend(started.tasks);
        }
        let serving = Serving {
            handlers,
            shutdown: rx.clone(),
        };
        let mut addrs = Vec::new();
        for (i, (l, info, protocol)) in bound.into_iter().enumerate() {
            addrs.push(info.addr);
            tracing::info!(listen = %info.addr, %protocol, hostgroup = info.hostgroup.as_deref().unwrap_or("(read/write split)"), "listening");
            let Some(handler) = serving.handler(protocol) else {
                tracing::warn!(listen = %info.addr, %protocol, "no front end serves this protocol");
                continue;
            };
            if has_main && i == 0 {
                tasks.push(tokio::spawn(listener::serve(l, info, handler, rx.clone())));
            } else {
                let spec = &config.listeners[i - usize::from(has_main)];
                let slot = serving.spawn(l, info, handler, spec.listen.clone());
                self.extra_listeners.lock().push(slot);
            }
        }
        let _ = self.serving.set(serving);
        tasks.push(tokio::spawn(crate::discovery::run(
            self.clone(),
            rx.clone(),
        )));
        tasks.push(tokio::spawn(self.clone().maintain(rx)));
        Ok(Running {
            process: self.clone(),
            addrs,
            own_listeners,
            shutdown: tx,
            tasks,
        })
    }

    /// Background upkeep: closes idle backend connections past their idle timeout, and
    /// advances the clock `[pool] max_lifetime` is counted on.
    async fn maintain(self: Arc<Self>, mut shutdown: watch::Receiver<bool>) {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                _ = shutdown.changed() => return,
            }
            let now = Instant::now();
            sluice_core::lifetime::tick();
            for f in &self.frontends {
                for (hostgroup, closed) in f.cluster().close_idle(now) {
                    tracing::debug!(%hostgroup, closed, "closed idle backend connections");
                }
            }
        }
    }

    /// Applies a changed configuration without a restart: users, servers and listeners added
    /// or removed, server weights and connection limits, hostgroup balancing, query rules,
    /// pool settings. Client sessions and their transactions carry on. A configuration that
    /// changes anything else is refused whole, with the reason, and the running one stays.
    pub async fn reload(&self, new: Config) -> Result<Vec<String>, ReloadError> {
        let _one = self.reloading.lock().await;
        // Servers discovered at runtime stay while their source does.
        let mut running = new.clone();
        crate::discovery::carry_over(&self.runtime.effective.load_full(), &mut running);
        let changes = self.apply_config(running)?;
        self.runtime.loaded.store(Arc::new(new));
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
    ) -> Result<Vec<String>, ReloadError> {
        let _one = self.reloading.lock().await;
        let mut new = (*self.runtime.effective.load_full()).clone();
        edit(&mut new).map_err(ReloadError::Refused)?;
        let new =
            Config::from_toml(&new.to_toml()).map_err(|e| ReloadError::Invalid(e.to_string()))?;
        let changes = self.apply_config(new)?;
        tracing::info!(changes = %changes.join("; "), "servers changed over the admin API");
        Ok(changes)
    }

    /// Reads, validates and applies the configuration file the process was started from.
    pub async fn reload_from_file(&self) -> Result<Vec<String>, ReloadError> {
        let path = self.runtime.config_path.get().ok_or(ReloadError::NoFile)?;
        let new = Config::load(path).map_err(|error| ReloadError::Load {
            path: path.display().to_string(),
            error,
        })?;
        self.reload(new).await
    }

    /// Applies `new` over the running configuration (see [`Process::reload`]): everything
    /// that can refuse it is checked first, then nothing can fail.
    fn apply_config(&self, new: Config) -> Result<Vec<String>, ReloadError> {
        let old = self.runtime.effective.load_full();
        let blockers = sluice_core::topology::reload_blockers(&old, &new);
        if !blockers.is_empty() {
            return Err(ReloadError::NeedsRestart(blockers));
        }
        // The server taking the writes stays until a switchover has moved them elsewhere.
        let writer = &self.runtime.config.proxy.writer_hostgroup;
        for f in &self.frontends {
            let (old, new) = (
                old.for_protocol(f.protocol()),
                new.for_protocol(f.protocol()),
            );
            for (o, srv) in old.servers.iter().zip(f.cluster().servers().iter()) {
                let kept = new
                    .servers
                    .iter()
                    .any(|n| n.address == o.address && n.hostgroup == o.hostgroup);
                if !kept && *srv.hostgroup() == **writer {
                    return Err(ReloadError::RemovesWriter {
                        server: srv.name.to_string(),
                        hostgroup: writer.to_string(),
                    });
                }
            }
            f.check_reload(&old, &new)?;
        }
        // Certificates are re-read (rotation), even when their paths did not change; like new
        // listeners, before anything changes.
        let tls = tls_acceptor(&new).map_err(ReloadError::Tls)?;
        let opened = self.bind_new_listeners(&new)?;
        let mut changes = Vec::new();
        for f in &self.frontends {
            let (old, new) = (
                old.for_protocol(f.protocol()),
                new.for_protocol(f.protocol()),
            );
            changes.extend(f.cluster().apply(&old, &new));
        }
        self.swap_listeners(&new, opened, &mut changes);
        changes.extend(self.runtime.apply(&old, &new, tls));
        for f in &self.frontends {
            let (old, new) = (
                old.for_protocol(f.protocol()),
                new.for_protocol(f.protocol()),
            );
            changes.extend(f.apply_reload(&old, &new));
        }
        self.runtime.effective.store(Arc::new(new));
        Ok(changes)
    }

    /// Binds the listeners `new` adds: if one cannot be, nothing changes.
    fn bind_new_listeners(
        &self,
        new: &Config,
    ) -> Result<Vec<(TcpListener, Arc<ListenerInfo>, ListenerConfig)>, ReloadError> {
        let mut opened = Vec::new();
        if self.serving.get().is_none() {
            return Ok(opened);
        }
        let slots = self.extra_listeners.lock();
        for spec in &new.listeners {
            if slots.iter().any(|s| s.listen == spec.listen) {
                continue;
            }
            let hostgroup = spec.hostgroup.as_deref().map(Arc::from);
            let (l, info) =
                bind(&spec.listen, hostgroup, new.proxy.reuse_port).map_err(|error| {
                    ReloadError::Listen {
                        addr: spec.listen.clone(),
                        error,
                    }
                })?;
            opened.push((l, info, spec.clone()));
        }
        Ok(opened)
    }

    /// Stops the listeners gone from `new` (their clients carry on) and serves the opened ones.
    fn swap_listeners(
        &self,
        new: &Config,
        opened: Vec<(TcpListener, Arc<ListenerInfo>, ListenerConfig)>,
        changes: &mut Vec<String>,
    ) {
        let Some(serving) = self.serving.get() else {
            return;
        };
        let mut slots = self.extra_listeners.lock();
        slots.retain(|s| {
            let keep = new.listeners.iter().any(|l| l.listen == s.listen);
            if !keep {
                let _ = s.stop.send(true);
                tracing::info!(listen = %s.addr, "listener removed");
                changes.push(format!("listener {} removed", s.listen));
            }
            keep
        });
        for (l, info, spec) in opened {
            let protocol = spec.protocol;
            let Some(handler) = serving.handler(protocol) else {
                continue;
            };
            tracing::info!(listen = %info.addr, %protocol, hostgroup = info.hostgroup.as_deref().unwrap_or("(read/write split)"), "listening");
            changes.push(format!("listener {} added", spec.listen));
            slots.push(serving.spawn(l, info, handler, spec.listen));
        }
    }
}

/// Binds `addr` for clients of `hostgroup` (`None`: read/write split).
fn bind(
    addr: &str,
    hostgroup: Option<Arc<str>>,
    reuse_port: bool,
) -> std::io::Result<(TcpListener, Arc<ListenerInfo>)> {
    let l = listener::bind(addr, reuse_port)?;
    let local = l.local_addr()?;
    Ok((
        l,
        Arc::new(ListenerInfo {
            addr: local,
            hostgroup,
        }),
    ))
}

/// What a listener started after the process needs.
struct Serving {
    handlers: Vec<(Protocol, Arc<dyn Handler>)>,
    shutdown: watch::Receiver<bool>,
}

/// A `[[listeners]]` entry being served.
struct ListenerSlot {
    /// As configured.
    listen: String,
    /// Bound address.
    addr: SocketAddr,
    /// Stops accepting (sessions already accepted carry on).
    stop: watch::Sender<bool>,
}

impl Serving {
    fn handler(&self, protocol: Protocol) -> Option<Arc<dyn Handler>> {
        self.handlers
            .iter()
            .find(|(p, _)| *p == protocol)
            .map(|(_, h)| h.clone())
    }

    /// Serves `l` until it is removed or the process shuts down.
    fn spawn(
        &self,
        l: TcpListener,
        info: Arc<ListenerInfo>,
        handler: Arc<dyn Handler>,
        listen: String,
    ) -> ListenerSlot {
        let (stop, rx) = watch::channel(false);
        let addr = info.addr;
        // The process's shutdown stops it too; the relay ends with the listener.
        let relay = stop.clone();
        let mut global = self.shutdown.clone();
        tokio::spawn(async move {
            tokio::select! {
                _ = async { while !*global.borrow() { if global.changed().await.is_err() { break; } } } => {
                    let _ = relay.send(true);
                }
                _ = relay.closed() => {}
            }
        });
        tokio::spawn(listener::serve(l, info, handler, rx));
        ListenerSlot { listen, addr, stop }
    }
}
