//! The digest table, and the statement shapes kept for classification.

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
    family(
        enc,
        "sluice_statement_shape_lookups",
        "Statement texts looked up by shape (PostgreSQL), before scanning them.",
        MetricType::Counter,
        [(
            vec![],
            counter(sluice_sqlscan::shapes::LOOKED_UP.load(Relaxed)),
        )],
    )?;
    family(
        enc,
        "sluice_statement_shape_hits",
        "Statement texts classified from a kept shape, without a scan.",
        MetricType::Counter,
        [(vec![], counter(sluice_sqlscan::shapes::FOUND.load(Relaxed)))],
    )?;

    Ok(())
}
