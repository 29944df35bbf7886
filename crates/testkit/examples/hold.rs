//! Starts a primary with N replicas and keeps them until /tmp/sluice-hold is removed; prints
//! the ports. For manual experiments: `cargo run -p sluice-testkit --example hold -- 2`.
// A tool around the proxy (tests, benchmarks, fuzzing): a broken invariant or a failed
// set-up step is reported by panicking, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]
fn main() {
    let replicas = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(2);
    let topo = sluice_testkit::Topology::start(sluice_testkit::TopologyOptions {
        replicas,
        ..Default::default()
    })
    .expect("topology");
    let ports: Vec<String> = topo.servers.iter().map(|s| s.port.to_string()).collect();
    std::fs::write("/tmp/sluice-hold", ports.join(" ")).unwrap();
    println!("ports: {}", ports.join(" "));
    while std::path::Path::new("/tmp/sluice-hold").exists() {
        std::thread::sleep(std::time::Duration::from_millis(300));
    }
}
