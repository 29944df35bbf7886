//! `GET /metrics`: the proxy's counters in the Prometheus text format. Everything is read from
//! the live counters at scrape time (a [`Collector`]), so the hot path keeps only its atomics.
//!
//! Every name exported here is listed in docs/admin-api.md and used by the Grafana dashboard
//! in `dashboards/` (a test checks the dashboard against a real scrape).

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;
use sluice_core::HistogramSnapshot;
use sluice_runtime::Process;
use std::fmt::Error;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

/// Reads the proxy's state on each scrape.
struct ProxyCollector(Arc<Process>);

impl std::fmt::Debug for ProxyCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ProxyCollector")
    }
}

type Labels<'a> = Vec<(&'static str, &'a str)>;

/// One metric family: a descriptor, then one sample per label set.
fn family<'a, M: EncodeMetric>(
    enc: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    kind: MetricType,
    samples: impl IntoIterator<Item = (Labels<'a>, M)>,
) -> Result<(), Error> {
    let mut m = enc.encode_descriptor(name, help, None, kind)?;
    for (labels, metric) in samples {
        metric.encode(m.encode_family(&labels)?)?;
    }
    Ok(())
}

fn counter(v: u64) -> ConstCounter<u64> {
    ConstCounter::new(v)
}

fn gauge(v: i64) -> ConstGauge<i64> {
    ConstGauge::new(v)
}

/// A histogram family from snapshots (cumulative buckets, as [`HistogramSnapshot`] has them).
fn histograms(
    enc: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    samples: &[(Labels<'_>, HistogramSnapshot)],
) -> Result<(), Error> {
    let mut m = enc.encode_descriptor(name, help, None, MetricType::Histogram)?;
    for (labels, h) in samples {
        // The encoder wants per-bucket counts and `f64::MAX` for +Inf.
        let mut prev = 0;
        let buckets: Vec<(f64, u64)> = h
            .buckets
            .iter()
            .map(|(le, cum)| {
                let n = cum - prev;
                prev = *cum;
                (if le.is_infinite() { f64::MAX } else { *le }, n)
            })
            .collect();
        m.encode_family(labels)?
            .encode_histogram::<prometheus_client::encoding::NoLabelSet>(
                h.sum, h.count, &buckets, None,
            )?;
    }
    Ok(())
}

impl Collector for ProxyCollector {
    fn encode(&self, mut enc: DescriptorEncoder<'_>) -> Result<(), Error> {
        let p = &*self.0.runtime;
        let clusters: Vec<_> = self.0.frontends().iter().map(|f| f.cluster()).collect();
        let all: Vec<_> = clusters
            .iter()
            .flat_map(|c| c.servers().iter().cloned().collect::<Vec<_>>())
            .collect();
        let groups: Vec<_> = clusters.iter().flat_map(|c| c.hostgroup_views()).collect();
        let monitor = self.0.frontends().iter().find_map(|f| f.monitor().cloned());
        family(
            &mut enc,
            "sluice_client_connections",
            "Client connections open now.",
            MetricType::Gauge,
            [(vec![], gauge(p.sessions.len() as i64))],
        )?;
        family(
            &mut enc,
            "sluice_client_connections_accepted",
            "Client connections accepted and authenticated.",
            MetricType::Counter,
            [(vec![], counter(p.stats.clients_connected.load(Relaxed)))],
        )?;
        family(
            &mut enc,
            "sluice_client_connections_refused",
            "Client connections refused (limits, authentication, malformed handshake).",
            MetricType::Counter,
            [(vec![], counter(p.stats.clients_refused.load(Relaxed)))],
        )?;
        family(
            &mut enc,
            "sluice_login_failures",
            "Failed client logins (wrong password or unknown user), in the handshake or COM_CHANGE_USER.",
            MetricType::Counter,
            [(vec![], counter(p.throttle.failures.load(Relaxed)))],
        )?;
        family(
            &mut enc,
            "sluice_login_blocked",
            "Connections refused because their address is blocked after repeated failed logins.",
            MetricType::Counter,
            [(vec![], counter(p.throttle.refused.load(Relaxed)))],
        )?;
        family(
            &mut enc,
            "sluice_commands",
            "Client commands received.",
            MetricType::Counter,
            [(vec![], counter(p.stats.statements.load(Relaxed)))],
        )?;
        let routes: Vec<_> = clusters
            .iter()
            .flat_map(|c| c.router().stats.snapshot())
            .collect();
        family(
            &mut enc,
            "sluice_routing_decisions",
            "Statements by routing decision: pinned (the session's held connection), listener, transaction, hint, rule, read, write, read_fallback (a read sent to the writer).",
            MetricType::Counter,
            routes
                .iter()
                .map(|(d, n)| (vec![("decision", *d)], counter(*n))),
        )?;
        let rule_lists: Vec<_> = clusters.iter().map(|c| c.router().rules()).collect();
        let rules: Vec<_> = rule_lists
            .iter()
            .flat_map(|l| l.iter())
            .map(|r| {
                (
                    vec![("rule", r.name.as_str()), ("hostgroup", &*r.hostgroup)],
                    counter(r.hits.load(Relaxed)),
                )
            })
            .collect();
        family(
            &mut enc,
            "sluice_rule_hits",
            "Statements each query rule matched.",
            MetricType::Counter,
            rules,
        )?;

        // Hostgroups: pools and latency.
        let pools: Vec<_> = groups
            .iter()
            .flat_map(|hg| {
                hg.pool_stats()
                    .into_iter()
                    .map(move |s| (hg.name().clone(), s))
            })
            .collect();
        let pool_samples = |f: fn(&sluice_core::PoolStats) -> u32| {
            pools
                .iter()
                .map(move |(hg, s)| {
                    (
                        vec![("hostgroup", &**hg), ("server", &*s.server.name)],
                        gauge(i64::from(f(s))),
                    )
                })
                .collect::<Vec<_>>()
        };
        family(
            &mut enc,
            "sluice_backend_connections_in_use",
            "Backend connections lent to sessions, per hostgroup and server.",
            MetricType::Gauge,
            pool_samples(|s| s.in_use),
        )?;
        family(
            &mut enc,
            "sluice_backend_connections_idle",
            "Idle pooled backend connections, per hostgroup and server.",
            MetricType::Gauge,
            pool_samples(|s| s.idle),
        )?;
        family(
            &mut enc,
            "sluice_backend_connections_max",
            "Backend connection limit, per server.",
            MetricType::Gauge,
            all.iter().map(|s| {
                (
                    vec![("server", &*s.name)],
                    gauge(i64::from(s.max_connections())),
                )
            }),
        )?;
        family(
            &mut enc,
            "sluice_hostgroup_waiting",
            "Statements waiting for a backend connection now.",
            MetricType::Gauge,
            groups
                .iter()
                .map(|h| (vec![("hostgroup", &**h.name())], gauge(h.waiting() as i64))),
        )?;
        family(
            &mut enc,
            "sluice_hostgroup_queue_timeouts",
            "Statements that gave up waiting for a backend connection (timeout or full queue).",
            MetricType::Counter,
            groups.iter().map(|h| {
                (
                    vec![("hostgroup", &**h.name())],
                    counter(h.queue_timeouts()),
                )
            }),
        )?;
        let latency: Vec<_> = groups
            .iter()
            .map(|h| (vec![("hostgroup", &**h.name())], h.latency().snapshot()))
            .collect();
        histograms(
            &mut enc,
            "sluice_statement_duration_seconds",
            "Statement latency per hostgroup, from the command's arrival to the end of its response (queueing included).",
            &latency,
        )?;

        // Servers: traffic, health, what the monitor observed.
        let per_server = |f: fn(&sluice_core::ServerStats) -> u64| {
            all.iter()
                .map(move |s| (vec![("server", &*s.name)], counter(f(&s.stats))))
                .collect::<Vec<_>>()
        };
        family(
            &mut enc,
            "sluice_server_queries",
            "Statements sent to each server.",
            MetricType::Counter,
            per_server(|s| s.queries.load(Relaxed)),
        )?;
        family(
            &mut enc,
            "sluice_server_reads",
            "Statements classified as reads that each server answered.",
            MetricType::Counter,
            per_server(|s| s.reads.load(Relaxed)),
        )?;
        family(
            &mut enc,
            "sluice_server_writes",
            "Statements classified as writes that each server answered.",
            MetricType::Counter,
            per_server(|s| s.writes.load(Relaxed)),
        )?;
        family(
            &mut enc,
            "sluice_server_errors",
            "Statements that ended in an error from the server or its connection.",
            MetricType::Counter,
            per_server(|s| s.errors.load(Relaxed)),
        )?;
        family(
            &mut enc,
            "sluice_server_connects",
            "Backend connections opened to each server.",
            MetricType::Counter,
            per_server(|s| s.connects.load(Relaxed)),
        )?;
        family(
            &mut enc,
            "sluice_server_connect_errors",
            "Backend connection attempts that failed.",
            MetricType::Counter,
            per_server(|s| s.connect_errors.load(Relaxed)),
        )?;
        let states: Vec<_> = all
            .iter()
            .map(|s| (s, s.state().0.to_ascii_lowercase()))
            .collect();
        family(
            &mut enc,
            "sluice_server_state",
            "1 for each server's state: online, shunned (takes no traffic for now), offline.",
            MetricType::Gauge,
            states.iter().flat_map(|(s, state)| {
                ["online", "shunned", "offline"].into_iter().map(move |k| {
                    (
                        vec![("server", &*s.name), ("state", k)],
                        gauge(i64::from(*state == k)),
                    )
                })
            }),
        )?;
        let observed: Vec<_> = all.iter().map(|s| (s, s.observed())).collect();
        family(
            &mut enc,
            "sluice_server_role",
            "1 for each server's role as the monitor sees it: primary, replica, fenced, unknown.",
            MetricType::Gauge,
            observed.iter().flat_map(|(s, o)| {
                ["primary", "replica", "fenced", "unknown"]
                    .into_iter()
                    .map(move |r| {
                        (
                            vec![("server", &*s.name), ("role", r)],
                            gauge(i64::from(o.role.as_str() == r)),
                        )
                    })
            }),
        )?;
        family(
            &mut enc,
            "sluice_server_up",
            "1 if the monitor's last check of the server succeeded.",
            MetricType::Gauge,
            observed
                .iter()
                .map(|(s, o)| (vec![("server", &*s.name)], gauge(i64::from(o.reachable)))),
        )?;
        family(
            &mut enc,
            "sluice_replication_lag_seconds",
            "Replication lag (Seconds_Behind_Master) of each replica, when known.",
            MetricType::Gauge,
            observed.iter().filter_map(|(s, o)| {
                o.lag
                    .map(|l| (vec![("server", &*s.name)], gauge(l.as_secs() as i64)))
            }),
        )?;
        family(
            &mut enc,
            "sluice_server_check_latency_microseconds",
            "Round-trip time of the monitor's last successful check.",
            MetricType::Gauge,
            observed.iter().filter_map(|(s, o)| {
                o.rtt
                    .map(|d| (vec![("server", &*s.name)], gauge(d.as_micros() as i64)))
            }),
        )?;

        family(
            &mut enc,
            "sluice_digest_entries",
            "Entries in the query digest table.",
            MetricType::Gauge,
            [(vec![], gauge(p.digests.len() as i64))],
        )?;
        family(
            &mut enc,
            "sluice_digest_evictions",
            "Digest entries dropped to keep the table within [digests] max_entries.",
            MetricType::Counter,
            [(vec![], counter(p.digests.evicted.load(Relaxed)))],
        )?;

        // The monitor.
        if let Some(m) = &monitor {
            family(
                &mut enc,
                "sluice_failovers",
                "Automatic failovers completed.",
                MetricType::Counter,
                [(vec![], counter(m.stats.failovers.load(Relaxed)))],
            )?;
            family(
                &mut enc,
                "sluice_switchovers",
                "Switchovers completed.",
                MetricType::Counter,
                [(vec![], counter(m.stats.switchovers.load(Relaxed)))],
            )?;
            family(
                &mut enc,
                "sluice_last_failover_milliseconds",
                "Time from the failover decision to writes going to the new primary, last failover.",
                MetricType::Gauge,
                [(vec![], gauge(m.stats.last_failover_ms.load(Relaxed) as i64))],
            )?;
            family(
                &mut enc,
                "sluice_monitor_rounds",
                "Monitor check rounds run.",
                MetricType::Counter,
                [(vec![], counter(m.stats.rounds.load(Relaxed)))],
            )?;
            monitor_failures(&mut enc, m)?;
        }
        Ok(())
    }
}

/// Failed failovers by the step that failed, and what the monitor is still repairing.
fn monitor_failures(
    enc: &mut DescriptorEncoder<'_>,
    m: &sluice_monitor::Monitor,
) -> Result<(), Error> {
    use sluice_monitor::FailoverStep;
    family(
        enc,
        "sluice_failover_failures",
        "Failover attempts that did not complete (everything they changed was undone), by the step that failed; `refused`: not attempted because the monitor's user lacks privileges.",
        MetricType::Counter,
        FailoverStep::ALL
            .iter()
            .map(|s| (vec![("step", s.as_str())], counter(m.stats.failover_failures(*s)))),
    )?;
    let status = m.status();
    family(
        enc,
        "sluice_failover_refused",
        "1 while automatic failover is enabled but would be refused (the monitor's user lacks privileges).",
        MetricType::Gauge,
        [(vec![], gauge(i64::from(status.failover_refused.is_some())))],
    )?;
    family(
        enc,
        "sluice_switchover_failures",
        "Switchovers that failed and were undone.",
        MetricType::Counter,
        [(vec![], counter(m.stats.switchover_failures.load(Relaxed)))],
    )?;
    family(
        enc,
        "sluice_monitor_repairs_pending",
        "Servers the monitor changed and still has to put back or move (restart replication, follow the primary, rejoin).",
        MetricType::Gauge,
        [(vec![], gauge(status.repairs.len() as i64))],
    )?;
    family(
        enc,
        "sluice_monitor_repair_failures",
        "Repair attempts that failed and will be retried.",
        MetricType::Counter,
        [(vec![], counter(m.stats.repair_failures.load(Relaxed)))],
    )?;
    family(
        enc,
        "sluice_monitor_starved_checks",
        "Checks that timed out while the monitor's own thread waited for a CPU; not counted as the server's failure.",
        MetricType::Counter,
        [(vec![], counter(m.stats.starved_checks.load(Relaxed)))],
    )
}

/// The registry `/metrics` encodes.
pub fn registry(process: Arc<Process>) -> Registry {
    let mut r = Registry::default();
    r.register_collector(Box::new(ProxyCollector(process)));
    r
}

/// Encodes everything in the Prometheus text format.
pub fn render(registry: &Registry) -> Result<String, Error> {
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, registry)?;
    Ok(out)
}
