//! `GET /metrics` against a real topology, parsed by the reference Python parser
//! (`prometheus_client`), and the shipped Grafana dashboard checked against it.
// A tool around the proxy (tests, benchmarks, fuzzing): a broken invariant or a failed
// set-up step is reported by panicking, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::Managed;
use mysql_async::prelude::*;
use mysql_async::{Conn, Opts};
use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

/// One sample: name, labels, value.
type Sample = (String, BTreeMap<String, String>, f64);

/// `GET path` on the admin listener; returns (status line, body).
fn http_get(addr: std::net::SocketAddr, path: &str) -> (String, String) {
    let (status, body) = common::http::request(addr, "GET", path, None);
    (format!("HTTP/1.1 {status}"), body)
}

/// Parses the exposition text with Python's `prometheus_client` parser (a strict, independent
/// implementation of the format).
fn parse(text: &str) -> Vec<Sample> {
    let script = r##"
import json, sys
from prometheus_client.parser import text_string_to_metric_families
for fam in text_string_to_metric_families(sys.stdin.read()):
    print(json.dumps(["#family", {"name": fam.name, "type": fam.type}, 0]))
    for s in fam.samples:
        print(json.dumps([s.name, s.labels, s.value]))
"##;
    let mut child = Command::new("python3")
        .arg("-c")
        .arg(script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3 must be installed");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !stderr.contains("ModuleNotFoundError"),
        "the Python package prometheus-client is missing (the test command installs it: pip install prometheus-client): {stderr}"
    );
    assert!(
        out.status.success(),
        "the exposition does not parse: {stderr}\n{text}"
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn value(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> f64 {
    samples
        .iter()
        .find(|(n, l, _)| {
            n == name
                && labels
                    .iter()
                    .all(|(k, v)| l.get(*k).map(String::as_str) == Some(*v))
        })
        .map(|s| s.2)
        .unwrap_or_else(|| panic!("no sample {name} {labels:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_are_exported_and_the_dashboard_uses_only_them() {
    let env = common::start_managed(Managed {
        replicas: 2,
        ..Default::default()
    })
    .await;
    let admin = env.admin(None).await;

    let mut c = Conn::new(Opts::from_url(&env.url("test")).unwrap())
        .await
        .unwrap();
    c.query_drop("CREATE TABLE m (id INT PRIMARY KEY)")
        .await
        .unwrap();
    for i in 0..5 {
        c.query_drop(format!("INSERT INTO m VALUES ({i})"))
            .await
            .unwrap();
    }
    env.sync();
    for _ in 0..30 {
        c.query_drop("SELECT COUNT(*) FROM m").await.unwrap();
    }
    c.query_drop("BEGIN").await.unwrap();
    c.query_drop("SELECT * FROM m FOR UPDATE").await.unwrap();
    c.query_drop("COMMIT").await.unwrap();
    c.query_drop("SELECT /* sluice:writer */ 1").await.unwrap();
    c.query_drop("SELECT * FROM m WHERE id IN (1, 2)")
        .await
        .unwrap();
    c.query_drop("select * from m  where id in (3) -- other literals, same shape")
        .await
        .unwrap();
    // Texts of 256 KiB or more are scanned, and their digests computed, off the event loop
    // (`sluice_runtime::off_loop`): routed as the short ones, and counted with them.
    let ids: Vec<String> = (0..40_000).map(|i| (1_000_000 + i).to_string()).collect();
    let long_in = format!("SELECT * FROM m WHERE id IN (1, {})", ids.join(", "));
    assert!(long_in.len() > sluice_runtime::off_loop::OFF_LOOP_TEXT);
    c.query_drop(long_in).await.unwrap();
    let long_insert = format!("INSERT INTO m VALUES (5) /* {} */", "x".repeat(300 << 10));
    c.query_drop(long_insert).await.unwrap();
    for _ in 0..2 {
        c.query_drop("SELECT * FROM no_such_table WHERE id = 3")
            .await
            .unwrap_err();
    }

    // A scrape taken while every server answered the monitor's last check (one check that
    // outlived its limit on a busy machine shows as down until the next: scraped again).
    let addr = admin.addr;
    let all_up = |samples: &[Sample]| {
        env.topo.servers.iter().all(|s| {
            let a = s.addr();
            value(samples, "sluice_server_up", &[("server", &a)]) == 1.0
                && value(
                    samples,
                    "sluice_server_state",
                    &[("server", &a), ("state", "online")],
                ) == 1.0
        })
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let samples = loop {
        let (status, text) = tokio::task::spawn_blocking(move || http_get(addr, "/metrics"))
            .await
            .unwrap();
        assert!(status.starts_with("HTTP/1.1 200"), "{status}");
        let samples = parse(&text);
        if all_up(&samples) || std::time::Instant::now() > deadline {
            break samples;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };

    // Roles and health, as the monitor sees them.
    let primary = env.topo.servers[0].addr();
    let replica = env.topo.servers[1].addr();
    let p = primary.as_str();
    assert_eq!(
        value(
            &samples,
            "sluice_server_role",
            &[("server", p), ("role", "primary")]
        ),
        1.0
    );
    assert_eq!(
        value(
            &samples,
            "sluice_server_role",
            &[("server", p), ("role", "replica")]
        ),
        0.0
    );
    assert_eq!(
        value(
            &samples,
            "sluice_server_role",
            &[("server", &replica), ("role", "replica")]
        ),
        1.0
    );
    for s in &env.topo.servers {
        let a = s.addr();
        assert_eq!(value(&samples, "sluice_server_up", &[("server", &a)]), 1.0);
        assert_eq!(
            value(
                &samples,
                "sluice_server_state",
                &[("server", &a), ("state", "online")]
            ),
            1.0
        );
    }
    // Traffic: reads on the replicas, writes on the primary, the routing decisions.
    let reads: f64 = env.topo.servers[1..]
        .iter()
        .map(|s| {
            value(
                &samples,
                "sluice_server_reads_total",
                &[("server", &s.addr())],
            )
        })
        .sum();
    assert!(reads >= 30.0, "{reads}");
    assert!(value(&samples, "sluice_server_writes_total", &[("server", p)]) >= 6.0);
    assert!(
        value(
            &samples,
            "sluice_routing_decisions_total",
            &[("decision", "read")]
        ) >= 30.0
    );
    assert!(
        value(
            &samples,
            "sluice_routing_decisions_total",
            &[("decision", "write")]
        ) >= 6.0
    );
    // The transaction's statements after BEGIN run on its pinned connection.
    assert!(
        value(
            &samples,
            "sluice_routing_decisions_total",
            &[("decision", "pinned")]
        ) >= 2.0
    );
    assert!(
        value(
            &samples,
            "sluice_routing_decisions_total",
            &[("decision", "hint")]
        ) >= 1.0
    );
    // Latency histograms: every read counted in the reader hostgroup, buckets cumulative.
    let count = value(
        &samples,
        "sluice_statement_duration_seconds_count",
        &[("hostgroup", "reader")],
    );
    assert!(count >= 30.0, "{count}");
    let inf = value(
        &samples,
        "sluice_statement_duration_seconds_bucket",
        &[("hostgroup", "reader"), ("le", "+Inf")],
    );
    assert_eq!(inf, count);
    let fast = value(
        &samples,
        "sluice_statement_duration_seconds_bucket",
        &[("hostgroup", "reader"), ("le", "0.0005")],
    );
    assert!(fast <= inf);
    assert!(
        value(
            &samples,
            "sluice_statement_duration_seconds_sum",
            &[("hostgroup", "reader")]
        ) > 0.0
    );
    // Connections, pools, monitor.
    assert!(value(&samples, "sluice_client_connections", &[]) >= 1.0);
    assert!(value(&samples, "sluice_client_connections_accepted_total", &[]) >= 1.0);
    let pooled: f64 = samples
        .iter()
        .filter(|(n, _, _)| {
            n == "sluice_backend_connections_idle" || n == "sluice_backend_connections_in_use"
        })
        .map(|s| s.2)
        .sum();
    assert!(
        pooled >= 1.0,
        "the session's backend connections are counted"
    );
    assert!(value(&samples, "sluice_monitor_rounds_total", &[]) >= 1.0);
    assert_eq!(value(&samples, "sluice_failovers_total", &[]), 0.0);

    assert!(value(&samples, "sluice_digest_entries", &[]) >= 5.0);

    // Query digests: one entry per statement shape, user, schema and hostgroup.
    let (status, body) =
        tokio::task::spawn_blocking(move || http_get(addr, "/api/digests?limit=1000"))
            .await
            .unwrap();
    assert!(status.starts_with("HTTP/1.1 200"), "{status}");
    let d: serde_json::Value = serde_json::from_str(&body).unwrap();
    let list = d["digests"].as_array().unwrap();
    let find = |text: &str| {
        list.iter()
            .find(|e| e["text"] == text)
            .unwrap_or_else(|| panic!("no digest {text:?} in {body}"))
    };
    let count = find("SELECT COUNT(*) FROM m");
    assert_eq!(count["count"], 30);
    assert_eq!(count["hostgroup"], "reader");
    assert_eq!(
        (&count["user"], &count["schema"]),
        (&"app".into(), &"test".into())
    );
    assert_eq!(count["rows_sent"], 30);
    let (min, p50, max) = (
        count["min_ms"].as_f64().unwrap(),
        count["p50_ms"].as_f64().unwrap(),
        count["max_ms"].as_f64().unwrap(),
    );
    assert!(min <= p50 && p50 <= max, "{count}");
    let insert = find("INSERT INTO m VALUES (...)");
    assert_eq!(
        (&insert["count"], &insert["rows_affected"]),
        (&6.into(), &6.into())
    );
    assert_eq!(insert["hostgroup"], "writer");
    assert_eq!(insert["digest"].as_str().unwrap().len(), 16);
    let listed = find("SELECT * FROM m WHERE id IN (...)");
    assert_eq!(
        (&listed["count"], &listed["hostgroup"]),
        (&3.into(), &"reader".into())
    );
    let failing = find("SELECT * FROM no_such_table WHERE id = ?");
    assert_eq!(
        (&failing["count"], &failing["errors"]),
        (&2.into(), &2.into())
    );
    // Sorted by count by default; a bad sort key is refused.
    let counts: Vec<u64> = list.iter().map(|e| e["count"].as_u64().unwrap()).collect();
    assert!(counts.windows(2).all(|w| w[0] >= w[1]), "{counts:?}");
    let (status, _) =
        tokio::task::spawn_blocking(move || http_get(addr, "/api/digests?sort=bogus"))
            .await
            .unwrap();
    assert!(status.starts_with("HTTP/1.1 400"), "{status}");

    // Every metric the Grafana dashboard queries is one the proxy exports (a family may have
    // no samples yet: query rules' hits without rules).
    let mut exported: BTreeSet<String> = BTreeSet::new();
    for (n, l, _) in &samples {
        if n != "#family" {
            exported.insert(n.clone());
            continue;
        }
        let (name, kind) = (&l["name"], l["type"].as_str());
        let suffixes: &[&str] = match kind {
            "counter" => &["_total"],
            "histogram" => &["_bucket", "_sum", "_count"],
            _ => &[""],
        };
        for s in suffixes {
            exported.insert(format!("{name}{s}"));
        }
    }
    let dashboard: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../dashboards/sluice-grafana.json"
        ))
        .expect("dashboards/sluice-grafana.json"),
    )
    .expect("the dashboard is JSON");
    let metric = regex::Regex::new(r"\bsluice_[a-z0-9_]+").unwrap();
    let mut used = BTreeSet::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        for target in panel["targets"].as_array().expect("targets") {
            let expr = target["expr"].as_str().expect("expr");
            for m in metric.find_iter(expr) {
                used.insert(m.as_str().to_string());
            }
        }
    }
    assert!(used.len() >= 15, "{used:?}");
    let unknown: Vec<_> = used.iter().filter(|m| !exported.contains(*m)).collect();
    assert!(
        unknown.is_empty(),
        "the dashboard queries metrics the proxy does not export: {unknown:?}\nexported: {exported:?}"
    );
}
