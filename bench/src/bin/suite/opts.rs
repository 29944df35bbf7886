//! suite's options: parsing them and saying them back (the run's header repeats them).

use super::*;

const USAGE: &str = "usage: suite [--time SECS] [--threads 1,16,64,256] [--workloads oltp_point_select,oltp_read_only,oltp_read_write] [--plots DIR] [--db-cpu CPUS] [--db-core N] [--sluice-threads N]";

/// The sysbench tests (bundled Lua scripts) the suite can run against the prepared tables.
const KNOWN_WORKLOADS: [&str; 10] = [
    "oltp_point_select",
    "oltp_read_only",
    "oltp_read_write",
    "oltp_write_only",
    "oltp_update_index",
    "oltp_update_non_index",
    "oltp_insert",
    "oltp_delete",
    "select_random_points",
    "select_random_ranges",
];

pub(super) struct Opts {
    pub(super) time: u32,
    pub(super) threads: Vec<u32>,
    pub(super) workloads: Vec<String>,
    pub(super) plots: PathBuf,
    pub(super) db_cpu: Option<f64>,
    /// sluice's `[proxy] worker_threads` (0: one per CPU).
    pub(super) sluice_threads: u32,
    /// Pin mariadbd (every thread) to this CPU: a database host of its own, while sysbench
    /// and the proxies run where the suite runs (start it with `taskset -c` on the others).
    pub(super) db_core: Option<u32>,
}

impl Opts {
    pub(super) fn parse(args: impl Iterator<Item = String>) -> Result<Opts, String> {
        let mut o = Opts {
            time: 10,
            threads: vec![1, 16, 64, 256],
            workloads: ["oltp_point_select", "oltp_read_only", "oltp_read_write"]
                .map(String::from)
                .to_vec(),
            plots: PathBuf::from("docs/img"),
            db_cpu: None,
            sluice_threads: 1,
            db_core: None,
        };
        let mut args = args;
        while let Some(a) = args.next() {
            if a == "--help" || a == "-h" {
                return Err(USAGE.into());
            }
            let v = args
                .next()
                .ok_or_else(|| format!("{a} needs a value\n{USAGE}"))?;
            match a.as_str() {
                "--time" => {
                    o.time = v
                        .parse()
                        .ok()
                        .filter(|&t| t > 0)
                        .ok_or(format!("--time {v}: want seconds > 0"))?
                }
                "--threads" => {
                    o.threads = v
                        .split(',')
                        .map(|t| t.trim().parse().ok().filter(|&n: &u32| n > 0))
                        .collect::<Option<Vec<u32>>>()
                        .filter(|t| !t.is_empty())
                        .ok_or(format!("--threads {v}: want a list like 1,16,64"))?
                }
                "--workloads" => {
                    o.workloads = v.split(',').map(|w| w.trim().to_string()).collect();
                    if let Some(w) = o
                        .workloads
                        .iter()
                        .find(|w| !KNOWN_WORKLOADS.contains(&w.as_str()))
                    {
                        return Err(format!(
                            "--workloads: unknown sysbench test {w:?} (one of {})",
                            KNOWN_WORKLOADS.join(", ")
                        ));
                    }
                }
                "--plots" => o.plots = PathBuf::from(v),
                "--db-cpu" => {
                    o.db_cpu = Some(
                        v.parse()
                            .ok()
                            .filter(|&c: &f64| c >= 0.01)
                            .ok_or(format!("--db-cpu {v}: want CPUs >= 0.01, like 1.0"))?,
                    )
                }
                "--db-core" => {
                    o.db_core = Some(
                        v.parse()
                            .map_err(|_| format!("--db-core {v}: want a CPU number"))?,
                    )
                }
                "--sluice-threads" => {
                    o.sluice_threads = v.parse().map_err(|_| {
                        format!("--sluice-threads {v}: want a number (0: one per CPU)")
                    })?
                }
                other => return Err(format!("unknown argument {other}\n{USAGE}")),
            }
        }
        Ok(o)
    }

    /// The options as a command line (every default spelled out).
    pub(super) fn describe(&self) -> String {
        let threads: Vec<String> = self.threads.iter().map(u32::to_string).collect();
        let mut s = format!(
            "--time {} --threads {} --workloads {} --plots {} --sluice-threads {}",
            self.time,
            threads.join(","),
            self.workloads.join(","),
            self.plots.display(),
            self.sluice_threads
        );
        if let Some(c) = self.db_cpu {
            s += &format!(" --db-cpu {c:?}");
        }
        if let Some(c) = self.db_core {
            s += &format!(" --db-core {c}");
        }
        s
    }
}
