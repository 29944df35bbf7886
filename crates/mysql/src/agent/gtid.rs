//! MariaDB GTID positions: comma-separated `domain-server-sequence` triples, at most one per
//! domain in a position (`gtid_current_pos`, `Gtid_IO_Pos`), one per domain and server in a
//! binlog state (`gtid_binlog_state`).

use std::cmp::Ordering;
use std::collections::BTreeMap;

/// One GTID.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Gtid {
    /// Replication domain.
    pub domain: u32,
    /// Originating server.
    pub server: u32,
    /// Sequence number.
    pub seq: u64,
}

/// Parses a GTID list; malformed entries are skipped.
pub fn parse(list: &str) -> Vec<Gtid> {
    list.split(',')
        .filter_map(|g| {
            let mut it = g.trim().splitn(3, '-');
            Some(Gtid {
                domain: it.next()?.parse().ok()?,
                server: it.next()?.parse().ok()?,
                seq: it.next()?.parse().ok()?,
            })
        })
        .collect()
}

/// Highest sequence number per domain.
fn per_domain(list: &str) -> BTreeMap<u32, u64> {
    let mut m = BTreeMap::new();
    for g in parse(list) {
        let e = m.entry(g.domain).or_insert(0);
        *e = (*e).max(g.seq);
    }
    m
}

/// True if position `have` includes everything in position `want` (per domain, at least the
/// same sequence number).
pub fn includes(have: &str, want: &str) -> bool {
    let have = per_domain(have);
    per_domain(want)
        .iter()
        .all(|(d, s)| have.get(d).is_some_and(|h| h >= s))
}

/// Orders two positions: `Greater` if `a` includes `b` and more. Positions that are not
/// comparable (each ahead in some domain) are ordered by their total sequence numbers.
pub fn compare(a: &str, b: &str) -> Ordering {
    match (includes(a, b), includes(b, a)) {
        (true, true) => Ordering::Equal,
        (true, false) => Ordering::Greater,
        (false, true) => Ordering::Less,
        (false, false) => {
            let sum = |p: &str| per_domain(p).values().sum::<u64>();
            sum(a).cmp(&sum(b))
        }
    }
}

/// GTIDs of binlog state `mine` that binlog state `theirs` lacks: for each domain and
/// originating server, a higher sequence number than `theirs` has seen from that server.
pub fn missing_from(mine: &str, theirs: &str) -> Vec<Gtid> {
    let mut seen: BTreeMap<(u32, u32), u64> = BTreeMap::new();
    for g in parse(theirs) {
        let e = seen.entry((g.domain, g.server)).or_insert(0);
        *e = (*e).max(g.seq);
    }
    parse(mine)
        .into_iter()
        .filter(|g| seen.get(&(g.domain, g.server)).is_none_or(|s| *s < g.seq))
        .collect()
}

/// Formats GTIDs as a list.
pub fn format(list: &[Gtid]) -> String {
    list.iter()
        .map(|g| format!("{}-{}-{}", g.domain, g.server, g.seq))
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn includes_per_domain() {
        assert!(includes("0-1-10,1-2-5", "0-1-10"));
        assert!(includes("0-2-11", "0-1-10"));
        assert!(!includes("0-1-9", "0-1-10"));
        assert!(!includes("0-1-10", "0-1-10,1-2-1"));
        assert!(includes("0-1-3", ""));
        assert!(!includes("", "0-1-1"));
    }

    #[test]
    fn compare_positions() {
        assert_eq!(compare("0-1-10", "0-1-10"), Ordering::Equal);
        assert_eq!(compare("0-1-11", "0-1-10"), Ordering::Greater);
        assert_eq!(compare("0-1-9", "0-1-10"), Ordering::Less);
        assert_eq!(compare("", "0-1-1"), Ordering::Less);
        assert_eq!(compare("0-1-5,1-1-9", "0-1-6,1-1-1"), Ordering::Greater);
    }

    #[test]
    fn errant_transactions() {
        // The old primary (server 1) wrote 0-1-100; the new primary got up to 0-1-98 and
        // wrote 0-2-99, 0-2-100 itself.
        let old = "0-1-100";
        let new = "0-1-98,0-2-100";
        assert_eq!(format(&missing_from(old, new)), "0-1-100");
        // Everything the old primary wrote reached the new one.
        assert!(missing_from("0-1-100", "0-1-100,0-2-120").is_empty());
        assert!(missing_from("", "0-1-1").is_empty());
        assert_eq!(format(&missing_from("0-1-5,1-3-2", "0-1-5")), "1-3-2");
    }
}
