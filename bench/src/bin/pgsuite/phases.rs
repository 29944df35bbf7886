//! The pgbench phases against the main runs' targets, in the order they run: the warm-up, the
//! grid (workloads × protocols × client counts × targets), the CPU rounds, the equal-rate
//! rounds and connect per transaction.

use super::*;

/// Whether `target` is in the CPU comparison's rounds: sluice and PgBouncer (and the floor).
fn in_cpu_rounds(target: &str) -> bool {
    CPU_COMPARED.contains(&target) || target == "floor"
}

/// What every pgbench run of the phases shares: the options, the server, pgbench, and where
/// its transaction logs go.
pub(super) struct Runner<'a> {
    o: &'a Opts,
    server: &'a PgServer,
    pgbench_bin: &'a Path,
    logs: PathBuf,
}

impl<'a> Runner<'a> {
    /// A runner whose pgbench logs go to a new directory in `dir`.
    pub(super) fn new(
        o: &'a Opts,
        server: &'a PgServer,
        pgbench_bin: &'a Path,
        dir: &Path,
    ) -> Result<Runner<'a>, String> {
        let logs = dir.join("pgbench-logs");
        std::fs::create_dir_all(&logs).map_err(|e| e.to_string())?;
        Ok(Runner {
            o,
            server,
            pgbench_bin,
            logs,
        })
    }

    /// pgbench against `port` with `args`, with its sampled transaction log when `log`.
    fn pgbench(&self, port: u16, args: Vec<String>, log: bool) -> Pgbench<'_> {
        Pgbench {
            bin: self.pgbench_bin,
            port,
            user: ROLE,
            password: PASSWORD,
            database: DATABASE,
            args,
            log: log.then_some((self.logs.as_path(), SAMPLING_RATE)),
            timeout: Duration::from_secs(u64::from(self.o.time) + 240),
        }
    }

    /// Select-only straight to the server for up to 3 s, before anything is measured.
    pub(super) fn warm_up(&self) -> Result<(), String> {
        let warm = self.o.time.min(3);
        eprintln!("warm-up: select-only, 8 clients, {warm} s, direct");
        self.pgbench(
            self.server.port,
            [
                "-b",
                "select-only",
                "-c",
                "8",
                "-j",
                "2",
                "-T",
                &warm.to_string(),
            ]
            .map(String::from)
            .to_vec(),
            false,
        )
        .run()
        .map_err(|e| format!("warm-up: {e}"))?;
        Ok(())
    }

    /// One pgbench run of the grid (held to `rate` tps with one), measured.
    fn grid_run(
        &self,
        t: &mut Target,
        workload: &str,
        mode: &str,
        c: u32,
        rate: Option<u32>,
    ) -> Result<Row, String> {
        if workload == "tpcb-like" {
            // What pgbench does before a run without -n: every run starts alike.
            for sql in [
                "VACUUM pgbench_branches",
                "VACUUM pgbench_tellers",
                "TRUNCATE pgbench_history",
            ] {
                self.server.sql(sql)?;
            }
        }
        let mut args: Vec<String> = vec![
            "-b".into(),
            workload.into(),
            "-M".into(),
            mode.into(),
            "-c".into(),
            c.to_string(),
            "-j".into(),
            jobs(c).to_string(),
            "-T".into(),
            duration(self.o, c).to_string(),
        ];
        if let Some(rate) = rate {
            args.extend(["-R".into(), rate.to_string()]);
        }
        let bench = self.pgbench(t.port, args, true);
        Ok(measure(t, self.server, &bench, workload, mode, c, true))
    }

    /// pgbench across workloads, protocols, client counts and targets.
    pub(super) fn grid(&self, targets: &mut [Target]) -> Result<Vec<Row>, String> {
        let o = self.o;
        let cells = |w: &str, m: &str| targets.iter().filter(|t| runs(t.name, w, m)).count();
        let total: usize = o
            .workloads
            .iter()
            .flat_map(|w| o.modes.iter().map(move |m| (w, m)))
            .map(|(w, m)| cells(w, m) * o.clients.len())
            .sum();
        let mut rows: Vec<Row> = Vec::new();
        for workload in &o.workloads {
            for mode in &o.modes {
                for &c in &o.clients {
                    for t in targets.iter_mut().filter(|t| runs(t.name, workload, mode)) {
                        let row = self.grid_run(t, workload, mode, c, None)?;
                        progress(rows.len() + 1, total, &row);
                        rows.push(row);
                    }
                }
            }
        }
        Ok(rows)
    }

    /// The CPU comparison's rounds: the grid's select-only runs of the compared targets, and
    /// `--cpu-runs` - 1 further rounds of them, back to back.
    pub(super) fn cpu_rounds(
        &self,
        targets: &mut [Target],
        grid: &[Row],
    ) -> Result<Vec<Row>, String> {
        let o = self.o;
        let mut cpu_rounds: Vec<Row> = grid
            .iter()
            .filter(|r| r.workload == "select-only" && in_cpu_rounds(r.target))
            .cloned()
            .collect();
        if !o.workloads.iter().any(|w| w == "select-only") {
            return Ok(cpu_rounds);
        }
        let per_round: usize = o
            .modes
            .iter()
            .map(|m| {
                let n = targets
                    .iter()
                    .filter(|t| in_cpu_rounds(t.name) && runs(t.name, "select-only", m));
                n.count() * o.clients.len()
            })
            .sum();
        let total = per_round * o.cpu_runs.saturating_sub(1) as usize;
        let mut done = 0;
        for _ in 1..o.cpu_runs {
            for mode in &o.modes {
                for &c in &o.clients {
                    for t in targets
                        .iter_mut()
                        .filter(|t| in_cpu_rounds(t.name) && runs(t.name, "select-only", mode))
                    {
                        let row = self.grid_run(t, "select-only", mode, c, None)?;
                        done += 1;
                        progress(done, total, &row);
                        cpu_rounds.push(row);
                    }
                }
            }
        }
        Ok(cpu_rounds)
    }

    /// With `--equal-rate`: the CPU rounds again, the compared targets held to one rate.
    pub(super) fn equal_rate(
        &self,
        targets: &mut [Target],
        grid: &[Row],
    ) -> Result<Option<rate::EqualRate>, String> {
        if self.o.equal_rate == 0 {
            return Ok(None);
        }
        let rounds = rate::rounds(
            grid,
            self.o.equal_rate,
            self.o.cpu_runs,
            targets,
            in_cpu_rounds,
            |t, mode, c, r| self.grid_run(t, "select-only", mode, c, Some(r)),
        )?;
        Ok(Some(rounds))
    }

    /// Connect per transaction (`-C`), select-only, in `--connect-runs` rounds.
    pub(super) fn connect_rounds(&self, targets: &mut [Target]) -> ConnectRuns {
        let o = self.o;
        // Every round runs each target once, in turn; a target's row is its median round.
        let mut connect_runs: Vec<Row> = Vec::new();
        // (Not the floor: it asks no password, so its logins are not comparable.)
        let connecting = targets.iter().filter(|t| t.name != "floor").count();
        let total = o.connect_clients.len() * connecting * o.connect_runs as usize;
        for &c in (0..o.connect_runs).flat_map(|_| &o.connect_clients) {
            for t in targets.iter_mut().filter(|t| t.name != "floor") {
                let args: Vec<String> = vec![
                    "-C".into(),
                    "-b".into(),
                    "select-only".into(),
                    "-M".into(),
                    "simple".into(),
                    "-c".into(),
                    c.to_string(),
                    // A thread per client: pgbench logs in synchronously, so with fewer threads
                    // than clients only as many logins as threads are ever under way.
                    "-j".into(),
                    c.to_string(),
                    "-T".into(),
                    o.time.to_string(),
                ];
                let bench = self.pgbench(t.port, args, true);
                let row = measure(t, self.server, &bench, "select-only -C", "simple", c, false);
                progress(connect_runs.len() + 1, total, &row);
                connect_runs.push(row);
            }
        }
        ConnectRuns::new(connect_runs)
    }
}

/// pgbench's threads (`-j`) for `clients` clients: one per client, at most 2.
fn jobs(clients: u32) -> u32 {
    clients.min(2)
}

/// pgbench's duration for a run: `--time` plus 30 ms per client for its logins (pgbench's
/// duration includes them, its tps leaves them out).
pub(super) fn duration(o: &Opts, clients: u32) -> u32 {
    o.time + (clients * 30).div_ceil(1000)
}
