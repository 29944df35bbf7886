//! The web dashboard in a real headless browser (Debian's chromium): the page loads against a
//! running proxy in front of a real topology, shows every server with its role, and a
//! screenshot is kept as a test artefact (target/test-artifacts/dashboard.png).

mod common;

use common::Managed;
use mysql_async::prelude::*;
use mysql_async::{Conn, Opts};
use std::path::PathBuf;
use std::process::Command;

/// Runs chromium headless on `url` with `args`; returns stdout.
fn chromium(url: &str, args: &[&str]) -> String {
    let bin = sluice_testkit::find_program("chromium", "chromium").expect("chromium");
    let profile = tempfile::tempdir().unwrap();
    let out = Command::new(bin)
        .args([
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--hide-scrollbars",
            "--window-size=1400,1000",
            // Let the page's requests complete and its script render before dumping.
            "--virtual-time-budget=10000",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(args)
        .arg(url)
        .output()
        .expect("run chromium");
    assert!(
        out.status.success(),
        "chromium failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
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
    for _ in 0..20 {
        c.query_drop("SELECT * FROM d WHERE id = 1").await.unwrap();
    }

    let url = format!("http://{}/?token=t0ken", admin.addr);
    let dom = {
        let url = url.clone();
        tokio::task::spawn_blocking(move || chromium(&url, &["--dump-dom"]))
            .await
            .unwrap()
    };
    assert!(
        dom.contains("data-loaded=\"1\""),
        "the page did not load its data:\n{dom}"
    );
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

    // Without the token, the API refuses and the page says so.
    let refused = {
        let url = format!("http://{}/", admin.addr);
        tokio::task::spawn_blocking(move || chromium(&url, &["--dump-dom"]))
            .await
            .unwrap()
    };
    assert!(refused.contains("HTTP 401"), "{refused}");

    // The screenshot, kept for people to look at.
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/test-artifacts");
    std::fs::create_dir_all(&dir).unwrap();
    let shot = dir.join("dashboard.png");
    let _ = std::fs::remove_file(&shot);
    let arg = format!("--screenshot={}", shot.display());
    tokio::task::spawn_blocking(move || chromium(&url, &[&arg]))
        .await
        .unwrap();
    let png = std::fs::read(&shot).expect("a screenshot was written");
    assert!(
        png.starts_with(b"\x89PNG") && png.len() > 10_000,
        "{} bytes",
        png.len()
    );
    eprintln!("dashboard screenshot: {}", shot.display());
}
