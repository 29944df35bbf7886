//! Servers: traffic, health, what the monitor observed.

use super::*;

/// Servers: traffic, health, what the monitor observed.
pub(super) fn encode(enc: &mut DescriptorEncoder<'_>, sc: &Scrape<'_>) -> Result<(), Error> {
    let all = sc.all;
    // Servers: traffic, health, what the monitor observed.
    let per_server = |f: fn(&sluice_core::ServerStats) -> u64| {
        all.iter()
            .map(move |s| {
                (
                    vec![("server", &*s.name), ("protocol", sc.protocol_of(s))],
                    counter(f(&s.stats)),
                )
            })
            .collect::<Vec<_>>()
    };
    family(
        enc,
        "sluice_server_queries",
        "Statements sent to each server.",
        MetricType::Counter,
        per_server(|s| s.queries.load(Relaxed)),
    )?;
    family(
        enc,
        "sluice_server_reads",
        "Statements classified as reads that each server answered.",
        MetricType::Counter,
        per_server(|s| s.reads.load(Relaxed)),
    )?;
    family(
        enc,
        "sluice_server_writes",
        "Statements classified as writes that each server answered.",
        MetricType::Counter,
        per_server(|s| s.writes.load(Relaxed)),
    )?;
    family(
        enc,
        "sluice_server_errors",
        "Statements that ended in an error from the server or its connection.",
        MetricType::Counter,
        per_server(|s| s.errors.load(Relaxed)),
    )?;
    family(
        enc,
        "sluice_server_connects",
        "Backend connections opened to each server.",
        MetricType::Counter,
        per_server(|s| s.connects.load(Relaxed)),
    )?;
    family(
        enc,
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
        enc,
        "sluice_server_state",
        "1 for each server's state: online, shunned (takes no traffic for now), offline.",
        MetricType::Gauge,
        states.iter().flat_map(|(s, state)| {
            ["online", "shunned", "offline"].into_iter().map(move |k| {
                (
                    vec![
                        ("server", &*s.name),
                        ("protocol", sc.protocol_of(s)),
                        ("state", k),
                    ],
                    gauge(i64::from(*state == k)),
                )
            })
        }),
    )?;
    let observed: Vec<_> = all.iter().map(|s| (s, s.observed())).collect();
    family(
        enc,
        "sluice_server_role",
        "1 for each server's role as the monitor sees it: primary, replica, fenced, unknown.",
        MetricType::Gauge,
        observed.iter().flat_map(|(s, o)| {
            ["primary", "replica", "fenced", "unknown"]
                .into_iter()
                .map(move |r| {
                    (
                        vec![
                            ("server", &*s.name),
                            ("protocol", sc.protocol_of(s)),
                            ("role", r),
                        ],
                        gauge(i64::from(o.role.as_str() == r)),
                    )
                })
        }),
    )?;
    family(
        enc,
        "sluice_server_up",
        "1 if the monitor's last check of the server succeeded.",
        MetricType::Gauge,
        observed.iter().map(|(s, o)| {
            (
                vec![("server", &*s.name), ("protocol", sc.protocol_of(s))],
                gauge(i64::from(o.reachable)),
            )
        }),
    )?;
    family(
        enc,
        "sluice_replication_lag_seconds",
        "Replication lag of each replica, when known (MariaDB: Seconds_Behind_Master; PostgreSQL: time since the last replayed transaction while WAL waits to be replayed).",
        MetricType::Gauge,
        observed.iter().filter_map(|(s, o)| {
            o.lag.map(|l| {
                (
                    vec![("server", &*s.name), ("protocol", sc.protocol_of(s))],
                    gauge(l.as_secs() as i64),
                )
            })
        }),
    )?;
    family(
        enc,
        "sluice_replication_lag_bytes",
        "Bytes of WAL each PostgreSQL standby is behind the primary, when known.",
        MetricType::Gauge,
        observed.iter().filter_map(|(s, o)| {
            o.lag_bytes.map(|b| {
                (
                    vec![("server", &*s.name), ("protocol", sc.protocol_of(s))],
                    gauge(i64::try_from(b).unwrap_or(i64::MAX)),
                )
            })
        }),
    )?;
    family(
        enc,
        "sluice_server_timeline",
        "The timeline each PostgreSQL server's WAL is on (it changes with every promotion).",
        MetricType::Gauge,
        observed.iter().filter_map(|(s, o)| {
            o.timeline.map(|t| {
                (
                    vec![("server", &*s.name), ("protocol", sc.protocol_of(s))],
                    gauge(i64::from(t)),
                )
            })
        }),
    )?;
    family(
        enc,
        "sluice_server_check_latency_microseconds",
        "Round-trip time of the monitor's last successful check.",
        MetricType::Gauge,
        observed.iter().filter_map(|(s, o)| {
            o.rtt.map(|d| {
                (
                    vec![("server", &*s.name), ("protocol", sc.protocol_of(s))],
                    gauge(d.as_micros() as i64),
                )
            })
        }),
    )?;

    Ok(())
}
