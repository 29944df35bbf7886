//! pgsuite's options: parsing them and saying them back (the run's header repeats them).

use super::*;

const USAGE: &str = "usage: pgsuite [--time SECS] [--clients 1,16,64,256] [--workloads select-only,tpcb-like] [--modes simple,prepared] [--cpu-runs 3] [--equal-rate PCT] [--connect-clients 1,16] [--connect-runs 3] [--many-clients 1000] [--server-connections 50] [--idle 5000] [--scale 10] [--plots DIR] [--sluice-threads N] [--scram-iterations N] [--targets direct,sluice,pgbouncer,haproxy,pgpool (and floor: bench/src/bin/pgfloor.rs, only when named)]";

pub(super) struct Opts {
    pub(super) time: u32,
    pub(super) clients: Vec<u32>,
    pub(super) workloads: Vec<String>,
    pub(super) modes: Vec<String>,
    /// Rounds of the select-only runs of sluice and PgBouncer (the first is the grid's):
    /// their CPU per transaction differs by less than it drifts from one run to the next, so
    /// the verdict compares medians, and each round's two runs ran back to back.
    pub(super) cpu_runs: u32,
    /// With a value: the CPU rounds again, every compared target held to the same rate, this
    /// share (%) of the slowest one's tps in the grid (see `rate.rs`); 0: not run.
    pub(super) equal_rate: u32,
    pub(super) connect_clients: Vec<u32>,
    /// Rounds of the `-C` runs: every target once a round, in turn, so that a drift of the
    /// machine's speed touches all of them alike; the table gives each target's median.
    pub(super) connect_runs: u32,
    pub(super) many_clients: u32,
    pub(super) server_connections: u32,
    pub(super) idle: u32,
    pub(super) scale: u32,
    /// Where the charts go; none without `--plots` (a partial run does not overwrite the
    /// committed ones).
    pub(super) plots: Option<PathBuf>,
    pub(super) sluice_threads: u32,
    /// PBKDF2 iterations of the stored SCRAM secret; none: PASSWORD stored in plaintext.
    pub(super) scram_iterations: Option<u32>,
    pub(super) targets: Vec<String>,
}

fn list_u32(flag: &str, v: &str, allow_empty: bool) -> Result<Vec<u32>, String> {
    if allow_empty && (v.is_empty() || v == "none") {
        return Ok(Vec::new());
    }
    v.split(',')
        .map(|t| t.trim().parse().ok().filter(|&n: &u32| n > 0))
        .collect::<Option<Vec<u32>>>()
        .filter(|t| !t.is_empty())
        .ok_or(format!("{flag} {v}: want a list like 1,16,64"))
}

fn list_of(flag: &str, v: &str, known: &[&str]) -> Result<Vec<String>, String> {
    let items: Vec<String> = v.split(',').map(|w| w.trim().to_string()).collect();
    match items.iter().find(|w| !known.contains(&w.as_str())) {
        Some(w) => Err(format!(
            "{flag}: unknown {w:?} (one of {})",
            known.join(", ")
        )),
        None => Ok(items),
    }
}

impl Opts {
    pub(super) fn parse(args: impl Iterator<Item = String>) -> Result<Opts, String> {
        let mut o = Opts {
            time: 10,
            clients: vec![1, 16, 64, 256],
            workloads: WORKLOADS.map(String::from).to_vec(),
            modes: vec!["simple".into(), "prepared".into()],
            cpu_runs: 3,
            equal_rate: 0,
            connect_clients: vec![1, 16],
            connect_runs: 3,
            many_clients: 1000,
            server_connections: 50,
            idle: 5000,
            scale: 10,
            plots: None,
            sluice_threads: 1,
            scram_iterations: None,
            targets: ALL_TARGETS.map(String::from).to_vec(),
        };
        let mut args = args;
        while let Some(a) = args.next() {
            if a == "--help" || a == "-h" {
                return Err(USAGE.into());
            }
            let v = args
                .next()
                .ok_or_else(|| format!("{a} needs a value\n{USAGE}"))?;
            let num = |min: u32| {
                v.parse::<u32>()
                    .ok()
                    .filter(|&n| n >= min)
                    .ok_or(format!("{a} {v}: want a number >= {min}"))
            };
            match a.as_str() {
                "--time" => o.time = num(1)?,
                "--clients" | "--threads" => o.clients = list_u32(&a, &v, true)?,
                "--workloads" => o.workloads = list_of(&a, &v, &WORKLOADS)?,
                "--modes" => o.modes = list_of(&a, &v, &MODES)?,
                "--connect-clients" => o.connect_clients = list_u32(&a, &v, true)?,
                "--connect-runs" => o.connect_runs = num(1)?,
                "--cpu-runs" => o.cpu_runs = num(1)?,
                "--equal-rate" => {
                    o.equal_rate = num(1)?;
                    if o.equal_rate > 100 {
                        return Err(format!("{a} {v}: want a share of 1 to 100 (%)"));
                    }
                }
                "--many-clients" => o.many_clients = num(0)?,
                "--server-connections" => o.server_connections = num(2)?,
                "--idle" => o.idle = num(0)?,
                "--scale" => o.scale = num(1)?,
                "--plots" => o.plots = Some(PathBuf::from(v)),
                "--sluice-threads" => o.sluice_threads = num(0)?,
                "--scram-iterations" => o.scram_iterations = Some(num(1)?),
                "--targets" => {
                    let known: Vec<&str> =
                        ALL_TARGETS.iter().chain(&OPT_IN_TARGETS).copied().collect();
                    o.targets = list_of(&a, &v, &known)?;
                    if !o.targets.iter().any(|t| t == "direct") {
                        o.targets.insert(0, "direct".into());
                    }
                }
                other => return Err(format!("unknown argument {other}\n{USAGE}")),
            }
        }
        Ok(o)
    }

    /// Whether `--targets` names `target`.
    pub(super) fn wants(&self, target: &str) -> bool {
        self.targets.iter().any(|x| x == target)
    }

    pub(super) fn describe(&self) -> String {
        let j = |v: &[u32]| {
            let s: Vec<String> = v.iter().map(u32::to_string).collect();
            if s.is_empty() {
                "none".into()
            } else {
                s.join(",")
            }
        };
        format!(
            "--time {} --clients {} --workloads {} --modes {} --cpu-runs {} --equal-rate {} --connect-clients {} --connect-runs {} --many-clients {} --server-connections {} --idle {} --scale {} --plots {} --sluice-threads {} --scram-iterations {} --targets {}",
            self.time,
            j(&self.clients),
            self.workloads.join(","),
            self.modes.join(","),
            self.cpu_runs,
            self.equal_rate,
            j(&self.connect_clients),
            self.connect_runs,
            self.many_clients,
            self.server_connections,
            self.idle,
            self.scale,
            self.plots
                .as_ref()
                .map_or("none".into(), |p| p.display().to_string()),
            self.sluice_threads,
            self.scram_iterations
                .map_or("none".into(), |n| n.to_string()),
            self.targets.join(",")
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_options() {
        let o = Opts::parse(
            [
                "--time",
                "2",
                "--clients",
                "1,16",
                "--targets",
                "sluice,pgbouncer",
                "--connect-clients",
                "none",
                "--cpu-runs",
                "5",
            ]
            .map(String::from)
            .into_iter(),
        )
        .unwrap();
        assert_eq!(o.clients, [1, 16]);
        assert_eq!(o.targets, ["direct", "sluice", "pgbouncer"]);
        assert!(o.connect_clients.is_empty());
        assert!(o.describe().starts_with("--time 2 --clients 1,16 --workloads select-only,tpcb-like --modes simple,prepared --cpu-runs 5 --equal-rate 0 --connect-clients none"));
        assert!(Opts::parse(["--cpu-runs", "0"].map(String::from).into_iter()).is_err());
        assert!(Opts::parse(["--workloads", "nope"].map(String::from).into_iter()).is_err());
        assert!(Opts::parse(["--clients", "0"].map(String::from).into_iter()).is_err());
        assert!(Opts::parse(["--time"].map(String::from).into_iter()).is_err());
        let rate = |v: &str| Opts::parse(["--equal-rate", v].map(String::from).into_iter());
        assert_eq!(rate("80").unwrap().equal_rate, 80);
        assert!(rate("0").is_err() && rate("101").is_err());
    }
}
