//! A CPU cap for other processes through a cgroup v1 `cpu` controller: emulates a database on
//! its own, smaller host while everything runs on one machine. Needs root and the v1 hierarchy
//! at /sys/fs/cgroup/cpu.

use std::path::{Path, PathBuf};

/// Where the v1 `cpu` controller is mounted.
const ROOT: &str = "/sys/fs/cgroup/cpu";
/// The CFS period used for the quota, µs.
const PERIOD_US: u64 = 100_000;

/// A cgroup with a CPU quota of `cores` CPUs; processes added to it are moved back to the root
/// cgroup and the cgroup is removed on drop.
pub struct CpuCap {
    dir: PathBuf,
    cores: f64,
}

/// Throttling counters of a cgroup (`cpu.stat`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CpuStat {
    /// Periods in which the group could run.
    pub nr_periods: u64,
    /// Periods in which the group used up its quota.
    pub nr_throttled: u64,
    /// Total time the group's tasks were throttled, ns.
    pub throttled_time_ns: u64,
}

impl CpuStat {
    /// The share of the periods since `before` in which the group used up its quota (0 when
    /// no period passed).
    pub fn throttled_share_since(&self, before: &CpuStat) -> f64 {
        let periods = self.nr_periods.saturating_sub(before.nr_periods);
        self.nr_throttled.saturating_sub(before.nr_throttled) as f64 / periods.max(1) as f64
    }
}

fn write(path: &Path, value: &str) -> Result<(), String> {
    std::fs::write(path, value)
        .map_err(|e| format!("cannot write {value:?} to {}: {e}", path.display()))
}

impl CpuCap {
    /// Creates (or reuses) the cgroup `name` under the v1 `cpu` hierarchy with a quota of
    /// `cores` CPUs (for example 1.5).
    pub fn new(name: &str, cores: f64) -> Result<CpuCap, String> {
        if cores.is_nan() || cores <= 0.0 || name.is_empty() || name.contains('/') {
            return Err(format!("bad CPU cap {name:?} of {cores} cores"));
        }
        let root = Path::new(ROOT);
        if !root.join("cpu.cfs_quota_us").is_file() {
            return Err(format!(
                "no cgroup v1 cpu controller at {ROOT} (cgroup v2 only, or not mounted)"
            ));
        }
        let dir = root.join(name);
        match std::fs::create_dir(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(format!("cannot create {}: {e}", dir.display())),
        }
        let cap = CpuCap { dir, cores };
        // The kernel's minimum quota is 1 ms.
        let quota = ((cores * PERIOD_US as f64).round() as u64).max(1000);
        write(&cap.dir.join("cpu.cfs_period_us"), &PERIOD_US.to_string())?;
        write(&cap.dir.join("cpu.cfs_quota_us"), &quota.to_string())?;
        Ok(cap)
    }

    /// Moves process `pid` (all its threads: in v1, `cgroup.procs` takes the thread group)
    /// into the cgroup; threads it starts later inherit it.
    pub fn add(&self, pid: u32) -> Result<(), String> {
        write(&self.dir.join("cgroup.procs"), &pid.to_string())?;
        let threads = std::fs::read_dir(format!("/proc/{pid}/task"))
            .map(|d| d.count())
            .unwrap_or(0);
        let ours: std::collections::HashSet<u32> = self.read_ids("tasks").into_iter().collect();
        let outside = std::fs::read_dir(format!("/proc/{pid}/task"))
            .map(|d| {
                d.flatten()
                    .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()))
                    .filter(|t| !ours.contains(t))
                    .count()
            })
            .unwrap_or(0);
        if threads == 0 || outside > 0 {
            return Err(format!(
                "process {pid}: {outside} of {threads} threads are not in {}",
                self.dir.display()
            ));
        }
        Ok(())
    }

    /// Removes the cgroups left behind by benchmark processes that ended without dropping
    /// their cap: those named `<prefix>…<pid>` (the owner's pid after the last `-`) whose pid
    /// is gone. Processes still in them go back to the root cgroup first.
    pub fn remove_stale(prefix: &str) {
        let Ok(dir) = std::fs::read_dir(ROOT) else {
            return;
        };
        for e in dir.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let Some(owner) = name
                .strip_prefix(prefix)
                .and_then(|rest| rest.rsplit('-').next()?.parse::<u32>().ok())
            else {
                continue;
            };
            if !Path::new(&format!("/proc/{owner}")).exists() {
                drop(CpuCap {
                    dir: e.path(),
                    cores: 0.0,
                });
            }
        }
    }

    /// Sets `cpu.shares`: the group's weight against other processes when the CPUs are busy
    /// (a process of its own weighs 1024).
    pub fn set_shares(&self, shares: u64) -> Result<(), String> {
        write(&self.dir.join("cpu.shares"), &shares.to_string())
    }

    /// The cgroup's directory.
    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// The quota, in CPUs.
    pub fn cores(&self) -> f64 {
        self.cores
    }

    /// Thread ids in the cgroup.
    pub fn tasks(&self) -> Vec<u32> {
        self.read_ids("tasks")
    }

    /// The throttling counters.
    pub fn stat(&self) -> Result<CpuStat, String> {
        let p = self.dir.join("cpu.stat");
        let text = std::fs::read_to_string(&p).map_err(|e| format!("{}: {e}", p.display()))?;
        Ok(parse_cpu_stat(&text))
    }

    fn read_ids(&self, file: &str) -> Vec<u32> {
        std::fs::read_to_string(self.dir.join(file))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect()
    }
}

/// Parses a `cpu.stat` file.
pub fn parse_cpu_stat(text: &str) -> CpuStat {
    let mut s = CpuStat::default();
    for l in text.lines() {
        let mut f = l.split_whitespace();
        let (Some(k), Some(v)) = (f.next(), f.next().and_then(|v| v.parse().ok())) else {
            continue;
        };
        match k {
            "nr_periods" => s.nr_periods = v,
            "nr_throttled" => s.nr_throttled = v,
            "throttled_time" => s.throttled_time_ns = v,
            _ => {}
        }
    }
    s
}

impl Drop for CpuCap {
    fn drop(&mut self) {
        let root_procs = Path::new(ROOT).join("cgroup.procs");
        for pid in self.read_ids("cgroup.procs") {
            let _ = std::fs::write(&root_procs, pid.to_string());
        }
        // Exiting tasks can linger for a moment.
        for _ in 0..40 {
            if std::fs::remove_dir(&self.dir).is_ok() || !self.dir.exists() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(25));
        }
        eprintln!("warning: cannot remove cgroup {}", self.dir.display());
    }
}

/// (busy, total) jiffies of the whole machine from /proc/stat.
pub fn machine_jiffies() -> (u64, u64) {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let f: Vec<u64> = stat
        .lines()
        .next()
        .unwrap_or("")
        .split_whitespace()
        .skip(1)
        .take(8)
        .filter_map(|v| v.parse().ok())
        .collect();
    let total: u64 = f.iter().sum();
    let idle = f.get(3).copied().unwrap_or(0) + f.get(4).copied().unwrap_or(0);
    (total - idle, total)
}

/// CPU time (user + system) of this process's waited-for children, microseconds.
pub fn children_cpu_micros() -> u64 {
    // SAFETY: getrusage only writes the struct it is given.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut ru) };
    let us = |t: libc::timeval| t.tv_sec as u64 * 1_000_000 + t.tv_usec as u64;
    us(ru.ru_utime) + us(ru.ru_stime)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_cpu_stat() {
        let s = parse_cpu_stat("nr_periods 120\nnr_throttled 37\nthrottled_time 4016519022\nnr_bursts 0\nburst_time 0\n");
        assert_eq!(
            s,
            CpuStat {
                nr_periods: 120,
                nr_throttled: 37,
                throttled_time_ns: 4016519022
            }
        );
    }

    #[test]
    fn throttled_share_is_per_period_since() {
        let at = |nr_periods, nr_throttled| CpuStat {
            nr_periods,
            nr_throttled,
            throttled_time_ns: 0,
        };
        assert_eq!(at(140, 42).throttled_share_since(&at(120, 37)), 0.25);
        assert_eq!(at(120, 37).throttled_share_since(&at(120, 37)), 0.0);
    }
}
