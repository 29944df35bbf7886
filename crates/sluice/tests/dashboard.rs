//! The web dashboard in a real headless browser (Debian's chromium, driven over the DevTools
//! protocol by tests/browser/chromium_cdp.js): against a running proxy in front of a real
//! topology, the page asks for the admin token, a person types it, and the page shows every
//! server with its role; a token in the URL authenticates nothing. A screenshot is kept as a
//! test artefact (target/test-artifacts/dashboard.png).
// A tool around the proxy (tests, benchmarks, fuzzing): a broken invariant or a failed
// set-up step is reported by panicking, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::Managed;
use mysql_async::prelude::*;
use mysql_async::{Conn, Opts};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Runs `steps` (see tests/browser/chromium_cdp.js) in one tab of a fresh headless chromium;
/// returns the values the steps recorded.
async fn browse(steps: Value) -> Value {
    tokio::task::spawn_blocking(move || {
        let chromium = sluice_testkit::find_program("chromium", "chromium").expect("chromium");
        let node = sluice_testkit::find_program("node", "nodejs").expect("node");
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/browser/chromium_cdp.js");
        let out = Command::new(node)
            .arg(script)
            .arg(chromium)
            .arg(steps.to_string())
            .stdin(Stdio::null())
            .output()
            .expect("run node");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "browser steps failed: {}\n{stdout}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}"))
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboard_shows_the_topology_in_a_real_browser() {
    let env = common::start_managed(Managed {
        replicas: 2,
        ..Default::default()
    })
    .await;
    let admin = env.admin(Some("t0ken")).await;
    // Some traffic, so that digests and pools have something to show.
    let mut c = Conn::new(Opts::from_url(&env.url("test")).unwrap())
        .await
        .unwrap();
    c.query_drop("CREATE TABLE d (id INT PRIMARY KEY)")
        .await
        .unwrap();
    c.query_drop("INSERT INTO d VALUES (1), (2)").await.unwrap();
    env.sync(); // the reads below go to the replicas
    for _ in 0..20 {
        c.query_drop("SELECT * FROM d WHERE id = 1").await.unwrap();
    }

    let page = format!("http://{}/", admin.addr);
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/test-artifacts");
    std::fs::create_dir_all(&dir).unwrap();
    let shot = dir.join("dashboard.png");
    let _ = std::fs::remove_file(&shot);
    let loaded = "document.body.dataset.loaded === '1'";
    let dom = "document.documentElement.outerHTML";
    let seen = browse(json!([
        // A token in the URL authenticates nothing: the page asks for it.
        {"open": format!("{page}?token=t0ken")},
        {"wait": "document.body.dataset.auth === 'needed'"},
        {"eval": loaded, "as": "loaded_with_query_token"},
        {"eval": "sessionStorage.length", "as": "stored_from_query"},
        // A wrong token is refused, and said so.
        {"type": "#token", "text": "nope"},
        {"key": "Enter"},
        {"wait": "document.body.dataset.auth === 'wrong'"},
        {"eval": "document.getElementById('login-error').textContent", "as": "wrong"},
        // The right one, typed: the page loads its data.
        {"type": "#token", "text": "t0ken"},
        {"key": "Enter"},
        {"wait": loaded},
        {"eval": dom, "as": "dom"},
        // The tab keeps it across a reload, and never in the URL.
        {"open": page},
        {"wait": loaded},
        {"eval": "location.href", "as": "href"},
        {"screenshot": shot.display().to_string()},
    ]))
    .await;
    assert_eq!(seen["loaded_with_query_token"], false, "{seen}");
    assert_eq!(seen["stored_from_query"], 0, "{seen}");
    assert_eq!(seen["wrong"], "wrong token", "{seen}");
    assert_eq!(seen["href"], page.as_str());
    let dom = seen["dom"].as_str().unwrap();
    let primary = env.topo.primary().addr();
    assert!(
        dom.contains(&format!("data-address=\"{primary}\" data-role=\"primary\"")),
        "the primary is shown with its role:\n{dom}"
    );
    for r in env.topo.replicas() {
        assert!(
            dom.contains(&format!(
                "data-address=\"{}\" data-role=\"replica\"",
                r.addr()
            )),
            "replica {} is shown with its role:\n{dom}",
            r.addr()
        );
    }
    assert!(
        dom.contains("SELECT * FROM d WHERE id = ?"),
        "top digests are shown:\n{dom}"
    );

    // The API itself takes the token from the header only.
    let addr = admin.addr;
    let (status, body) = tokio::task::spawn_blocking(move || {
        common::http::request(addr, "GET", "/api/servers?token=t0ken", None)
    })
    .await
    .unwrap();
    assert_eq!(status, 401, "{body}");

    // The screenshot, kept for people to look at.
    let png = std::fs::read(&shot).expect("a screenshot was written");
    assert!(
        png.starts_with(b"\x89PNG") && png.len() > 10_000,
        "{} bytes",
        png.len()
    );
    eprintln!("dashboard screenshot: {}", shot.display());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboard_without_a_token_loads_at_once() {
    let env = common::start(1, "").await;
    let admin = env.admin(None).await;
    let seen = browse(json!([
        {"open": format!("http://{}/", admin.addr)},
        {"wait": "document.body.dataset.loaded === '1'"},
        {"eval": "document.body.dataset.auth === undefined", "as": "no_login"},
        {"eval": "document.querySelectorAll('.server').length", "as": "servers"},
    ]))
    .await;
    assert_eq!(seen["no_login"], true, "{seen}");
    assert_eq!(seen["servers"], 2, "{seen}");
}
