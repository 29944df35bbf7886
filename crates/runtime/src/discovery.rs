//! `[[discovery]]`: servers found at runtime, for both protocols. Every source is looked at
//! every `interval`: a DNS name (every A and AAAA address it resolves to), the replicas the
//! primary reports (through the monitor's agent), or an operator's command that prints one
//! `host:port` per line. What it lists is added as a server without a hostgroup — the monitor
//! checks it and gives it its role, so it takes traffic only once a check found it healthy —
//! marked with the source that found it; a server missing from two successful looks in a row
//! is removed (its connections drain, sessions are not dropped). A look that fails changes
//! nothing. Bounded: at most `max_servers` per source, a command's output read up to 64 KiB,
//! every look within `timeout`.

use crate::process::Process;
use sluice_config::{Config, DiscoveryConfig, ServerConfig};
use std::collections::{BTreeSet, HashMap};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncReadExt;
use tokio::sync::watch;
use tokio::time::Instant;

/// A command's output read at most.
const OUTPUT_READ: usize = 64 * 1024;

/// Successful looks in a row a discovered server must be missing from before it is removed.
const MISSES_TO_LEAVE: u32 = 2;

/// What one source remembers between looks.
#[derive(Default)]
struct SourceState {
    next: Option<Instant>,
    misses: HashMap<String, u32>,
    last_error: Option<String>,
    over_limit: bool,
}

/// Runs every configured source (as the running configuration has them, reloads included)
/// until shutdown.
pub(crate) async fn run(process: Arc<Process>, mut shutdown: watch::Receiver<bool>) {
    let mut states: HashMap<String, SourceState> = HashMap::new();
    loop {
        let config = process.runtime.effective.load_full();
        let now = Instant::now();
        let mut next_wake = now + Duration::from_secs(1);
        for d in &config.discovery {
            let key = format!("{}|{}", d.protocol.as_str(), d.describe());
            let st = states.entry(key).or_default();
            if st.next.is_none_or(|t| t <= now) {
                look(&process, d, st).await;
                st.next = Some(Instant::now() + d.interval.get());
            }
            if let Some(t) = st.next {
                next_wake = next_wake.min(t);
            }
        }
        states.retain(|k, _| {
            config
                .discovery
                .iter()
                .any(|d| *k == format!("{}|{}", d.protocol.as_str(), d.describe()))
        });
        tokio::select! {
            _ = tokio::time::sleep_until(next_wake) => {}
            _ = shutdown.changed() => return,
        }
    }
}

/// One look at a source, and the servers it adds and removes.
async fn look(process: &Arc<Process>, d: &DiscoveryConfig, st: &mut SourceState) {
    let source = d.describe();
    let event = |what: String| {
        tracing::info!(source = %source, "{what}");
        if let Some(m) = process
            .frontends()
            .iter()
            .find(|f| f.protocol() == d.protocol)
            .and_then(|f| f.monitor())
        {
            m.discovery_event(what);
        }
    };
    let found = match tokio::time::timeout(d.timeout.get(), list(process, d)).await {
        Ok(Ok(found)) => found,
        Ok(Err(e)) => return failed(st, &event, &source, e),
        Err(_) => {
            let e = format!("no answer within {} ms", d.timeout.get().as_millis());
            return failed(st, &event, &source, e);
        }
    };
    if st.last_error.take().is_some() {
        event(format!("discovery from {source} works again"));
    }
    let config = process.runtime.effective.load_full();
    let (add, remove) = changes(&config, d, &source, found, st, &event);
    if add.is_empty() && remove.is_empty() {
        return;
    }
    let protocol = d.protocol;
    let result = process
        .change_servers(|c| {
            c.servers
                .retain(|s| !(s.protocol == protocol && remove.contains(&s.address)));
            for address in &add {
                c.servers.push(ServerConfig {
                    address: address.clone(),
                    protocol,
                    hostgroup: None,
                    weight: 1,
                    max_connections: None,
                    max_replication_lag: None,
                    max_replication_lag_bytes: None,
                    discovered: Some(source.clone()),
                });
            }
            Ok(())
        })
        .await;
    match result {
        Ok(_) => {
            for a in &add {
                event(format!(
                    "found {a} ({source}): the monitor checks it before it takes traffic"
                ));
            }
            for a in &remove {
                st.misses.remove(a);
                event(format!(
                    "{a} is gone ({source}): removed, its connections drain"
                ));
            }
        }
        Err(e) => event(format!("cannot apply what {source} found: {e}")),
    }
}

/// Records a failed look (said once per distinct error); nothing changes.
fn failed(st: &mut SourceState, event: &impl Fn(String), source: &str, e: String) {
    if st.last_error.as_deref() != Some(&e) {
        event(format!(
            "discovery from {source} failed: {e}; its servers stay as they are"
        ));
    }
    st.last_error = Some(e);
}

/// What to add and what to remove, given what the source lists now.
fn changes(
    config: &Config,
    d: &DiscoveryConfig,
    source: &str,
    found: Vec<String>,
    st: &mut SourceState,
    event: &impl Fn(String),
) -> (Vec<String>, Vec<String>) {
    let of_protocol = || config.servers.iter().filter(|s| s.protocol == d.protocol);
    let mine: BTreeSet<String> = of_protocol()
        .filter(|s| s.discovered.as_deref() == Some(source))
        .map(|s| s.address.clone())
        .collect();
    // Servers the file (or another source) has are known already.
    let others: BTreeSet<&str> = of_protocol()
        .filter(|s| s.discovered.as_deref() != Some(source))
        .map(|s| s.address.as_str())
        .collect();
    let mut found: Vec<String> = found
        .into_iter()
        .filter(|a| !others.contains(a.as_str()))
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let max = d.max_servers as usize;
    // The ones it has keep their place within the bound.
    found.sort_by_key(|a| !mine.contains(a));
    if found.len() > max {
        if !st.over_limit {
            event(format!(
                "{source} lists {} servers; only {max} (max_servers) are used",
                found.len()
            ));
        }
        st.over_limit = true;
        found.truncate(max);
    } else {
        st.over_limit = false;
    }
    let found: BTreeSet<String> = found.into_iter().collect();
    let add: Vec<String> = found.difference(&mine).cloned().collect();
    let mut remove = Vec::new();
    for a in mine.difference(&found) {
        let n = st.misses.entry(a.clone()).or_insert(0);
        *n += 1;
        if *n >= MISSES_TO_LEAVE {
            remove.push(a.clone());
        }
    }
    for a in &found {
        st.misses.remove(a);
    }
    (add, remove)
}

/// The `host:port` addresses a source lists now.
async fn list(process: &Arc<Process>, d: &DiscoveryConfig) -> Result<Vec<String>, String> {
    if let Some(name) = &d.srv {
        return srv(name, d.nameserver.as_deref()).await;
    }
    if let Some(name) = &d.dns {
        if let Some(ns) = &d.nameserver {
            let (host, port) = name.rsplit_once(':').ok_or("not name:port")?;
            let port: u16 = port.parse().map_err(|_| "not name:port")?;
            let r = resolver(Some(ns))?;
            let ips = r
                .lookup_ip(host)
                .await
                .map_err(|e| format!("cannot resolve {host}: {e}"))?;
            return Ok(ips.iter().map(|ip| join(&ip.to_string(), port)).collect());
        }
        let addrs = tokio::net::lookup_host(name.as_str())
            .await
            .map_err(|e| format!("cannot resolve {name}: {e}"))?;
        return Ok(addrs.map(|a| a.to_string()).collect());
    }
    if let Some(command) = &d.command {
        return from_command(command).await;
    }
    let monitor = process
        .frontends()
        .iter()
        .find(|f| f.protocol() == d.protocol)
        .and_then(|f| f.monitor().cloned())
        .ok_or("no monitor runs for this protocol")?;
    let primary_port = monitor
        .primary()
        .and_then(|p| p.address.rsplit_once(':').and_then(|(_, p)| p.parse().ok()));
    let reported = monitor.reported_replicas().await?;
    Ok(reported
        .into_iter()
        .filter_map(|r| {
            if let Some(a) = d.names.get(&r.name) {
                return Some(a.clone());
            }
            let port: u16 = r.port.or(d.port).or(primary_port)?;
            Some(join(&r.host, port))
        })
        .collect())
}

/// A resolver asking `nameserver` (`ip:port`), or the system's.
fn resolver(nameserver: Option<&str>) -> Result<hickory_resolver::TokioResolver, String> {
    use hickory_resolver::config::{ConnectionConfig, NameServerConfig, ResolverConfig};
    use hickory_resolver::net::runtime::TokioRuntimeProvider;
    match nameserver {
        Some(ns) => {
            let at: std::net::SocketAddr = ns.parse().map_err(|_| format!("{ns}: not ip:port"))?;
            let mut udp = ConnectionConfig::udp();
            udp.port = at.port();
            let mut tcp = ConnectionConfig::tcp();
            tcp.port = at.port();
            let server = NameServerConfig::new(at.ip(), true, vec![udp, tcp]);
            Ok(hickory_resolver::Resolver::builder_with_config(
                ResolverConfig::from_name_servers(vec![server]),
                TokioRuntimeProvider::default(),
            )
            .build()
            .map_err(|e| e.to_string())?)
        }
        None => Ok(hickory_resolver::Resolver::builder_tokio()
            .map_err(|e| format!("the system's resolver configuration: {e}"))?
            .build()
            .map_err(|e| e.to_string())?),
    }
}

/// Every SRV record's target, resolved to its addresses, with the record's port.
async fn srv(name: &str, nameserver: Option<&str>) -> Result<Vec<String>, String> {
    use hickory_resolver::proto::rr::RData;
    let r = resolver(nameserver)?;
    let found = r
        .srv_lookup(name)
        .await
        .map_err(|e| format!("cannot resolve SRV {name}: {e}"))?;
    let mut out = Vec::new();
    for record in found.answers() {
        let RData::SRV(srv) = &record.data else {
            continue;
        };
        if srv.target.is_root() {
            continue; // "." : the service is not available there
        }
        let ips = r
            .lookup_ip(srv.target.clone())
            .await
            .map_err(|e| format!("cannot resolve {}: {e}", srv.target))?;
        out.extend(ips.iter().map(|ip| join(&ip.to_string(), srv.port)));
    }
    Ok(out)
}

/// `host:port`, with brackets around an IPv6 address.
fn join(host: &str, port: u16) -> String {
    if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// Runs an operator's command: each line of its output that is not empty or a `#` comment
/// is an address.
async fn from_command(command: &str) -> Result<Vec<String>, String> {
    let mut child = tokio::process::Command::new("sh")
        .arg("-c")
        .arg(command)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("cannot run it: {e}"))?;
    let mut out = Vec::new();
    let mut err = Vec::new();
    let (stdout, stderr) = (child.stdout.take(), child.stderr.take());
    let read_out = async {
        if let Some(s) = stdout {
            let _ = s.take(OUTPUT_READ as u64).read_to_end(&mut out).await;
        }
    };
    let read_err = async {
        if let Some(s) = stderr {
            let _ = s.take(4096).read_to_end(&mut err).await;
        }
    };
    tokio::join!(read_out, read_err);
    let status = child.wait().await.map_err(|e| e.to_string())?;
    if !status.success() {
        return Err(format!(
            "it failed ({status}): {}",
            String::from_utf8_lossy(&err).trim()
        ));
    }
    let text = String::from_utf8_lossy(&out);
    let mut found = Vec::new();
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        match line.rsplit_once(':') {
            Some((h, p)) if !h.is_empty() && p.parse::<u16>().is_ok_and(|p| p > 0) => {
                found.push(line.to_string())
            }
            _ => return Err(format!("it printed {line:?}, not host:port")),
        }
    }
    Ok(found)
}

/// Servers `[[discovery]]` added that a reloaded file, `new`, keeps sources for: carried
/// over into it (the file does not list them).
pub(crate) fn carry_over(effective: &Config, new: &mut Config) {
    let kept: Vec<ServerConfig> = effective
        .servers
        .iter()
        .filter(|s| {
            s.discovered.as_ref().is_some_and(|src| {
                new.discovery
                    .iter()
                    .any(|d| d.protocol == s.protocol && d.describe() == *src)
            })
        })
        .filter(|s| {
            !new.servers
                .iter()
                .any(|n| n.protocol == s.protocol && n.address == s.address)
        })
        .cloned()
        .collect();
    new.servers.extend(kept);
}

#[cfg(test)]
mod tests {
    use super::join;

    #[test]
    fn ipv6_hosts_get_brackets() {
        assert_eq!(join("10.0.0.1", 5432), "10.0.0.1:5432");
        assert_eq!(join("::1", 5432), "[::1]:5432");
        assert_eq!(join("[::1]", 5432), "[::1]:5432");
    }
}
