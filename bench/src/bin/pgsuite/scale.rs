//! The runs at scale: many clients on a few server connections, and the memory of idle
//! clients.

use super::*;

/// What a run with `--many-clients` clients measured.
pub(super) struct ManyResult {
    pub(super) proxy: &'static str,
    pub(super) result: Result<PgbenchResult, String>,
    pub(super) max_server_connections: u64,
    pub(super) samples: u64,
    pub(super) cpu_us_per_txn: Option<f64>,
    pub(super) sample_error: Option<String>,
}

/// The many-clients runs (none with `--many-clients 0`): through sluice, and through
/// PgBouncer when it runs (`pgbouncer`).
pub(super) fn many_clients_runs(
    o: &Opts,
    rt: &tokio::runtime::Runtime,
    dir: &Path,
    server: &PgServer,
    pgbench_bin: &Path,
    pgbouncer: Option<&PathBuf>,
) -> Vec<ManyResult> {
    let mut many: Vec<ManyResult> = Vec::new();
    if o.many_clients > 0 {
        if o.wants("sluice") {
            many.push(many_clients(o, rt, dir, server, pgbench_bin, None));
        }
        // For scale: the same through PgBouncer with the same number of server connections.
        if let Some(bin) = pgbouncer {
            many.push(many_clients(o, rt, dir, server, pgbench_bin, Some(bin)));
        }
    }
    many
}

/// pgbench select-only with `--many-clients` clients through a fresh proxy allowed at most
/// `--server-connections` server connections (sluice: half per hostgroup; PgBouncer, when
/// `pgbouncer`: its pool), sampling the role's client backends in `pg_stat_activity` every
/// 50 ms.
pub(super) fn many_clients(
    o: &Opts,
    rt: &tokio::runtime::Runtime,
    dir: &Path,
    server: &PgServer,
    pgbench_bin: &Path,
    pgbouncer: Option<&PathBuf>,
) -> ManyResult {
    let proxy = if pgbouncer.is_some() {
        "pgbouncer"
    } else {
        "sluice"
    };
    let logs = dir.join("pgbench-logs");
    let failed = |e: String| ManyResult {
        proxy,
        result: Err(e),
        max_server_connections: 0,
        samples: 0,
        cpu_us_per_txn: None,
        sample_error: None,
    };
    let port = match free_port() {
        Ok(p) => p,
        Err(e) => return failed(e),
    };
    let writer = o.server_connections / 2;
    let reader = o.server_connections - writer;
    let started = match pgbouncer {
        Some(bin) => start_pgbouncer(
            bin,
            dir,
            "many",
            port,
            server.port,
            o.many_clients + 1000,
            o.server_connections,
        ),
        None => start_sluice(
            dir,
            "many",
            &sluice_config(port, &server.addr(), o.sluice_threads, writer, reader),
            port,
        ),
    };
    let mut proc = match started {
        Ok(p) => p,
        Err(e) => return failed(e),
    };
    eprintln!(
        "{} clients through {proxy}, at most {} server connections ...",
        o.many_clients, o.server_connections
    );
    let stop = Arc::new(AtomicBool::new(false));
    let max_seen = Arc::new(AtomicU64::new(0));
    let samples = Arc::new(AtomicU64::new(0));
    let deadline = Instant::now() + Duration::from_secs(u64::from(o.time) + 300);
    let sampler = {
        let (stop, max_seen, samples) = (stop.clone(), max_seen.clone(), samples.clone());
        let server_port = server.port;
        rt.spawn(async move {
            let mut c = PgClient::connect_within(
                Duration::from_secs(10),
                server_port,
                "postgres",
                "",
                DATABASE,
            )
            .await?;
            let q = format!("SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend' AND usename = '{ROLE}'");
            while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
                let n: u64 = c
                    .query_one(&q)
                    .await?
                    .parse()
                    .map_err(|e| format!("count: {e}"))?;
                max_seen.fetch_max(n, Ordering::Relaxed);
                samples.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            c.close().await;
            Ok::<(), String>(())
        })
    };
    let before = tree_cpu_micros(proc.pid());
    let bench = Pgbench {
        bin: pgbench_bin,
        port,
        user: ROLE,
        password: PASSWORD,
        database: DATABASE,
        args: vec![
            "-b".into(),
            "select-only".into(),
            "-M".into(),
            "simple".into(),
            "-c".into(),
            o.many_clients.to_string(),
            "-j".into(),
            "2".into(),
            "-T".into(),
            duration(o, o.many_clients).to_string(),
        ],
        log: Some((&logs, SAMPLING_RATE)),
        timeout: Duration::from_secs(u64::from(duration(o, o.many_clients)) + 300),
    };
    let (mut result, snap) = run_watched(
        Some(proc.pid()),
        port,
        o.many_clients,
        bench.timeout,
        || bench.run(),
    );
    let after = tree_cpu_micros(proc.pid());
    stop.store(true, Ordering::Relaxed);
    let sample_error = match rt.block_on(sampler) {
        Ok(Ok(())) => None,
        Ok(Err(e)) => Some(e),
        Err(e) => Some(e.to_string()),
    };
    if let (Ok(_), Some(e)) = (&result, proc.exited()) {
        result = Err(format!("{e} during the run"));
    }
    let (cpu_us_per_txn, _) = proxy_cpu_per_txn(snap, before, after, &result);
    match &result {
        Ok(r) => eprintln!(
            "  {:.0} tps, {} failed, {} aborted clients, max {} server connections over {} samples",
            r.tps,
            r.failed,
            r.aborted_clients,
            max_seen.load(Ordering::Relaxed),
            samples.load(Ordering::Relaxed)
        ),
        Err(e) => eprintln!("  FAILED: {e}"),
    }
    ManyResult {
        proxy,
        result,
        max_server_connections: max_seen.load(Ordering::Relaxed),
        samples: samples.load(Ordering::Relaxed),
        cpu_us_per_txn,
        sample_error,
    }
}

/// Memory of a proxy holding idle clients.
pub(super) struct IdleResult {
    pub(super) clients: u64,
    pub(super) rss_before: u64,
    pub(super) rss_idle: u64,
    pub(super) rss_after_query: u64,
    pub(super) login_secs: f64,
}

/// The idle memory runs (none with `--idle 0`): sluice's, and PgBouncer's when it runs
/// (`pgbouncer`).
pub(super) fn idle_runs(
    o: &Opts,
    rt: &tokio::runtime::Runtime,
    dir: &Path,
    server: &PgServer,
    pgbouncer: Option<&PathBuf>,
) -> Vec<(&'static str, Result<IdleResult, String>)> {
    let mut idle: Vec<(&'static str, Result<IdleResult, String>)> = Vec::new();
    if o.idle > 0 {
        if o.wants("sluice") {
            idle.push(("sluice", idle_memory(o, rt, dir, server, None)));
        }
        if let Some(bin) = pgbouncer {
            idle.push(("pgbouncer", idle_memory(o, rt, dir, server, Some(bin))));
        }
    }
    idle
}

/// Opens `--idle` logged-in connections to a fresh proxy (sluice, or PgBouncer when `bin`),
/// measures its RSS before, with them idle, and after each ran one `SELECT 1`.
pub(super) fn idle_memory(
    o: &Opts,
    rt: &tokio::runtime::Runtime,
    dir: &Path,
    server: &PgServer,
    pgbouncer: Option<&PathBuf>,
) -> Result<IdleResult, String> {
    let port = free_port()?;
    let proc = match pgbouncer {
        Some(bin) => start_pgbouncer(
            bin,
            dir,
            "idle",
            port,
            server.port,
            o.idle + 1000,
            POOL_SIZE,
        )?,
        None => start_sluice(
            dir,
            "idle",
            &sluice_config(port, &server.addr(), o.sluice_threads, POOL_SIZE, POOL_SIZE),
            port,
        )?,
    };
    let pid = proc.pid();
    let n = o.idle;
    eprintln!("idle clients: {n} to {} ...", proc.name);
    rt.block_on(async move {
        // One client first: the pool and whatever a first login sets up exist before "before".
        let mut first =
            PgClient::connect_within(Duration::from_secs(20), port, ROLE, PASSWORD, DATABASE)
                .await?;
        first.query_one("SELECT 1").await?;
        tokio::time::sleep(Duration::from_secs(1)).await;
        let rss_before = rss_bytes(pid);
        let started = Instant::now();
        let limit = Arc::new(tokio::sync::Semaphore::new(64));
        let mut tasks = Vec::with_capacity(n as usize);
        for _ in 0..n {
            let limit = limit.clone();
            tasks.push(tokio::spawn(async move {
                let _permit = limit.acquire_owned().await.map_err(|e| e.to_string())?;
                PgClient::connect_within(Duration::from_secs(60), port, ROLE, PASSWORD, DATABASE)
                    .await
            }));
        }
        let mut clients = Vec::with_capacity(n as usize);
        let mut first_error = None;
        for t in tasks {
            match t.await {
                Ok(Ok(c)) => clients.push(c),
                Ok(Err(e)) => {
                    first_error.get_or_insert(e);
                }
                Err(e) => {
                    first_error.get_or_insert(e.to_string());
                }
            }
        }
        let login_secs = started.elapsed().as_secs_f64();
        if let Some(e) = first_error {
            return Err(format!(
                "{} of {n} logins failed, the first: {e}",
                n as usize - clients.len()
            ));
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
        let rss_idle = rss_bytes(pid);
        // Each runs one query, 64 at a time.
        let mut queried = Vec::with_capacity(clients.len());
        let mut rest = clients.into_iter();
        loop {
            let batch: Vec<PgClient> = rest.by_ref().take(64).collect();
            if batch.is_empty() {
                break;
            }
            let handles: Vec<_> = batch
                .into_iter()
                .map(|mut c| {
                    tokio::spawn(async move {
                        tokio::time::timeout(Duration::from_secs(30), c.query_one("SELECT 1"))
                            .await
                            .map_err(|_| "SELECT 1 took more than 30 s".to_string())??;
                        Ok::<PgClient, String>(c)
                    })
                })
                .collect();
            for h in handles {
                queried.push(h.await.map_err(|e| e.to_string())??);
            }
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        let rss_after_query = rss_bytes(pid);
        drop(queried);
        first.close().await;
        eprintln!(
            "  RSS {} KiB before, {} KiB with {n} idle clients, {} KiB after a query each",
            rss_before / 1024,
            rss_idle / 1024,
            rss_after_query / 1024
        );
        Ok(IdleResult {
            clients: u64::from(n),
            rss_before,
            rss_idle,
            rss_after_query,
            login_secs,
        })
    })
}
