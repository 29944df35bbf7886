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
use sluice_core::{HostgroupView, Server};
use sluice_monitor::Monitor;
use sluice_runtime::tables::ClusterOf;
use sluice_runtime::{Process, Runtime};
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

mod clients;
mod digests;
mod monitor;
mod pools;
mod servers;

/// What one scrape reads, gathered once.
pub(super) struct Scrape<'a> {
    rt: &'a Runtime,
    clusters: &'a [ClusterOf],
    all: &'a [Arc<Server>],
    groups: &'a [Arc<dyn HostgroupView>],
    monitor: Option<&'a Arc<Monitor>>,
}

impl Scrape<'_> {
    /// The protocol of the topology `server` belongs to (the `protocol` label).
    fn protocol_of(&self, server: &Arc<Server>) -> &'static str {
        self.clusters
            .iter()
            .find(|(_, c)| c.servers().iter().any(|s| Arc::ptr_eq(s, server)))
            .map_or("", |(p, _)| p.as_str())
    }

    /// The protocol of the topology hostgroup `group` belongs to (hostgroup names are
    /// resolved within a protocol, so the same name may exist in two).
    fn protocol_of_group(&self, group: &Arc<dyn HostgroupView>) -> &'static str {
        let same = |h: &Arc<dyn HostgroupView>| {
            std::ptr::eq(Arc::as_ptr(h) as *const (), Arc::as_ptr(group) as *const ())
        };
        self.clusters
            .iter()
            .find(|(_, c)| c.hostgroup_views().iter().any(same))
            .map_or("", |(p, _)| p.as_str())
    }
}

impl Collector for ProxyCollector {
    fn encode(&self, mut enc: DescriptorEncoder<'_>) -> Result<(), Error> {
        let clusters = self.0.clusters();
        let all: Vec<_> = clusters
            .iter()
            .flat_map(|(_, c)| c.servers().iter().cloned().collect::<Vec<_>>())
            .collect();
        let groups: Vec<_> = clusters
            .iter()
            .flat_map(|(_, c)| c.hostgroup_views())
            .collect();
        let monitor = self.0.frontends().iter().find_map(|f| f.monitor().cloned());
        let s = Scrape {
            rt: &self.0.runtime,
            clusters: &clusters,
            all: &all,
            groups: &groups,
            monitor: monitor.as_ref(),
        };
        clients::encode(&mut enc, &s)?;
        pools::encode(&mut enc, &s)?;
        servers::encode(&mut enc, &s)?;
        digests::encode(&mut enc, &s)?;
        monitor::encode(&mut enc, &s)
    }
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
