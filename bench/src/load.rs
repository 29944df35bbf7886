//! Load shapes built on [`crate::client`]: connect-per-query loops, many connections running
//! queries back to back, and holding many idle connections. Every loop is bounded in time.

use crate::client::{ClientError, Conn, Outcome, Target};
use crate::hist::Histogram;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Semaphore;

/// What a load run saw.
#[derive(Default, Clone)]
pub struct Report {
    /// Completed operations (a query answered OK, or a whole connect-query-quit loop).
    pub ok: u64,
    /// Queries answered with an ERR packet, by error code.
    pub errors: BTreeMap<u16, u64>,
    /// Connections that failed (connect, login, or broken mid-query).
    pub failed: u64,
    /// First connection failure seen, for the log.
    pub first_failure: Option<String>,
    /// Latency of successful operations, µs.
    pub latency: Histogram,
    /// Latency of operations answered with an error, µs.
    pub error_latency: Histogram,
    /// Wall time of the measured phase.
    pub elapsed: Duration,
}

impl Report {
    /// Successful operations per second.
    pub fn rate(&self) -> f64 {
        self.ok as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// Total ERR answers.
    pub fn error_count(&self) -> u64 {
        self.errors.values().sum()
    }

    /// Adds another report (same phase, another task or process).
    pub fn merge(&mut self, o: &Report) {
        self.ok += o.ok;
        for (k, v) in &o.errors {
            *self.errors.entry(*k).or_default() += v;
        }
        self.failed += o.failed;
        if self.first_failure.is_none() {
            self.first_failure = o.first_failure.clone();
        }
        self.latency.merge(&o.latency);
        self.error_latency.merge(&o.error_latency);
        self.elapsed = self.elapsed.max(o.elapsed);
    }

    /// Counts how a query that started at `t0` ended; false if the connection broke.
    fn count(&mut self, r: &Result<Outcome, ClientError>, t0: Instant) -> bool {
        let us = t0.elapsed().as_micros() as u64;
        match r {
            Ok(Outcome::Ok) => {
                self.ok += 1;
                self.latency.record(us);
            }
            Ok(Outcome::Err(code)) => {
                *self.errors.entry(*code).or_default() += 1;
                self.error_latency.record(us);
            }
            Err(e) => {
                self.fail(e);
                return false;
            }
        }
        true
    }

    fn fail(&mut self, e: &ClientError) {
        self.failed += 1;
        if self.first_failure.is_none() {
            self.first_failure = Some(e.to_string());
        }
    }

    /// One line of `key=value` fields (parsed back by [`Report::parse`]).
    pub fn line(&self) -> String {
        let errors: Vec<String> = self
            .errors
            .iter()
            .map(|(k, v)| format!("{k}:{v}"))
            .collect();
        format!(
            "ok={} failed={} errors={} elapsed_ms={} lat={} errlat={} first_failure={}",
            self.ok,
            self.failed,
            if errors.is_empty() {
                "-".into()
            } else {
                errors.join(",")
            },
            self.elapsed.as_millis(),
            self.latency.encode(),
            self.error_latency.encode(),
            self.first_failure
                .as_deref()
                .unwrap_or("-")
                .replace(char::is_whitespace, "_"),
        )
    }

    /// Parses [`Report::line`].
    pub fn parse(line: &str) -> Option<Report> {
        let mut r = Report::default();
        for field in line.split_whitespace() {
            let (k, v) = field.split_once('=')?;
            match k {
                "ok" => r.ok = v.parse().ok()?,
                "failed" => r.failed = v.parse().ok()?,
                "errors" if v != "-" => {
                    for p in v.split(',') {
                        let (c, n) = p.split_once(':')?;
                        r.errors.insert(c.parse().ok()?, n.parse().ok()?);
                    }
                }
                "elapsed_ms" => r.elapsed = Duration::from_millis(v.parse().ok()?),
                "lat" => r.latency = Histogram::decode(v)?,
                "errlat" => r.error_latency = Histogram::decode(v)?,
                "first_failure" if v != "-" => r.first_failure = Some(v.to_string()),
                _ => {}
            }
        }
        Some(r)
    }

    /// Human summary: rate, percentiles, errors.
    pub fn summary(&self) -> String {
        let ms = |us: u64| us as f64 / 1000.0;
        format!(
            "{} ok ({:.0}/s), p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms, errors {:?}, failed connections {}",
            self.ok,
            self.rate(),
            ms(self.latency.quantile(0.5)),
            ms(self.latency.quantile(0.99)),
            ms(self.latency.max()),
            self.errors,
            self.failed
        )
    }
}

/// A cheap per-task random generator (xorshift) for primary keys.
pub struct Rng(u64);

impl Rng {
    /// Seeded generator.
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    /// A number in 1..=n.
    pub fn upto(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n.max(1) + 1
    }
}

/// A query template: `{id}` is replaced by a random key in 1..=rows.
#[derive(Clone)]
pub struct Query {
    /// The text with `{id}`.
    pub template: String,
    /// Key range.
    pub rows: u64,
}

impl Query {
    fn render(&self, rng: &mut Rng) -> String {
        self.template
            .replace("{id}", &rng.upto(self.rows).to_string())
    }
}

/// `clients` tasks each loop for `time`: connect, one query, quit. The seed's test client.
pub async fn connect_per_query(
    targets: &[Target],
    clients: usize,
    time: Duration,
    q: &Query,
) -> Report {
    let deadline = Instant::now() + time;
    let started = Instant::now();
    let mut set = tokio::task::JoinSet::new();
    for i in 0..clients {
        let t = targets[i % targets.len()].clone();
        let q = q.clone();
        set.spawn(async move {
            let mut r = Report::default();
            let mut rng = Rng::new(i as u64 + 1);
            while Instant::now() < deadline {
                let t0 = Instant::now();
                let mut c = match Conn::connect(&t).await {
                    Ok(c) => c,
                    Err(e) => {
                        r.fail(&e);
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        continue;
                    }
                };
                let outcome = c.query(&q.render(&mut rng)).await;
                if outcome.is_ok() {
                    c.quit().await;
                }
                r.count(&outcome, t0);
            }
            r
        });
    }
    collect(set, started).await
}

async fn collect(mut set: tokio::task::JoinSet<Report>, started: Instant) -> Report {
    let mut total = Report::default();
    while let Some(r) = set.join_next().await {
        if let Ok(r) = r {
            total.merge(&r);
        }
    }
    total.elapsed = started.elapsed();
    total
}

/// Opens `n` connections, at most `concurrency` logging in at once. Failures are counted.
pub async fn open(targets: &[Target], n: usize, concurrency: usize) -> (Vec<Conn>, Report) {
    let started = Instant::now();
    let sem = Arc::new(Semaphore::new(concurrency.max(1)));
    let mut set = tokio::task::JoinSet::new();
    for i in 0..n {
        let t = targets[i % targets.len()].clone();
        let permit = sem.clone().acquire_owned().await.expect("semaphore");
        set.spawn(async move {
            let _permit = permit;
            let t0 = Instant::now();
            let r = Conn::connect(&t).await;
            (r, t0.elapsed())
        });
    }
    let mut conns = Vec::with_capacity(n);
    let mut rep = Report::default();
    while let Some(j) = set.join_next().await {
        match j {
            Ok((Ok(c), d)) => {
                rep.ok += 1;
                rep.latency.record(d.as_micros() as u64);
                conns.push(c);
            }
            Ok((Err(e), _)) => rep.fail(&e),
            Err(e) => rep.fail(&ClientError::Protocol(e.to_string())),
        }
    }
    rep.elapsed = started.elapsed();
    (conns, rep)
}

/// Runs one query on every connection, `concurrency` at a time; returns the connections that
/// are still usable.
pub async fn sweep(conns: Vec<Conn>, concurrency: usize, q: &Query) -> (Vec<Conn>, Report) {
    let started = Instant::now();
    let per = conns.len().div_ceil(concurrency.max(1)).max(1);
    let mut set = tokio::task::JoinSet::new();
    let mut it = conns.into_iter().peekable();
    let mut seed = 1;
    while it.peek().is_some() {
        let chunk: Vec<Conn> = it.by_ref().take(per).collect();
        let q = q.clone();
        seed += 1;
        set.spawn(async move {
            let mut r = Report::default();
            let mut rng = Rng::new(seed);
            let mut kept = Vec::with_capacity(chunk.len());
            for mut c in chunk {
                let t0 = Instant::now();
                let outcome = c.query(&q.render(&mut rng)).await;
                if !r.count(&outcome, t0) {
                    continue;
                }
                c.shrink();
                kept.push(c);
            }
            (kept, r)
        });
    }
    let mut out = Vec::new();
    let mut total = Report::default();
    while let Some(j) = set.join_next().await {
        if let Ok((kept, r)) = j {
            out.extend(kept);
            total.merge(&r);
        }
    }
    total.elapsed = started.elapsed();
    (out, total)
}

/// Each connection runs queries back to back for `time` (pausing `think` between them);
/// returns the connections and what they saw.
pub async fn hammer(
    conns: Vec<Conn>,
    time: Duration,
    think: Duration,
    q: &Query,
) -> (Vec<Conn>, Report) {
    let started = Instant::now();
    let deadline = started + time;
    let mut set = tokio::task::JoinSet::new();
    for (i, mut c) in conns.into_iter().enumerate() {
        let q = q.clone();
        set.spawn(async move {
            let mut r = Report::default();
            let mut rng = Rng::new(i as u64 + 7);
            while Instant::now() < deadline {
                let t0 = Instant::now();
                let outcome = c.query(&q.render(&mut rng)).await;
                if !r.count(&outcome, t0) {
                    return (None, r);
                }
                if !think.is_zero() {
                    tokio::time::sleep(think).await;
                }
            }
            c.shrink();
            (Some(c), r)
        });
    }
    let mut out = Vec::new();
    let mut total = Report::default();
    while let Some(j) = set.join_next().await {
        if let Ok((c, r)) = j {
            out.extend(c);
            total.merge(&r);
        }
    }
    total.elapsed = started.elapsed();
    (out, total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn report_line_round_trips() {
        let mut r = Report {
            ok: 5,
            failed: 1,
            first_failure: Some("connection refused (os error 111)".into()),
            elapsed: Duration::from_millis(1500),
            ..Report::default()
        };
        r.errors.insert(9001, 3);
        r.latency.record(120);
        let back = Report::parse(&r.line()).unwrap();
        assert_eq!(back.ok, 5);
        assert_eq!(back.failed, 1);
        assert_eq!(back.errors.get(&9001), Some(&3));
        assert_eq!(back.latency.count(), 1);
        assert_eq!(back.elapsed, Duration::from_millis(1500));
        assert!(back.first_failure.unwrap().contains("refused"));
    }
}
