//! What a login was told (its ParameterStatus values), kept per pool, hostgroup and startup
//! settings, so that the next login alike is answered without a server connection, as
//! PgBouncer answers logins from the parameters its pool's first connection reported: a
//! login no longer waits for a free connection of a busy pool (nor fails after
//! `queue_timeout`), nor opens one. The first login of each kind takes a connection, which
//! proves that the database exists and the startup settings are accepted; a later change
//! of a value (a server upgraded, a default altered) reaches the client as ParameterStatus
//! at its first statement, as the connection serving it reports it. A server's refusal of
//! one of sluice's own logins (a database dropped, a role's password changed, a connection
//! limit) forgets every kind: the next login of each proves itself again.

use super::session::{client_err, Session, SessionError};
use crate::backend::conn::StartupSettings;
use crate::wire::{ReadyStatus, Writer};
use sluice_runtime::SessionKey;
use std::collections::{BTreeMap, HashMap};
use std::hash::BuildHasher;
use std::sync::{Arc, Mutex};

const APPLICATION_NAME: &str = "application_name";

/// The value a startup `application_name` is set to (see [`super::startup::set_config`]),
/// when it is printable ASCII: PostgreSQL reports such a name as it was given (others it
/// cleans, each version its own way).
fn plain_name(stmt: &str) -> Option<String> {
    let mut value = super::startup::set_config_value(stmt, APPLICATION_NAME)?;
    if !value.bytes().all(|b| (32..=126).contains(&b)) {
        return None;
    }
    // PostgreSQL keeps the first NAMEDATALEN - 1 bytes of it (ASCII: whole characters).
    value.truncate(63);
    Some(value)
}

/// Kinds of login remembered at most (beyond them, all are forgotten and learnt again).
const MAX_WELCOMES: usize = 1024;

/// The parameters a login was told, by the kind of login.
#[derive(Default)]
pub struct Welcomes {
    told: Mutex<HashMap<u64, Told>>,
    hasher: foldhash::quality::RandomState,
}

/// What a login was told: the values, and the ParameterStatus messages that tell them
/// (made once per kind, not at every login).
#[derive(Clone)]
pub struct Told {
    /// The parameters and their values.
    pub params: Arc<BTreeMap<String, String>>,
    /// Their ParameterStatus messages, in the map's order.
    pub messages: Arc<[u8]>,
    /// A value among them blinds the scanner (see [`Session::note_blind_reports`]): read
    /// once per kind, not at every login.
    pub blinds: bool,
}

impl Told {
    fn new(params: Arc<BTreeMap<String, String>>) -> Told {
        let mut w = Writer::new();
        for (k, v) in params.iter() {
            w.parameter_status(k, v);
        }
        Told {
            blinds: super::state::reports_blind(&params),
            params,
            messages: w.into_bytes().into(),
        }
    }
}

impl Welcomes {
    /// The kind of a login: its pool (user and database), the hostgroup its listener serves
    /// logins from, and the settings its startup packet asked for — but for an
    /// `application_name` of printable ASCII, which the server reports as it was given
    /// (such logins are one kind, each told its own name: see [`Welcomes::told`]).
    pub fn key(
        &self,
        pool: &sluice_core::PoolKey,
        hostgroup: &str,
        startup: &StartupSettings,
    ) -> u64 {
        let own = startup
            .iter()
            .filter(|(name, stmt)| !(&**name == APPLICATION_NAME && plain_name(stmt).is_some()));
        let named = startup.iter().any(|(name, _)| &**name == APPLICATION_NAME);
        self.hasher
            .hash_one((pool, hostgroup, own.collect::<Vec<_>>(), named))
    }

    /// What a login of kind `key` whose startup settings are `startup` is told, if one
    /// like it succeeded: what that one was told, with its own `application_name`.
    pub fn told(&self, key: u64, startup: &StartupSettings) -> Option<Told> {
        let told = self.get(key)?;
        let name = startup
            .iter()
            .find(|(name, _)| &**name == APPLICATION_NAME)
            .and_then(|(_, stmt)| plain_name(stmt));
        if let Some(name) = name {
            if told.params.get(APPLICATION_NAME).map(String::as_str) != Some(name.as_str()) {
                let mut params = told.params;
                Arc::make_mut(&mut params).insert(APPLICATION_NAME.to_string(), name);
                return Some(Told::new(params));
            }
        }
        Some(told)
    }

    /// What the last login of this kind was told, if one succeeded.
    fn get(&self, key: u64) -> Option<Told> {
        self.told.lock().ok()?.get(&key).cloned()
    }

    /// A login of this kind succeeded and was told `params`.
    pub fn put(&self, key: u64, params: Arc<BTreeMap<String, String>>) {
        // Made before the lock is taken.
        let entry = Told::new(params);
        let Ok(mut told) = self.told.lock() else {
            return;
        };
        if told.len() >= MAX_WELCOMES && !told.contains_key(&key) {
            told.clear();
        }
        told.insert(key, entry);
    }

    /// A server refused a login of sluice's own: no kind is known good any more.
    pub fn forget(&self) {
        if let Ok(mut told) = self.told.lock() {
            told.clear();
        }
    }
}

impl Session {
    /// Finishes the login: a connection to the database proves it exists (or its error goes
    /// to the client), its ParameterStatus values and the session's key go to the client;
    /// a login like one that succeeded before is told what that one was, without a
    /// connection (see this module's notes).
    pub(super) async fn welcome(&mut self, key: SessionKey) -> Result<(), SessionError> {
        // Queued: the welcome leaves in one write with what the login queued.
        self.client.queue_messages(Writer::auth_ok);
        let writer = self.fe.topology.router.writer.clone();
        let decision = sluice_core::router::Decision {
            hostgroup: self.listener.hostgroup.clone().unwrap_or(writer),
            reason: sluice_core::router::Reason::Write,
        };
        let startup = self.settings.startup_only();
        let welcomes = &self.fe.welcomes;
        let kind = startup.map(|s| welcomes.key(&self.key, decision.hostgroup.as_ref(), s));
        if let Some(told) = kind.zip(startup).and_then(|(k, s)| welcomes.told(k, s)) {
            self.client.queue_messages(|w| {
                w.bytes(&told.messages);
                w.backend_key_data(key.id, key.secret);
                w.ready_for_query(ReadyStatus::Idle);
            });
            self.reported = told.params;
            if told.blinds {
                self.note_blind_reports();
            }
            return self.client.send(&[]).await.map_err(client_err);
        }
        if let Err(no) = self.attach(&decision).await {
            if !no.code.is_empty() {
                let _ = self
                    .client
                    .fatal_with(&no.code, &no.message, &no.fields)
                    .await;
            }
            return Err(SessionError::Refused(no.message));
        }
        // attach() told the client every parameter it had not seen: all of them.
        self.client.queue_messages(|w| {
            w.backend_key_data(key.id, key.secret);
            w.ready_for_query(ReadyStatus::Idle);
        });
        self.release();
        // The login's replay held cancels; no client can cancel before it has the session's
        // key (sent below), so none is held, and the first statement may take the short path.
        if std::mem::take(&mut self.cancels_held) {
            self.handle.take_held_cancel();
        }
        self.note_blind_reports();
        if let Some(k) = kind {
            self.fe.welcomes.put(k, self.reported.clone());
        }
        self.client.send(&[]).await.map_err(client_err)
    }

    /// A role's or database's default the client was told at login that blinds the scanner
    /// (`standard_conforming_strings` off, an encoding it cannot read) counts as the
    /// session's own setting: its statements are routed and pinned as if it had set it.
    fn note_blind_reports(&mut self) {
        for blind in super::state::blind_reports(&self.reported, &self.settings) {
            self.settings.apply(blind);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logins_alike_share_what_they_were_told_and_the_kinds_are_bounded() {
        let w = Welcomes::default();
        let pool = |db: &str| sluice_core::PoolKey {
            user: "app".into(),
            database: Some(db.into()),
            variant: 0,
        };
        let utc: Box<StartupSettings> =
            vec![("TimeZone".into(), "SET TimeZone = 'UTC'".into())].into();
        let k = w.key(&pool("a"), "writer", &utc);
        assert_eq!(k, w.key(&pool("a"), "writer", &utc));
        for other in [
            w.key(&pool("b"), "writer", &utc),
            w.key(&pool("a"), "reader", &utc),
            w.key(&pool("a"), "writer", &[]),
        ] {
            assert_ne!(k, other);
        }
        assert!(w.get(k).is_none());
        let told = Arc::new(BTreeMap::from([(
            "server_version".to_string(),
            "15".to_string(),
        )]));
        w.put(k, told.clone());
        assert!(Arc::ptr_eq(&w.get(k).unwrap().params, &told));
        for n in 0..MAX_WELCOMES as u64 * 2 {
            w.put(n, told.clone());
            assert!(w.told.lock().unwrap().len() <= MAX_WELCOMES);
        }
        w.forget();
        assert!(w.get(k).is_none());
    }

    #[test]
    fn logins_that_differ_only_by_a_plain_application_name_are_one_kind_each_told_its_own() {
        let w = Welcomes::default();
        let pool = sluice_core::PoolKey {
            user: "app".into(),
            database: Some("db".into()),
            variant: 0,
        };
        let named = |name: &str| -> Box<StartupSettings> {
            vec![(
                APPLICATION_NAME.into(),
                super::super::startup::set_config(APPLICATION_NAME, name).into(),
            )]
            .into()
        };
        let (a, b) = (named("worker 1"), named("it's 2"));
        assert_eq!(plain_name(&b[0].1).as_deref(), Some("it's 2"));
        // Told as PostgreSQL keeps it: its first 63 bytes.
        let long = named(&"x".repeat(80));
        assert_eq!(plain_name(&long[0].1), Some("x".repeat(63)));
        let k = w.key(&pool, "writer", &a);
        assert_eq!(k, w.key(&pool, "writer", &b));
        // Without a name, or with one the server would clean: kinds of their own.
        assert_ne!(k, w.key(&pool, "writer", &[]));
        assert_ne!(k, w.key(&pool, "writer", &named("caf\u{e9}")));
        assert_ne!(
            w.key(&pool, "writer", &named("caf\u{e9}")),
            w.key(&pool, "writer", &named("na\u{ef}ve"))
        );
        let told = BTreeMap::from([
            (APPLICATION_NAME.to_string(), "worker 1".to_string()),
            ("TimeZone".to_string(), "UTC".to_string()),
        ]);
        w.put(k, Arc::new(told));
        let second = w.told(k, &b).unwrap();
        assert_eq!(second.params[APPLICATION_NAME], "it's 2");
        assert_eq!(second.params["TimeZone"], "UTC");
        let first = w.told(k, &a).unwrap();
        assert_eq!(first.params[APPLICATION_NAME], "worker 1");
        // The messages say what the values say, each login its own name.
        for (told, name) in [(&first, "worker 1"), (&second, "it's 2")] {
            let mut m = Writer::new();
            // (In the map's order: upper case first.)
            m.parameter_status("TimeZone", "UTC");
            m.parameter_status(APPLICATION_NAME, name);
            assert_eq!(&told.messages[..], &m.into_bytes()[..], "{name}");
            assert!(!told.blinds);
        }
    }

    /// Whether a kind's values blind the scanner is read once, when the kind is kept: a
    /// login told them is blinded only then (see `note_blind_reports`).
    #[test]
    fn a_kind_told_a_value_the_scanner_cannot_read_says_so() {
        for (name, value, blinds) in [
            ("standard_conforming_strings", "off", true),
            ("standard_conforming_strings", "on", false),
            ("client_encoding", "SJIS", true),
            ("client_encoding", "UTF8", false),
            ("TimeZone", "UTC", false),
        ] {
            let told = Told::new(Arc::new(BTreeMap::from([
                (name.to_string(), value.to_string()),
                ("DateStyle".to_string(), "ISO, MDY".to_string()),
            ])));
            assert_eq!(told.blinds, blinds, "{name} {value}");
            assert_eq!(
                told.blinds,
                !super::super::state::blind_reports(&told.params, &Default::default()).is_empty(),
                "{name} {value}"
            );
        }
    }
}
