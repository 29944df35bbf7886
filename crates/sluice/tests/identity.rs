//! What a session sees of "the server" through sluice is what the server itself shows: the
//! handshake's version string (byte for byte, following the primary when it changes), and
//! connection ids that agree with each other.
// A tool around the proxy (tests, benchmarks, fuzzing): a broken invariant or a failed
// set-up step is reported by panicking, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_ids_agree_with_lock_ownership() {
    use mysql_async::prelude::*;
    let env = common::start(1, "").await;
    let connect = || async {
        mysql_async::Conn::new(mysql_async::Opts::from_url(&env.url("test")).unwrap())
            .await
            .unwrap()
    };
    let mut a = connect().await;
    let mut b = connect().await;
    let a_id = a.id();
    let own: u32 = a
        .query_first("SELECT CONNECTION_ID()")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(own, a_id, "CONNECTION_ID() is the handshake's id");

    let got: i64 = a
        .query_first("SELECT GET_LOCK('k', 1)")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got, 1);
    // What lock-ownership checks do (job queues, migration tools).
    let mine: i64 = a
        .query_first("SELECT IS_USED_LOCK('k') = CONNECTION_ID()")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        mine, 1,
        "the holder is this session, as on a direct connection"
    );
    let holder: u32 = a
        .query_first("SELECT IS_USED_LOCK('k')")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(holder, a_id);
    let prepared: i64 = a
        .exec_first("SELECT IS_USED_LOCK(?) = CONNECTION_ID()", ("k",))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(prepared, 1, "prepared statements too");
    let pseudo: i64 = a
        .query_first("SELECT @@pseudo_thread_id = CONNECTION_ID()")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(pseudo, 1);

    // Another session sees the holder by the id KILL understands.
    let seen: u32 = b
        .query_first("SELECT IS_USED_LOCK('k')")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(seen, a_id, "another session sees the holder's own id");
    let theirs: i64 = b
        .query_first("SELECT IS_USED_LOCK('k') = CONNECTION_ID()")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(theirs, 0);
    b.query_drop(format!("KILL {seen}")).await.unwrap();
    wait_for("the killed holder's lock is released", LONG, || {
        env.topo
            .primary()
            .sql("SELECT IS_FREE_LOCK('k')")
            .is_ok_and(|v| v.trim() == "1")
    })
    .await;
    assert!(
        a.query_drop("SELECT 1").await.is_err(),
        "the holder was killed"
    );
}

/// Most configured users do not exist on the servers (application users of another cluster,
/// say; sluice used to try one user picked from a hash map): sluice still reads the servers' version and collations at start (as the
/// monitor, or another user) instead of claiming that no server answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn startup_learns_from_healthy_servers_whoever_the_first_user_is() {
    let env = common::start_with(1, "", |text| {
        *text = text.replacen(
            "[[users]]",
            "[[users]]\nname = \"ghost\"\npassword = \"nobody\"\n\n\
             [[users]]\nname = \"ghost2\"\npassword = \"nobody\"\n\n\
             [[users]]\nname = \"ghost3\"\npassword = \"nobody\"\n\n[[users]]",
            1,
        );
    })
    .await;
    assert_eq!(env.proxy.rt.config.users[0].name, "ghost");
    assert!(
        env.proxy.info.learned(),
        "version and collations read from a healthy server at start"
    );
    assert_eq!(
        greeting_version(env.port).await,
        greeting_version(env.topo.primary().port).await
    );
}
