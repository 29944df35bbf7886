//! Hostgroups: pools, waiting statements, latency.

use super::*;

/// Hostgroups: pools, waiting statements, latency.
pub(super) fn encode(enc: &mut DescriptorEncoder<'_>, sc: &Scrape<'_>) -> Result<(), Error> {
    let all = sc.all;
    let groups = sc.groups;
    // Hostgroups: pools and latency.
    let pools: Vec<_> = groups
        .iter()
        .flat_map(|hg| {
            hg.pool_stats()
                .into_iter()
                .map(move |s| (hg.name().clone(), sc.protocol_of_group(hg), s))
        })
        .collect();
    let pool_samples = |f: fn(&sluice_core::PoolStats) -> u32| {
        pools
            .iter()
            .map(move |(hg, protocol, s)| {
                (
                    vec![
                        ("hostgroup", &**hg),
                        ("server", &*s.server.name),
                        ("protocol", *protocol),
                    ],
                    gauge(i64::from(f(s))),
                )
            })
            .collect::<Vec<_>>()
    };
    family(
        enc,
        "sluice_backend_connections_in_use",
        "Backend connections lent to sessions, per hostgroup and server.",
        MetricType::Gauge,
        pool_samples(|s| s.in_use),
    )?;
    family(
        enc,
        "sluice_backend_connections_idle",
        "Idle pooled backend connections, per hostgroup and server.",
        MetricType::Gauge,
        pool_samples(|s| s.idle),
    )?;
    family(
        enc,
        "sluice_backend_connections_max",
        "Backend connection limit, per server.",
        MetricType::Gauge,
        all.iter().map(|s| {
            (
                vec![("server", &*s.name), ("protocol", sc.protocol_of(s))],
                gauge(i64::from(s.max_connections())),
            )
        }),
    )?;
    family(
        enc,
        "sluice_hostgroup_waiting",
        "Statements waiting for a backend connection now.",
        MetricType::Gauge,
        groups.iter().map(|h| {
            (
                vec![
                    ("hostgroup", &**h.name()),
                    ("protocol", sc.protocol_of_group(h)),
                ],
                gauge(h.waiting() as i64),
            )
        }),
    )?;
    family(
        enc,
        "sluice_hostgroup_queue_timeouts",
        "Statements that gave up waiting for a backend connection (timeout or full queue).",
        MetricType::Counter,
        groups.iter().map(|h| {
            (
                vec![
                    ("hostgroup", &**h.name()),
                    ("protocol", sc.protocol_of_group(h)),
                ],
                counter(h.queue_timeouts()),
            )
        }),
    )?;
    let latency: Vec<_> = groups
        .iter()
        .map(|h| {
            (
                vec![
                    ("hostgroup", &**h.name()),
                    ("protocol", sc.protocol_of_group(h)),
                ],
                h.latency().snapshot(),
            )
        })
        .collect();
    histograms(
        enc,
        "sluice_statement_duration_seconds",
        "Statement latency per hostgroup, from the command's arrival to the end of its response (queueing included).",
        &latency,
    )?;

    Ok(())
}
