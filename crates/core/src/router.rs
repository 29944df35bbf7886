//! Query routing: which hostgroup a statement goes to, and why.
//!
//! Precedence, highest first: a listener pinned to a hostgroup; an open transaction (or
//! autocommit off); a `sluice:<target>` comment hint; the first matching `[[rules]]` entry;
//! built-in read/write classification.

use arc_swap::ArcSwap;
use sluice_config::RuleConfig;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

/// A compiled query rule with its hit counter.
#[derive(Debug)]
pub struct Rule {
    /// The rule's name (`rule<N>` when the config gives none).
    pub name: String,
    /// Its pattern, as configured.
    pub pattern: String,
    regex: regex::bytes::Regex,
    /// Target hostgroup.
    pub hostgroup: Arc<str>,
    /// Only for this user.
    pub user: Option<String>,
    /// Only in this schema.
    pub schema: Option<String>,
    /// Statements that matched it.
    pub hits: AtomicU64,
}

/// Compiles rules (patterns already validated), carrying hit counts over from `old` rules
/// that are the same.
fn compile(rules: &[RuleConfig], old: &[Rule]) -> Vec<Rule> {
    rules
        .iter()
        .enumerate()
        .filter_map(|(i, r)| {
            let regex = regex::bytes::Regex::new(&r.pattern).ok()?;
            let hits = old
                .iter()
                .find(|o| o.is(i, r))
                .map_or(0, |o| o.hits.load(Relaxed));
            Some(Rule {
                name: rule_name(i, r),
                pattern: r.pattern.clone(),
                regex,
                hostgroup: Arc::from(r.hostgroup.as_str()),
                user: r.user.clone(),
                schema: r.schema.clone(),
                hits: AtomicU64::new(hits),
            })
        })
        .collect()
}

/// The name of rule number `i` (`rule<i>` when the config gives none).
fn rule_name(i: usize, r: &RuleConfig) -> String {
    r.name.clone().unwrap_or_else(|| format!("rule{i}"))
}

impl Rule {
    /// True if this is what the config's rule number `i` describes.
    fn is(&self, i: usize, r: &RuleConfig) -> bool {
        self.name == rule_name(i, r)
            && self.pattern == r.pattern
            && *self.hostgroup == *r.hostgroup
            && self.user == r.user
            && self.schema == r.schema
    }
}

/// Why a statement went where it went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    /// The listener is pinned to a hostgroup.
    Listener,
    /// The session is in a transaction (or has autocommit off).
    Transaction,
    /// A comment hint.
    Hint,
    /// Query rule number N matched.
    Rule(usize),
    /// Built-in classification: cannot write.
    Read,
    /// Built-in classification: may write.
    Write,
}

/// The router's answer.
#[derive(Clone, Debug)]
pub struct Decision {
    /// Target hostgroup.
    pub hostgroup: Arc<str>,
    /// Why.
    pub reason: Reason,
}

/// What a statement can do, as the protocol's own scanner classified it (each dialect has
/// its scanner; the router knows none of them).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    /// Cannot write anything: a replica may answer it.
    Read,
    /// May write, lock, or depend on the primary: it goes to the writer.
    Write,
}

/// A statement as the router sees it: its route and the target a comment hint names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Classified<'a> {
    /// Read or write.
    pub route: Route,
    /// `sluice:<target>` from a comment, if any.
    pub hint: Option<&'a str>,
}

/// What the router looks at.
pub struct RouteInput<'a> {
    /// Statement text (rules match it).
    pub sql: &'a [u8],
    /// Its classification.
    pub class: Classified<'a>,
    /// Client user.
    pub user: &'a str,
    /// Current schema.
    pub schema: Option<&'a str>,
    /// In a transaction, or autocommit is off.
    pub in_transaction: bool,
    /// The listener's pinned hostgroup.
    pub listener_hostgroup: Option<&'a Arc<str>>,
}

/// A hint named a hostgroup that does not exist.
#[derive(Debug, thiserror::Error)]
#[error("routing hint names unknown hostgroup '{0}'")]
pub struct UnknownHint(pub String);

/// The routing table.
#[derive(Debug)]
pub struct Router {
    /// Writer hostgroup name.
    pub writer: Arc<str>,
    /// Reader hostgroup name.
    pub reader: Arc<str>,
    /// Query rules in order (replaced whole on reload).
    rules: ArcSwap<Vec<Rule>>,
    known: ArcSwap<Vec<Arc<str>>>,
    /// How statements were routed.
    pub stats: crate::stats::RouteStats,
}

impl Router {
    /// Builds a router. Rule patterns must already be validated.
    pub fn new(writer: &str, reader: &str, rules: &[RuleConfig], hostgroups: &[String]) -> Router {
        Router {
            writer: Arc::from(writer),
            reader: Arc::from(reader),
            rules: ArcSwap::from_pointee(compile(rules, &[])),
            known: ArcSwap::from_pointee(
                hostgroups.iter().map(|h| Arc::from(h.as_str())).collect(),
            ),
            stats: Default::default(),
        }
    }

    /// Replaces the hostgroups hints may name (a reload).
    pub fn set_hostgroups(&self, names: &[String]) {
        self.known.store(Arc::new(
            names.iter().map(|h| Arc::from(h.as_str())).collect(),
        ));
    }

    /// The rules in force.
    pub fn rules(&self) -> Arc<Vec<Rule>> {
        self.rules.load_full()
    }

    /// True if the rules in force are exactly `rules`.
    pub fn has_rules(&self, rules: &[RuleConfig]) -> bool {
        let current = self.rules.load();
        current.len() == rules.len()
            && current
                .iter()
                .zip(rules)
                .enumerate()
                .all(|(i, (r, c))| r.is(i, c))
    }

    /// Replaces the rules (a reload). Statements routed from now on see the new ones; a rule
    /// that stays the same (name, pattern, hostgroup, user, schema) keeps its hit count.
    pub fn set_rules(&self, rules: &[RuleConfig]) {
        let old = self.rules.load_full();
        self.rules.store(Arc::new(compile(rules, &old)));
    }

    /// Decides where a statement goes.
    pub fn route(&self, input: &RouteInput<'_>) -> Result<Decision, UnknownHint> {
        let decide = |hostgroup: &Arc<str>, reason| {
            Ok(Decision {
                hostgroup: hostgroup.clone(),
                reason,
            })
        };
        if let Some(hg) = input.listener_hostgroup {
            return decide(hg, Reason::Listener);
        }
        if input.in_transaction {
            return decide(&self.writer, Reason::Transaction);
        }
        if let Some(hint) = input.class.hint {
            let target = self
                .resolve(hint)
                .ok_or_else(|| UnknownHint(hint.to_string()))?;
            return decide(&target, Reason::Hint);
        }
        for (i, rule) in self.rules.load().iter().enumerate() {
            if rule.user.as_deref().is_some_and(|u| u != input.user) {
                continue;
            }
            if rule.schema.is_some() && rule.schema.as_deref() != input.schema {
                continue;
            }
            if rule.regex.is_match(input.sql) {
                rule.hits.fetch_add(1, Relaxed);
                return decide(&rule.hostgroup, Reason::Rule(i));
            }
        }
        match input.class.route {
            Route::Read => decide(&self.reader, Reason::Read),
            Route::Write => decide(&self.writer, Reason::Write),
        }
    }

    /// Resolves a hint target: `writer`, `reader`, or a hostgroup name.
    pub fn resolve(&self, target: &str) -> Option<Arc<str>> {
        if target.eq_ignore_ascii_case("writer")
            || target.eq_ignore_ascii_case("master")
            || target.eq_ignore_ascii_case("primary")
        {
            return Some(self.writer.clone());
        }
        if target.eq_ignore_ascii_case("reader")
            || target.eq_ignore_ascii_case("replica")
            || target.eq_ignore_ascii_case("slave")
        {
            return Some(self.reader.clone());
        }
        self.known.load().iter().find(|h| &***h == target).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A toy classification for these tests: reads start with SELECT; a hint is
    /// `/* sluice:<target> */`.
    fn classify(sql: &str) -> Classified<'_> {
        let route = if sql.trim_start().to_ascii_uppercase().starts_with("SELECT") {
            Route::Read
        } else {
            Route::Write
        };
        let hint = sql
            .split("/* sluice:")
            .nth(1)
            .and_then(|rest| rest.split(" */").next());
        Classified { route, hint }
    }

    fn router(rules: &[(&str, &str)]) -> Router {
        let rules: Vec<RuleConfig> = rules
            .iter()
            .map(|(m, h)| RuleConfig {
                pattern: m.to_string(),
                hostgroup: h.to_string(),
                user: None,
                schema: None,
                name: None,
            })
            .collect();
        Router::new(
            "writer",
            "reader",
            &rules,
            &["writer".into(), "reader".into(), "olap".into()],
        )
    }

    fn route(r: &Router, sql: &str, in_trx: bool) -> Result<Decision, UnknownHint> {
        r.route(&RouteInput {
            sql: sql.as_bytes(),
            class: classify(sql),
            user: "app",
            schema: None,
            in_transaction: in_trx,
            listener_hostgroup: None,
        })
    }

    #[test]
    fn builtin_rules() {
        let r = router(&[]);
        assert_eq!(&*route(&r, "SELECT 1", false).unwrap().hostgroup, "reader");
        assert_eq!(
            &*route(&r, "UPDATE t SET a=1", false).unwrap().hostgroup,
            "writer"
        );
        let d = route(&r, "SELECT 1", true).unwrap();
        assert_eq!((&*d.hostgroup, d.reason), ("writer", Reason::Transaction));
    }

    #[test]
    fn rules_first_match_wins_and_count_hits() {
        let r = router(&[
            ("(?i)^\\s*SELECT .* FOR UPDATE", "writer"),
            ("(?i)report", "olap"),
            ("(?i)report", "writer"),
        ]);
        let d = route(&r, "select a from t for update", false).unwrap();
        assert_eq!(d.reason, Reason::Rule(0));
        let d = route(&r, "SELECT * FROM report", false).unwrap();
        assert_eq!((&*d.hostgroup, d.reason), ("olap", Reason::Rule(1)));
        assert_eq!(r.rules()[1].hits.load(Relaxed), 1);
        assert_eq!(r.rules()[2].hits.load(Relaxed), 0);
    }

    #[test]
    fn hints_override_rules_but_not_transactions() {
        let r = router(&[("(?i)select", "olap")]);
        let d = route(&r, "SELECT /* sluice:writer */ 1", false).unwrap();
        assert_eq!((&*d.hostgroup, d.reason), ("writer", Reason::Hint));
        let d = route(&r, "/* sluice:olap */ UPDATE t SET a = 1", false).unwrap();
        assert_eq!(&*d.hostgroup, "olap");
        let d = route(&r, "SELECT /* sluice:reader */ 1", true).unwrap();
        assert_eq!(&*d.hostgroup, "writer");
        assert!(route(&r, "SELECT /* sluice:nope */ 1", false).is_err());
    }

    #[test]
    fn pinned_listener_wins() {
        let r = router(&[]);
        let hg: Arc<str> = Arc::from("reader");
        let d = r
            .route(&RouteInput {
                sql: b"UPDATE t SET a=1",
                class: classify("UPDATE t SET a=1"),
                user: "app",
                schema: None,
                in_transaction: true,
                listener_hostgroup: Some(&hg),
            })
            .unwrap();
        assert_eq!((&*d.hostgroup, d.reason), ("reader", Reason::Listener));
    }
}
