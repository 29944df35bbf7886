//! Process trees read from /proc: a process's descendants, the CPU time of a whole tree, a
//! process's resident memory.

use std::collections::HashMap;

/// The direct children of every process: parent pid → children.
fn children_map() -> HashMap<u32, Vec<u32>> {
    let mut map: HashMap<u32, Vec<u32>> = HashMap::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return map;
    };
    for e in dir.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        if let Some(f) = stat_fields(pid) {
            if let Some(ppid) = f.get(1).and_then(|p| p.parse::<u32>().ok()) {
                map.entry(ppid).or_default().push(pid);
            }
        }
    }
    map
}

/// The fields of `/proc/PID/stat` after the command name (the first is the state).
fn stat_fields(pid: u32) -> Option<Vec<String>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = stat.get(stat.rfind(')')? + 2..)?;
    Some(after.split_whitespace().map(String::from).collect())
}

/// `pid` and every process descended from it.
pub fn process_tree(pid: u32) -> Vec<u32> {
    let map = children_map();
    let mut out = vec![pid];
    let mut i = 0;
    while i < out.len() && out.len() < 100_000 {
        if let Some(c) = map.get(&out[i]) {
            for &p in c {
                if !out.contains(&p) {
                    out.push(p);
                }
            }
        }
        i += 1;
    }
    out
}

/// CPU time (user + system, and that of reaped children) of `pid` and all its descendants,
/// in microseconds: a multi-process proxy (Pgpool-II) counted whole.
pub fn tree_cpu_micros(pid: u32) -> Option<u64> {
    tree_micros(pid, &[11, 12, 13, 14])
}

/// User-mode CPU time (and that of reaped children) of `pid` and all its descendants, in
/// microseconds: the part of [`tree_cpu_micros`] spent outside the kernel.
pub fn tree_user_micros(pid: u32) -> Option<u64> {
    tree_micros(pid, &[11, 13])
}

/// The sum of the given clock-tick fields of /proc/PID/stat (counted after the command) over
/// `pid`'s process tree, in microseconds; `None` if `pid` is gone.
fn tree_micros(pid: u32, fields: &[usize]) -> Option<u64> {
    // SAFETY: sysconf has no preconditions.
    let hz = (unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as u64).max(1);
    let mut ticks = 0u64;
    let mut seen = false;
    for p in process_tree(pid) {
        let Some(f) = stat_fields(p) else { continue };
        seen |= p == pid;
        for &i in fields {
            ticks += f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
        }
    }
    seen.then_some(ticks * 1_000_000 / hz)
}

/// Resident memory of a process (`VmRSS`), bytes.
pub fn rss_bytes(pid: u32) -> u64 {
    crate::proc_status_kib(pid, "VmRSS:") * 1024
}
