//! What a session sees of "the server" through sluice is what the server itself shows: the
//! handshake's version string (byte for byte, following the primary when it changes), and
//! connection ids that agree with each other.

mod common;

use common::raw::Raw;
use common::{wait_for, Managed};
use std::time::Duration;

const LONG: Duration = Duration::from_secs(60);

async fn greeting_version(port: u16) -> String {
    Raw::connect(port).await.greeting.server_version
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_greeting_is_the_primarys_own_and_follows_a_switchover() {
    let env = common::start_managed(Managed {
        replicas: 2,
        ..Default::default()
    })
    .await;
    let direct = greeting_version(env.topo.primary().port).await;
    let through = greeting_version(env.port).await;
    assert_eq!(through, direct, "byte for byte the primary's");
    assert!(
        direct.starts_with("5.5.5-") && direct.ends_with("-log"),
        "MariaDB's prefix for MySQL clients and binary logging's suffix: {direct}"
    );

    // Replica 1 announces another version; once it is the primary, sluice announces it.
    let custom = "5.5.5-10.11.99-MariaDB-sluice-test";
    env.topo.servers[1]
        .restart_with(&[&format!(
            "--version={}",
            custom.trim_start_matches("5.5.5-")
        )])
        .unwrap();
    let replica_version = greeting_version(env.topo.servers[1].port).await;
    assert_ne!(
        replica_version, direct,
        "the restarted replica announces its own version"
    );
    wait_for("the restarted replica checked again", LONG, || {
        env.server(1).version().as_deref() == Some(replica_version.as_str())
    })
    .await;
    assert_eq!(
        greeting_version(env.port).await,
        direct,
        "still the primary's"
    );
    env.monitor()
        .switchover(Some(&env.topo.servers[1].addr()))
        .await
        .expect("switchover");
    assert_eq!(greeting_version(env.port).await, replica_version);
}
