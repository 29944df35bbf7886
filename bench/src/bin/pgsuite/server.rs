//! The PostgreSQL server every target leads to: started with the comparison's settings, the
//! role the clients log in as, and pgbench's tables.

use super::*;

/// Starts the server in `dir` (trusting the floor's address when `floor` runs), prints its
/// settings and creates the role.
pub(super) fn start_server(o: &Opts, dir: &Path, floor: bool) -> Result<PgServer, String> {
    let settings: Vec<String> = [
        format!("max_connections={PG_MAX_CONNECTIONS}"),
        "shared_buffers=256MB".into(),
        "fsync=off".into(),
        "synchronous_commit=off".into(),
        "full_page_writes=off".into(),
        "max_wal_size=4GB".into(),
        "password_encryption=scram-sha-256".into(),
    ]
    .to_vec();
    eprintln!("starting PostgreSQL ...");
    // The floor sends no password: its address only is trusted, and only when it runs.
    let floor_hba = if floor {
        format!("host all {ROLE} {FLOOR_SOURCE}/32 trust\n")
    } else {
        String::new()
    };
    let server = PgServer::start(
        &dir.join("pg"),
        &settings,
        &format!("host all {ROLE} 127.0.0.1/32 scram-sha-256\n{floor_hba}"),
    )?;
    let version = server.sql("SHOW server_version")?;
    println!(
        "# server: PostgreSQL {version}, -c {} (pg_hba: {ROLE} by scram-sha-256 over TCP{})",
        settings.join(" -c "),
        if floor_hba.is_empty() {
            String::new()
        } else {
            format!("; trusted from {FLOOR_SOURCE}, the floor's address")
        }
    );
    println!(
        "# role {ROLE}: {}",
        match o.scram_iterations {
            Some(n) => format!(
                "one SCRAM-SHA-256 secret of {n} iterations stored by PostgreSQL, sluice and PgBouncer (Pgpool-II: the plaintext password)"
            ),
            None => "the plaintext password stored by every target (SCRAM-SHA-256 verifiers of 4,096 iterations)".into(),
        }
    );
    server.sql(&format!(
        "CREATE ROLE {ROLE} LOGIN PASSWORD '{}'; GRANT CREATE ON SCHEMA public TO {ROLE}",
        stored_password()
    ))?;
    Ok(server)
}

/// Creates pgbench's tables as the role (`pgbench -i -s --scale`) and prints their size.
pub(super) fn load_tables(o: &Opts, server: &PgServer, pgbench_bin: &Path) -> Result<(), String> {
    eprintln!("pgbench -i -s {} ...", o.scale);
    let mut init = Command::new(pgbench_bin);
    init.env("PGPASSWORD", PASSWORD)
        .args(["-i", "-q", "-h", "127.0.0.1", "-U", ROLE])
        .arg("-s")
        .arg(o.scale.to_string())
        .arg("-p")
        .arg(server.port.to_string())
        .arg(DATABASE);
    let (status, out, err) = sluice_bench::pg::run_bounded(init, Duration::from_secs(900))?;
    if !status.success() {
        return Err(format!("pgbench -i failed ({status}): {out}{err}"));
    }
    println!(
        "# data: pgbench -i -s {} as {ROLE} ({} accounts)",
        o.scale,
        server.sql("SELECT count(*) FROM pgbench_accounts")?
    );
    Ok(())
}
