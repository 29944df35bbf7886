//! sluice and its admin API: where it placed each server and how many statements it sent there,
//! sluice running with its log for diagnosis, and the file its `[[discovery]]` command prints.

use super::*;

/// Longest a discovered standby may take to be ONLINE in the reader hostgroup.
const PLACE_LIMIT: Duration = Duration::from_secs(60);

/// The objects of `GET /api/servers` (flat JSON objects) for `address`.
fn server_entries(admin: u16, address: &str) -> Result<Vec<String>, String> {
    let body = http_get(admin, "/api/servers")?;
    let addr = format!("\"address\":\"{address}\"");
    Ok(body
        .split("},{")
        .filter(|o| o.contains(&addr))
        .map(str::to_string)
        .collect())
}

/// A numeric field of a flat JSON object.
fn num_field(obj: &str, name: &str) -> u64 {
    obj.split(&format!("\"{name}\":"))
        .nth(1)
        .and_then(|r| r.split([',', '}']).next()?.trim().parse().ok())
        .unwrap_or(0)
}

/// Waits (at most [`PLACE_LIMIT`]) until sluice shows `address` with `role` in `hostgroup`,
/// ONLINE; how long that took.
pub(super) fn wait_placed(
    admin: u16,
    address: &str,
    role: &str,
    hostgroup: &str,
) -> Result<Duration, String> {
    let start = Instant::now();
    let want = [
        format!("\"role\":\"{role}\""),
        format!("\"hostgroup\":\"{hostgroup}\""),
        "\"state\":\"ONLINE\"".to_string(),
    ];
    let mut last = Vec::new();
    while start.elapsed() < PLACE_LIMIT {
        last = server_entries(admin, address)?;
        if last.iter().any(|o| want.iter().all(|w| o.contains(w))) {
            return Ok(start.elapsed());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Err(format!(
        "sluice did not show {address} as an ONLINE {role} in hostgroup {hostgroup} within {PLACE_LIMIT:?}; last seen: {last:?}"
    ))
}

/// sluice's own count of statements sent to `address` (all its entries).
pub(super) fn sluice_queries(admin: u16, address: &str) -> u64 {
    server_entries(admin, address)
        .unwrap_or_default()
        .iter()
        .map(|o| num_field(o, "queries"))
        .sum()
}

/// sluice running, with what is needed to explain a failure.
pub(super) struct Sluice {
    pub(super) proc: Proc,
    pub(super) admin: u16,
    log: PathBuf,
}

impl Sluice {
    pub(super) fn start(config: &str, port: u16, admin: u16) -> Result<Sluice, String> {
        let dir = std::env::temp_dir();
        let path = dir.join(format!("sluice-pgreadscale-{}.toml", std::process::id()));
        std::fs::write(&path, config).map_err(|e| e.to_string())?;
        let log = dir.join(format!("sluice-pgreadscale-{}.log", std::process::id()));
        let out = std::fs::File::create(&log).map_err(|e| e.to_string())?;
        let err = out.try_clone().map_err(|e| e.to_string())?;
        let mut cmd = Command::new(sluice_bin());
        cmd.arg("--config").arg(&path).stdout(out).stderr(err);
        let mut s = Sluice {
            proc: Proc::spawn("sluice", cmd, libc::SIGTERM)?,
            admin,
            log,
        };
        if let Err(e) = wait_port(port).and_then(|()| wait_port(admin)) {
            let why = s.proc.exited().unwrap_or_default();
            return Err(format!("{e} {why}\n{}", s.diagnosis()));
        }
        Ok(s)
    }

    /// The end of sluice's log and its events: what to show when something went wrong.
    pub(super) fn diagnosis(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        format!(
            "--- sluice log {} (last 40 lines) ---\n{}\n--- GET /api/events ---\n{}\n--- GET /api/servers ---\n{}",
            self.log.display(),
            lines[lines.len().saturating_sub(40)..].join("\n"),
            http_get(self.admin, "/api/events").unwrap_or_else(|e| e),
            http_get(self.admin, "/api/servers").unwrap_or_else(|e| e)
        )
    }
}

/// The file the `[[discovery]]` command prints, removed on drop.
pub(super) struct DiscoveryFile(pub(super) PathBuf);

impl DiscoveryFile {
    /// Replaces its contents at once (a rename), so a look never reads half a file.
    pub(super) fn list(&self, addresses: &[String]) -> Result<(), String> {
        let tmp = self.0.with_extension("tmp");
        let mut text = addresses.join("\n");
        text.push('\n');
        std::fs::write(&tmp, text).map_err(|e| format!("{}: {e}", tmp.display()))?;
        std::fs::rename(&tmp, &self.0).map_err(|e| format!("{}: {e}", self.0.display()))
    }
}

impl Drop for DiscoveryFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}
