//! The monitor: failovers, switchovers, rounds, failures and repairs.

use super::*;

/// The monitor's families, when there is a monitor.
pub(super) fn encode(enc: &mut DescriptorEncoder<'_>, sc: &Scrape<'_>) -> Result<(), Error> {
    let monitor = sc.monitor;
    // The monitor.
    if let Some(m) = &monitor {
        family(
            enc,
            "sluice_failovers",
            "Automatic failovers completed.",
            MetricType::Counter,
            [(vec![], counter(m.stats.failovers.load(Relaxed)))],
        )?;
        family(
            enc,
            "sluice_switchovers",
            "Switchovers completed.",
            MetricType::Counter,
            [(vec![], counter(m.stats.switchovers.load(Relaxed)))],
        )?;
        family(
            enc,
            "sluice_last_failover_milliseconds",
            "Time from the failover decision to writes going to the new primary, last failover.",
            MetricType::Gauge,
            [(vec![], gauge(m.stats.last_failover_ms.load(Relaxed) as i64))],
        )?;
        family(
            enc,
            "sluice_monitor_rounds",
            "Monitor check rounds run.",
            MetricType::Counter,
            [(vec![], counter(m.stats.rounds.load(Relaxed)))],
        )?;
        monitor_failures(enc, m)?;
    }
    Ok(())
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
