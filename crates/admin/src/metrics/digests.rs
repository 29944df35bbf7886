//! The digest table.

use super::*;

/// The digest table.
pub(super) fn encode(enc: &mut DescriptorEncoder<'_>, sc: &Scrape<'_>) -> Result<(), Error> {
    let p = sc.rt;
    family(
        enc,
        "sluice_digest_entries",
        "Entries in the query digest table.",
        MetricType::Gauge,
        [(vec![], gauge(p.digests.len() as i64))],
    )?;
    family(
        enc,
        "sluice_digest_evictions",
        "Digest entries dropped to keep the table within [digests] max_entries.",
        MetricType::Counter,
        [(vec![], counter(p.digests.evicted.load(Relaxed)))],
    )?;

    Ok(())
}
