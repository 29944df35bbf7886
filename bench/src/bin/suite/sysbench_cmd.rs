//! sysbench's command line for one measured run, a failed run's message condensed, and a
//! program's version banner for the header.

use super::*;

/// The first line of `program args` (a version banner), if the program runs.
pub(super) fn banner(program: &std::path::Path, arg: &str) -> Option<String> {
    let out = Command::new(program).arg(arg).output().ok()?;
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .next()
        .map(|l| l.trim().to_string())
}

/// A failed sysbench run's message without the bulk of its report: the command, the lines
/// that say what went wrong, and the last lines.
pub(super) fn condense(err: &str) -> String {
    let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
    let mut keep: Vec<&str> = Vec::new();
    if let Some(first) = lines.first() {
        keep.push(first);
    }
    for l in lines.iter().skip(1) {
        let low = l.to_ascii_lowercase();
        if (low.contains("fatal") || low.contains("error") || low.contains("failed"))
            && !low.contains("ignored errors:")
            && keep.len() < 8
        {
            keep.push(l);
        }
    }
    for l in lines.iter().skip(1).skip(lines.len().saturating_sub(4)) {
        if !keep.contains(l) {
            keep.push(l);
        }
    }
    keep.join("\n    ")
}

/// sysbench arguments for one measured run.
pub(super) fn run_args(workload: &str, threads: u32, time: u32) -> Vec<String> {
    let mut a: Vec<String> = vec![workload.into()];
    a.extend(TABLES.map(String::from));
    a.extend([
        format!("--threads={threads}"),
        format!("--time={time}"),
        "--report-interval=0".into(),
        "--percentile=99".into(),
        "--histogram=on".into(),
    ]);
    if workload == "oltp_read_write" {
        // Uniform keys: fewer genuine InnoDB deadlocks between the writing threads.
        a.push("--rand-type=uniform".into());
    }
    a.push("run".into());
    a
}
