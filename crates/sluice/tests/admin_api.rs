//! The admin API's views (hostgroups, rules, users, live sessions, drift) and actions on
//! servers (weight, drain, online), against a real topology with real clients.
// A tool around the proxy (tests, benchmarks, fuzzing): a broken invariant or a failed
// set-up step is reported by panicking, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::http::{get_json, request};
use mysql_async::prelude::*;
use mysql_async::{Conn, Opts};
use std::net::SocketAddr;

async fn get(addr: SocketAddr, path: &'static str) -> serde_json::Value {
    tokio::task::spawn_blocking(move || get_json(addr, path))
        .await
        .unwrap()
}

async fn request_async(addr: SocketAddr, method: &'static str, path: String) -> (u16, String) {
    tokio::task::spawn_blocking(move || request(addr, method, &path, None))
        .await
        .unwrap()
}

async fn post(addr: SocketAddr, path: String) -> (u16, String) {
    tokio::task::spawn_blocking(move || request(addr, "POST", &path, None))
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn views_and_server_actions() {
    let env = common::start(
        2,
        "\n[[rules]]\nname = \"answer\"\nmatch = \"^SELECT 42\"\nhostgroup = \"writer\"\n",
    )
    .await;
    let admin = env.admin(None).await;
    let addr = admin.addr;
    let url = env.url("test");
    let mut a = Conn::new(Opts::from_url(&url).unwrap()).await.unwrap();
    let mut b = Conn::new(Opts::from_url(&url).unwrap()).await.unwrap();
    a.query_drop("SELECT 42").await.unwrap();
    a.query_drop("SELECT 42").await.unwrap();
    // Session b holds a transaction open.
    b.query_drop("BEGIN").await.unwrap();
    b.query_drop("SELECT 1").await.unwrap();

    // Rules with their hit counts.
    let rules = get(addr, "/api/rules").await;
    assert_eq!(rules[0]["name"], "answer");
    assert_eq!(rules[0]["match"], "^SELECT 42");
    assert_eq!(rules[0]["hostgroup"], "writer");
    assert_eq!(rules[0]["hits"], 2);
    // Users and their connections.
    let users = get(addr, "/api/users").await;
    assert_eq!(users[0]["name"], "app");
    assert_eq!(users[0]["connections"], 2);
    // Live sessions: who, from where, pinned and why, on which backend.
    let sessions = get(addr, "/api/sessions").await;
    let list = sessions.as_array().unwrap();
    assert_eq!(list.len(), 2, "{sessions}");
    let pinned: Vec<_> = list.iter().filter(|s| s["pinned"] == true).collect();
    assert_eq!(pinned.len(), 1, "{sessions}");
    assert_eq!(pinned[0]["pinned_by"][0], "transaction", "{sessions}");
    assert_eq!(
        pinned[0]["backend"],
        env.topo.primary().addr().as_str(),
        "{sessions}"
    );
    assert!(pinned[0]["client"]
        .as_str()
        .unwrap()
        .starts_with("127.0.0.1:"));
    b.query_drop("COMMIT").await.unwrap();
    // Hostgroups.
    let hgs = get(addr, "/api/hostgroups").await;
    let reader = hgs
        .as_array()
        .unwrap()
        .iter()
        .find(|h| h["name"] == "reader")
        .expect("reader hostgroup");
    assert_eq!(reader["servers"].as_array().unwrap().len(), 2);
    assert_eq!(reader["balance"], "weighted");

    // Weight 0 on a replica: it gets no new reads; drift reports it.
    let r1 = env.topo.servers[1].addr();
    let (r1_id, r2_id) = (env.topo.servers[1].server_id, env.topo.servers[2].server_id);
    let (status, body) = post(addr, format!("/api/servers/{r1}/weight?value=0")).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        common::server_ids(&mut a, 30).await,
        [r2_id].into_iter().collect()
    );
    let drift = get(addr, "/api/drift").await;
    assert_eq!(drift[0], format!("{r1}: weight 0 (file: 1)"), "{drift}");
    post(addr, format!("/api/servers/{r1}/weight?value=1")).await;
    assert_eq!(get(addr, "/api/drift").await, serde_json::json!([]));

    // Drain the other replica: no new statements there; online brings it back.
    let r2 = env.topo.servers[2].addr();
    let (status, body) = post(addr, format!("/api/servers/{r2}/drain")).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        common::server_ids(&mut a, 30).await,
        [r1_id].into_iter().collect()
    );
    let servers = get(addr, "/api/servers").await;
    let s2 = servers
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["address"] == r2.as_str())
        .unwrap();
    assert_eq!(s2["state"], "OFFLINE (drained by operator)");
    assert!(get(addr, "/api/drift").await[0]
        .as_str()
        .unwrap()
        .ends_with("drained (file: in service)"));
    let (status, _) = post(addr, format!("/api/servers/{r2}/online")).await;
    assert_eq!(status, 200);
    assert_eq!(
        common::server_ids(&mut a, 60).await,
        [r1_id, r2_id].into_iter().collect()
    );
    // Remove a replica at runtime: reads go to the other; drift reports it; add it back.
    let (status, body) = request_async(addr, "DELETE", format!("/api/servers/{r2}")).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("removed"), "{body}");
    assert_eq!(
        common::server_ids(&mut a, 30).await,
        [r1_id].into_iter().collect()
    );
    let drift = get(addr, "/api/drift").await;
    assert_eq!(
        drift[0],
        format!("{r2}: removed over the admin API (file: present)"),
        "{drift}"
    );
    let (status, body) = post(addr, format!("/api/servers?address={r2}&hostgroup=reader")).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("added"), "{body}");
    assert_eq!(
        common::server_ids(&mut a, 60).await,
        [r1_id, r2_id].into_iter().collect()
    );
    assert_eq!(get(addr, "/api/drift").await, serde_json::json!([]));
    // The primary cannot be removed while it takes the writes.
    let primary = env.topo.primary().addr();
    let (status, body) = request_async(addr, "DELETE", format!("/api/servers/{primary}")).await;
    assert_eq!(status, 409, "{body}");
    assert!(body.contains("writer"), "{body}");
    // An address in two hostgroups (the writer serving reads too, as in many ProxySQL
    // set-ups) has an entry in each; the one added second is named `address@hostgroup`. Its
    // name acts on that entry alone, the address on both (the host).
    let (status, body) = post(
        addr,
        format!("/api/servers?address={primary}&hostgroup=reader"),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let entries = |servers: serde_json::Value| -> Vec<(String, String, u64)> {
        let mut v: Vec<_> = servers
            .as_array()
            .unwrap()
            .iter()
            .filter(|s| s["address"] == primary.as_str())
            .map(|s| {
                let state = s["state"].as_str().unwrap().to_string();
                (
                    s["name"].as_str().unwrap().to_string(),
                    state,
                    s["weight"].as_u64().unwrap(),
                )
            })
            .collect();
        v.sort();
        v
    };
    let (w, r) = (primary.clone(), format!("{primary}@reader"));
    let online = "ONLINE".to_string();
    assert_eq!(
        entries(get(addr, "/api/servers").await),
        [
            (w.clone(), online.clone(), 1),
            (r.clone(), online.clone(), 1)
        ]
    );
    let (status, body) = post(addr, format!("/api/servers/{r}/weight?value=5")).await;
    assert_eq!(status, 200, "{body}");
    let drained = "OFFLINE (drained by operator)".to_string();
    let (status, body) = post(addr, format!("/api/servers/{primary}/drain")).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        entries(get(addr, "/api/servers").await),
        [(w.clone(), drained.clone(), 1), (r.clone(), drained, 5)]
    );
    let (status, body) = post(addr, format!("/api/servers/{primary}/online")).await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = request_async(addr, "DELETE", format!("/api/servers/{r}")).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(entries(get(addr, "/api/servers").await), [(w, online, 1)]);
    assert_eq!(get(addr, "/api/drift").await, serde_json::json!([]));

    // A hostgroup is never created by a typo: refused, naming it and the existing ones;
    // nothing changes.
    let (status, body) = post(addr, format!("/api/servers?address={r2}&hostgroup=raeder")).await;
    assert_eq!(status, 400, "{body}");
    let e: serde_json::Value = serde_json::from_str(&body).unwrap();
    let e = e["error"].as_str().unwrap();
    assert!(
        e.starts_with("no hostgroup \"raeder\"; the hostgroups are \"writer\", \"reader\""),
        "{e}"
    );
    assert_eq!(get(addr, "/api/drift").await, serde_json::json!([]));
    assert_eq!(
        get(addr, "/api/hostgroups").await.as_array().unwrap().len(),
        2
    );

    // Unknown servers and bad values are refused with a reason.
    let (status, body) = post(addr, "/api/servers/10.9.9.9:1/drain".into()).await;
    assert_eq!(status, 404, "{body}");
    assert!(body.contains("no server"), "{body}");
    let (status, _) = post(addr, format!("/api/servers/{r1}/weight?value=-3")).await;
    assert_eq!(status, 400);
}
