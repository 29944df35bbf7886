//! Choosing a server inside a hostgroup.

use rand::RngExt;
pub use sluice_config::Balance;

/// What the balancer knows about one candidate server.
#[derive(Clone, Copy, Debug)]
pub struct Candidate {
    /// Server weight (> 0).
    pub weight: u32,
    /// Statements in flight on it.
    pub in_flight: u32,
}

/// Picks the index of one candidate; `None` if there are none.
pub fn pick(policy: Balance, candidates: &[Candidate]) -> Option<usize> {
    match candidates.len() {
        0 => None,
        1 => Some(0),
        _ => Some(match policy {
            Balance::Weighted => weighted(candidates),
            Balance::LeastOutstanding => least_outstanding(candidates),
        }),
    }
}

fn weighted(c: &[Candidate]) -> usize {
    let total: u64 = c.iter().map(|c| c.weight as u64).sum();
    let mut x = rand::rng().random_range(0..total.max(1));
    for (i, cand) in c.iter().enumerate() {
        if x < cand.weight as u64 {
            return i;
        }
        x -= cand.weight as u64;
    }
    c.len() - 1
}

/// Fewest in-flight statements per unit of weight; ties broken at random so equal servers
/// share the load.
fn least_outstanding(c: &[Candidate]) -> usize {
    // Compare (in_flight + 1) / weight without division: a/wa < b/wb <=> a*wb < b*wa.
    let score = |x: &Candidate| (x.in_flight as u64 + 1, x.weight as u64);
    let mut best: Vec<usize> = Vec::with_capacity(4);
    for (i, cand) in c.iter().enumerate() {
        match best.first() {
            None => best.push(i),
            Some(&b) => {
                let (a, wa) = score(cand);
                let (bb, wb) = score(&c[b]);
                let (lhs, rhs) = (a * wb, bb * wa);
                if lhs < rhs {
                    best.clear();
                    best.push(i);
                } else if lhs == rhs {
                    best.push(i);
                }
            }
        }
    }
    best[rand::rng().random_range(0..best.len())]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weighted_follows_weights() {
        let c = [
            Candidate {
                weight: 1,
                in_flight: 0,
            },
            Candidate {
                weight: 3,
                in_flight: 0,
            },
        ];
        let mut hits = [0u32; 2];
        for _ in 0..40_000 {
            hits[pick(Balance::Weighted, &c).unwrap()] += 1;
        }
        let share = hits[1] as f64 / 40_000.0;
        assert!(
            (0.70..0.80).contains(&share),
            "share of weight-3 server: {share}"
        );
    }

    #[test]
    fn least_outstanding_prefers_idle_servers() {
        let c = [
            Candidate {
                weight: 1,
                in_flight: 5,
            },
            Candidate {
                weight: 1,
                in_flight: 1,
            },
            Candidate {
                weight: 1,
                in_flight: 3,
            },
        ];
        for _ in 0..100 {
            assert_eq!(pick(Balance::LeastOutstanding, &c), Some(1));
        }
        // Weight scales the score: 4 in flight on weight 4 beats 2 on weight 1.
        let c = [
            Candidate {
                weight: 1,
                in_flight: 2,
            },
            Candidate {
                weight: 4,
                in_flight: 4,
            },
        ];
        assert_eq!(pick(Balance::LeastOutstanding, &c), Some(1));
    }

    #[test]
    fn empty_and_single() {
        assert_eq!(pick(Balance::Weighted, &[]), None);
        assert_eq!(
            pick(
                Balance::LeastOutstanding,
                &[Candidate {
                    weight: 1,
                    in_flight: 9
                }]
            ),
            Some(0)
        );
    }
}
