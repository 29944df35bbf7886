//! Which global privileges the monitor's user lacks for failover, switchover and rejoin, read
//! from `SHOW GRANTS`.

/// Global privileges failover, switchover and rejoin need that `grants` (lines of
/// `SHOW GRANTS` for `*.*`) do not give. `replicates`: the same user is the replication user.
pub(crate) fn missing_from_grants(grants: &[String], replicates: bool) -> Vec<String> {
    let text = grants.join(" ").to_ascii_uppercase();
    if text.contains("GRANT ALL PRIVILEGES ON *.*") {
        return Vec::new();
    }
    // (privilege, its other name, what it is needed for)
    let mut needed = vec![
        ("REPLICA MONITOR", "SLAVE MONITOR", "SHOW ALL SLAVES STATUS"),
        (
            "REPLICATION SLAVE ADMIN",
            "REPLICATION SLAVE ADMIN",
            "STOP/START SLAVE, CHANGE MASTER",
        ),
        ("RELOAD", "RELOAD", "RESET SLAVE ALL when promoting"),
        ("READ_ONLY ADMIN", "READ_ONLY ADMIN", "SET GLOBAL read_only"),
        (
            "REPLICATION MASTER ADMIN",
            "REPLICATION MASTER ADMIN",
            "SET GLOBAL rpl_semi_sync_master_enabled",
        ),
    ];
    if replicates {
        needed.push((
            "REPLICATION SLAVE",
            "REPLICATION SLAVE",
            "replicating, when a former primary rejoins",
        ));
    }
    let has = |p: &str| {
        text.match_indices(p).any(|(i, _)| {
            // Whole privilege names only ("REPLICATION SLAVE" is a prefix of "… ADMIN").
            let after = &text[i + p.len()..];
            after.starts_with(',') || after.starts_with(" ON ")
        })
    };
    needed
        .into_iter()
        .filter(|(a, b, _)| !has(a) && !has(b))
        .map(|(a, _, why)| format!("{a} ({why})"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn privileges_from_grants() {
        let g = |s: &str| vec![s.to_string()];
        assert!(
            missing_from_grants(&g("GRANT ALL PRIVILEGES ON *.* TO `app`@`%`"), true).is_empty()
        );
        let full = "GRANT RELOAD, REPLICATION SLAVE, BINLOG MONITOR, SLAVE MONITOR, REPLICATION SLAVE ADMIN, REPLICATION MASTER ADMIN, READ_ONLY ADMIN ON *.* TO `monitor`@`%` IDENTIFIED BY PASSWORD '*x'";
        assert!(missing_from_grants(&g(full), true).is_empty());
        let partial = "GRANT REPLICATION SLAVE ADMIN, SLAVE MONITOR ON *.* TO `monitor`@`%`";
        let missing = missing_from_grants(&g(partial), true);
        assert_eq!(missing.len(), 4, "{missing:?}");
        assert!(missing[0].starts_with("RELOAD"));
        assert!(missing.iter().any(|m| m.starts_with("REPLICATION SLAVE (")));
        assert_eq!(missing_from_grants(&g(partial), false).len(), 3);
    }
}
