//! Clients, statements and routing: connections, logins, routing decisions, rule hits.

use super::*;

/// Clients, statements and routing: connections, logins, routing decisions, rule hits.
pub(super) fn encode(enc: &mut DescriptorEncoder<'_>, sc: &Scrape<'_>) -> Result<(), Error> {
    let p = sc.rt;
    let clusters = sc.clusters;
    family(
        enc,
        "sluice_client_connections",
        "Client connections open now.",
        MetricType::Gauge,
        [(vec![], gauge(p.sessions.len() as i64))],
    )?;
    family(
        enc,
        "sluice_client_connections_accepted",
        "Client connections accepted and authenticated.",
        MetricType::Counter,
        [(vec![], counter(p.stats.clients_connected.load(Relaxed)))],
    )?;
    family(
        enc,
        "sluice_client_connections_refused",
        "Client connections refused (limits, authentication, malformed handshake).",
        MetricType::Counter,
        [(vec![], counter(p.stats.clients_refused.load(Relaxed)))],
    )?;
    family(
        enc,
        "sluice_login_failures",
        "Failed client logins (wrong password or unknown user), in the handshake or COM_CHANGE_USER.",
        MetricType::Counter,
        [(vec![], counter(p.throttle.failures.load(Relaxed)))],
    )?;
    family(
        enc,
        "sluice_login_blocked",
        "Connections refused because their address is blocked after repeated failed logins.",
        MetricType::Counter,
        [(vec![], counter(p.throttle.refused.load(Relaxed)))],
    )?;
    family(
        enc,
        "sluice_commands",
        "Client commands received.",
        MetricType::Counter,
        [(vec![], counter(p.stats.statements.load(Relaxed)))],
    )?;
    let routes: Vec<_> = clusters
        .iter()
        .flat_map(|(p, c)| {
            c.router()
                .stats
                .snapshot()
                .into_iter()
                .map(move |(d, n)| (p.as_str(), d, n))
        })
        .collect();
    family(
        enc,
        "sluice_routing_decisions",
        "Statements by routing decision: pinned (the session's held connection), listener, transaction, hint, rule, read, write, read_fallback (a read sent to the writer).",
        MetricType::Counter,
        routes
            .iter()
            .map(|(p, d, n)| (vec![("decision", *d), ("protocol", *p)], counter(*n))),
    )?;
    let rule_lists: Vec<_> = clusters
        .iter()
        .map(|(p, c)| (p.as_str(), c.router().rules()))
        .collect();
    let rules: Vec<_> = rule_lists
        .iter()
        .flat_map(|(p, l)| l.iter().map(move |r| (*p, r)))
        .map(|(p, r)| {
            (
                vec![
                    ("rule", r.name.as_str()),
                    ("hostgroup", &*r.hostgroup),
                    ("protocol", p),
                ],
                counter(r.hits.load(Relaxed)),
            )
        })
        .collect();
    family(
        enc,
        "sluice_rule_hits",
        "Statements each query rule matched.",
        MetricType::Counter,
        rules,
    )?;

    Ok(())
}
