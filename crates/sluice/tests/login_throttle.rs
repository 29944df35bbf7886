//! Repeated failed logins from one address: counted per address (in the handshake and in
//! COM_CHANGE_USER), then the address is blocked for `[login] block_time` with error 1129,
//! while other addresses log in as usual; the block expires by itself.
// A tool around the proxy (tests, benchmarks, fuzzing): a broken invariant or a failed
// set-up step is reported by panicking, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::raw::{err_text, Raw, CLIENT_CAPS};
use sluice_mysql::wire::consts::NATIVE_PASSWORD;
use std::net::Ipv4Addr;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

/// Logs in from `from` with `password`; the final OK or ERR packet, or the error sent in
/// place of the greeting.
async fn login_from(from: Ipv4Addr, port: u16, password: &str) -> (u16, String) {
    match Raw::connect_from(from, port).await {
        Err(p) => err_text(&p).expect("an error in place of the greeting"),
        Ok(mut r) => {
            let p = r
                .hello("app", password, NATIVE_PASSWORD, CLIENT_CAPS, None)
                .await;
            err_text(&p).unwrap_or((0, "OK".into()))
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repeated_failures_block_the_address_until_the_block_expires() {
    let env = common::start(
        0,
        "\n[login]\nmax_failures = 3\nfailure_window = \"10m\"\nblock_time = \"10s\"\nfailure_delay = \"50ms\"\n",
    )
    .await;
    let (attacker, other) = (Ipv4Addr::new(127, 0, 0, 2), Ipv4Addr::new(127, 0, 0, 3));
    for _ in 0..3 {
        let (code, msg) = login_from(attacker, env.port, "guess").await;
        assert_eq!(code, 1045, "{msg}");
    }
    // Blocked: even the right password is refused, before the greeting, with 1129.
    let (code, msg) = login_from(attacker, env.port, "app").await;
    assert_eq!(code, 1129, "{msg}");
    assert!(
        msg.starts_with("Host '127.0.0.2' is blocked because of many failed logins; try again in"),
        "{msg}"
    );
    // Other addresses are not affected.
    assert_eq!(login_from(other, env.port, "app").await, (0, "OK".into()));
    assert_eq!(env.proxy.rt.throttle.failures.load(Relaxed), 3);
    assert!(env.proxy.rt.throttle.refused.load(Relaxed) >= 1);
    let admin = env.admin(None).await;
    let addr = admin.addr;
    let (_, metrics) =
        tokio::task::spawn_blocking(move || common::http::request(addr, "GET", "/metrics", None))
            .await
            .unwrap();
    assert!(
        metrics.contains("sluice_login_failures_total{} 3\n"),
        "{metrics}"
    );
    assert!(
        metrics.contains("sluice_login_blocked_total{} "),
        "{metrics}"
    );

    // Failed changes of user count too.
    let mut r = Raw::connect_from(other, env.port).await.expect("greeting");
    let p = r
        .hello("app", "app", NATIVE_PASSWORD, CLIENT_CAPS, Some("test"))
        .await;
    assert_eq!(p.payload[0], 0x00);
    for _ in 0..3 {
        let p = r.change_user("app", "guess", NATIVE_PASSWORD, None).await;
        assert_eq!(err_text(&p).map(|e| e.0), Some(1045));
    }
    assert_eq!(login_from(other, env.port, "app").await.0, 1129);

    // The block expires by itself.
    let started = std::time::Instant::now();
    loop {
        let (code, msg) = login_from(attacker, env.port, "app").await;
        if code == 0 {
            break;
        }
        assert_eq!(code, 1129, "{msg}");
        assert!(started.elapsed() < Duration::from_secs(60), "still blocked");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // A reload applies [login]: without blocking, failures no longer block.
    let mut cfg = (*env.proxy.rt.loaded.load_full()).clone();
    cfg.login.max_failures = 0;
    let changes = env.running.process.reload(cfg).await.expect("reload");
    assert!(
        changes.iter().any(|c| c == "[login] settings"),
        "{changes:?}"
    );
    let third = Ipv4Addr::new(127, 0, 0, 4);
    for _ in 0..5 {
        assert_eq!(login_from(third, env.port, "guess").await.0, 1045);
    }
    assert_eq!(login_from(third, env.port, "app").await, (0, "OK".into()));
}
