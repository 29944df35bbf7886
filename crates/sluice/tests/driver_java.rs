//! MariaDB Connector/J with server-side prepared statements through sluice: runs
//! tests/drivers/java/Checks.java (transactions, session state across replicas, binary-protocol
//! parameter types, temporary tables, user variables, LAST_INSERT_ID, multi-statements and
//! procedures, large results and BLOBs, batches, errors, timeouts and cancel, LOAD DATA LOCAL,
//! reset, concurrent sessions) against a primary and two replicas.
//! Needs a JDK and the driver jar: `bash crates/sluice/tests/drivers/java/setup.sh`.
// A tool around the proxy (tests, benchmarks, fuzzing): a broken invariant or a failed
// set-up step is reported by panicking, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};
use tokio::io::AsyncReadExt;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connector_j_server_prepared_statements() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/drivers/java");
    let setup = dir.join("setup.sh");
    let class = dir.join("classes/Checks.class");
    let has_jar = std::fs::read_dir(dir.join("lib"))
        .map(|d| {
            d.flatten().any(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                name.starts_with("mariadb-java-client-") && name.ends_with(".jar")
            })
        })
        .unwrap_or(false);
    assert!(
        has_jar && class.exists(),
        "the Java driver test is not set up (no Connector/J jar in lib/ or no compiled Checks.class): run `bash {}`",
        setup.display()
    );
    let stale = |src: &Path| {
        let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
        modified(src) > modified(&class)
    };
    assert!(
        !stale(&dir.join("Checks.java")),
        "Checks.java changed since it was compiled: run `bash {}`",
        setup.display()
    );

    let env = common::start(2, "").await;
    let classpath = format!(
        "{}:{}",
        dir.join("classes").display(),
        dir.join("lib/*").display()
    );
    let started = Instant::now();
    let mut child = tokio::process::Command::new("java")
        .arg("-cp")
        .arg(classpath)
        .arg("Checks")
        .env("SLUICE_PORT", env.port.to_string())
        .env("PRIMARY_PORT", env.topo.primary().port.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run java ({e}): run `bash {}`", setup.display()));
    // Collect the output as it comes, so a hang still shows how far the checks got.
    let collect = |pipe: Option<Box<dyn tokio::io::AsyncRead + Send + Unpin>>| {
        tokio::spawn(async move {
            let mut buf = Vec::new();
            if let Some(mut p) = pipe {
                let _ = p.read_to_end(&mut buf).await;
            }
            String::from_utf8_lossy(&buf).into_owned()
        })
    };
    let stdout = collect(child.stdout.take().map(|p| Box::new(p) as _));
    let stderr = collect(child.stderr.take().map(|p| Box::new(p) as _));
    let status = tokio::time::timeout(Duration::from_secs(300), child.wait()).await;
    if status.is_err() {
        let _ = child.kill().await;
    }
    let (stdout, stderr) = (stdout.await.unwrap(), stderr.await.unwrap());
    println!("{stdout}");
    let status = match status {
        Ok(s) => s.expect("wait for java"),
        Err(_) => panic!(
            "Connector/J checks did not finish within 300 s:\n--- stdout ---\n{stdout}\n--- stderr ---\n{stderr}"
        ),
    };
    assert!(
        status.success(),
        "Connector/J checks failed ({status}) after {:?}:\n--- stdout ---\n{stdout}\n--- stderr ---\n{stderr}",
        started.elapsed()
    );
    println!("Connector/J checks passed in {:?}", started.elapsed());
}
