//! How a client proves its password, once the startup packet named its user (see
//! [`super::login`]): the SCRAM-SHA-256, MD5 and cleartext exchanges as PostgreSQL runs them,
//! each checked against the form the user's password is configured in, and the verifiers SCRAM
//! needs, made once per password.

use super::client::Client;
use super::login::LoginError;
use crate::scram::{self, Prepared, ScramError, ServerExchange, Verifier};
use crate::scram::{DEFAULT_ITERATIONS, MECHANISM};
use crate::scram_client::md5_hex;
use crate::wire::{read_message, Writer};
use parking_lot::Mutex;
use sluice_config::PasswordForm;
use sluice_runtime::users::User;
use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;

/// Waits for the client's next PasswordMessage / SASL message: its length in the buffer
/// (the body is `client.buf[5..len]`; the caller consumes it).
pub(super) async fn password_message(client: &mut Client) -> Result<usize, LoginError> {
    loop {
        match read_message(&client.buf, 64 * 1024) {
            Ok(Some((m, used))) => {
                if m.tag != b'p' {
                    let msg = format!("expected a password message, got {:?}", m.tag as char);
                    let _ = client.fatal("08P01", &msg).await;
                    return Err(LoginError::Refused(msg));
                }
                return Ok(used);
            }
            Ok(None) => client.fill().await?,
            Err(e) => {
                let _ = client.fatal("08P01", &e.to_string()).await;
                return Err(e.into());
            }
        }
    }
}

/// The password a PasswordMessage of a cleartext or MD5 exchange carries: its body is exactly
/// one NUL-terminated string, or PostgreSQL refuses it (`invalid password packet size`).
pub(super) fn password_of(body: &[u8]) -> Option<&[u8]> {
    let got = body.strip_suffix(b"\0")?;
    (!got.contains(&0)).then_some(got)
}

/// An authentication request (`R`) of `kind` with `data`.
pub(super) fn auth_request(w: &mut Writer, kind: i32, data: &[u8]) {
    w.begin(b'R');
    w.i32(kind);
    w.bytes(data);
    w.end();
}

/// Sends an authentication request.
pub(super) async fn send_auth(client: &mut Client, kind: i32, data: &[u8]) -> std::io::Result<()> {
    // Its exact size: a SASL message would outgrow a writer's first buffer.
    let mut w = Writer::with_buffer(Vec::with_capacity(9 + data.len()));
    auth_request(&mut w, kind, data);
    client.send(w.as_bytes()).await
}

/// The text of a SASL message (lossy only when it is not UTF-8: no copy otherwise).
pub(super) fn text(bytes: &[u8]) -> Cow<'_, str> {
    match std::str::from_utf8(bytes) {
        Ok(s) => Cow::Borrowed(s),
        Err(_) => String::from_utf8_lossy(bytes),
    }
}

/// SCRAM verifiers made ready for logins: derived from configured passwords (PBKDF2 runs once
/// per password, not at every login) or read from configured secrets, per user with the
/// password they came from (one entry per configured user name); and the mock one unknown
/// users are answered with.
pub struct Verifiers {
    cache: Mutex<HashMap<Arc<str>, (String, Prepared), foldhash::quality::RandomState>>,
    mock: Mock,
}

/// What unknown users are answered with, so that they look like known ones: a salt of their
/// own that stays the same from one attempt to the next (as a known user's does; see
/// [`Verifiers::salt`]), and keys no proof can match.
struct Mock {
    /// The process's secret the salts are derived with.
    secret: [u8; 32],
    verifier: Prepared,
}

impl Default for Verifiers {
    fn default() -> Self {
        let mut random = [0u8; 112];
        scram::random_bytes(&mut random);
        let (secret, keys) = random.split_at(32);
        let verifier = Verifier {
            iterations: DEFAULT_ITERATIONS,
            salt: keys[64..].to_vec(),
            stored_key: keys[..32].try_into().unwrap_or_default(),
            server_key: keys[32..64].try_into().unwrap_or_default(),
        };
        Verifiers {
            cache: Default::default(),
            mock: Mock {
                secret: secret.try_into().unwrap_or_default(),
                verifier: Prepared::new(&verifier),
            },
        }
    }
}

impl Verifiers {
    /// The verifier to check user `name`'s password against (`user`, the configured one, if
    /// any): the mock one for an unknown user, or a secret that cannot be read.
    pub(super) fn get(&self, name: &str, user: Option<&User>) -> Prepared {
        let Some(u) = user else {
            return self.mock(name);
        };
        let mut cache = self.cache.lock();
        if let Some((password, v)) = cache.get(&*u.name) {
            if *password == u.password {
                return v.clone();
            }
        }
        // The first login since the password was configured (or changed).
        let Some(v) = self.verifier(u) else {
            drop(cache);
            return self.mock(name);
        };
        let v = Prepared::new(&v);
        cache.insert(u.name.clone(), (u.password.clone(), v.clone()));
        v
    }

    /// The mock verifier for user `name`.
    fn mock(&self, name: &str) -> Prepared {
        let salt = self.salt(name, None);
        self.mock.verifier.with_salt(&salt, DEFAULT_ITERATIONS)
    }

    /// The verifier of a configured user: from its SCRAM secret, or derived from its
    /// password (`None`: a secret that cannot be read).
    fn verifier(&self, u: &User) -> Option<Verifier> {
        match PasswordForm::of(&u.password) {
            PasswordForm::ScramSecret => return Verifier::parse(&u.password).ok(),
            // Not the password: SCRAM cannot check it (the configuration refuses it).
            PasswordForm::Md5Hash => return None,
            PasswordForm::Plain => {}
        }
        let salt = self.salt(&u.name, Some(&u.password));
        Some(Verifier::from_password(
            &u.password,
            &salt,
            DEFAULT_ITERATIONS,
        ))
    }

    /// The salt of user `name` with `password` (`None`: an unknown user's), as PostgreSQL
    /// derives its mock salts: SHA-256 of a secret of the process and what it is for. The
    /// same at every attempt and a new one with a new password, yet telling nothing of the
    /// password to whoever asks for it (a salt computed from the password alone would let
    /// anyone who starts a login test guesses offline), and alike for known and unknown
    /// users. A restart changes them, which costs clients nothing.
    fn salt(&self, name: &str, password: Option<&str>) -> [u8; 16] {
        let mut h = aws_lc_rs::digest::Context::new(&aws_lc_rs::digest::SHA256);
        h.update(&self.mock.secret);
        h.update(name.as_bytes());
        if let Some(p) = password {
            h.update(b"\0");
            h.update(p.as_bytes());
        }
        let mut salt = [0u8; 16];
        salt.copy_from_slice(&h.finish().as_ref()[..16]);
        salt
    }
}

/// The SCRAM exchange; the client key its proof revealed when the password was right.
pub(super) async fn scram(
    client: &mut Client,
    verifier: Prepared,
) -> Result<Option<[u8; 32]>, LoginError> {
    let mut offer = [0u8; MECHANISM.len() + 2];
    offer[..MECHANISM.len()].copy_from_slice(MECHANISM.as_bytes());
    send_auth(client, 10, &offer).await?;
    let used = password_message(client).await?;
    let started = sasl_initial_response(&client.buf[5..used], &verifier);
    client.consume(used);
    let exchange = match started {
        Ok(x) => x,
        Err((sqlstate, msg)) => {
            let _ = client.fatal(sqlstate, &msg).await;
            return Err(LoginError::Refused(msg));
        }
    };
    send_auth(client, 11, exchange.server_first().as_bytes()).await?;
    let used = password_message(client).await?;
    let finished = exchange.finish(&text(&client.buf[5..used]));
    client.consume(used);
    match finished {
        Ok((server_final, client_key)) => {
            // Sent with AuthenticationOk and the rest of the welcome, in one write.
            client.queue_messages(|w| auth_request(w, 12, server_final.as_bytes()));
            Ok(Some(client_key))
        }
        Err(ScramError::Proof) | Err(ScramError::Nonce) => Ok(None),
        Err(e) => refuse(client, &e.to_string()).await,
    }
}

/// Reads a SASLInitialResponse and starts the exchange; else the SQLSTATE and message to
/// refuse the client with.
pub(super) fn sasl_initial_response(
    body: &[u8],
    verifier: &Prepared,
) -> Result<ServerExchange, (&'static str, String)> {
    let Some(nul) = body.iter().position(|&b| b == 0) else {
        return Err(("08P01", "malformed SASLInitialResponse".into()));
    };
    if &body[..nul] != MECHANISM.as_bytes() {
        let mechanism = String::from_utf8_lossy(&body[..nul]);
        return Err(("08P01", format!(
            "SASL mechanism {mechanism:?} is not supported: sluice offers SCRAM-SHA-256 without channel binding"
        )));
    }
    // The initial response's length, as PostgreSQL reads it: all that follows, exactly.
    let rest = &body[nul + 1..];
    let Some((len, data)) = rest
        .split_first_chunk::<4>()
        .map(|(len, data)| (i32::from_be_bytes(*len), data))
    else {
        return Err(("08P01", "insufficient data left in message".into()));
    };
    let first = match usize::try_from(len) {
        Ok(n) if n > data.len() => {
            return Err(("08P01", "insufficient data left in message".into()))
        }
        Ok(n) if n < data.len() => return Err(("08P01", "invalid message format".into())),
        Ok(_) => text(data),
        // -1: none (SCRAM's exchange then has no first message to start from).
        Err(_) => Cow::Borrowed(""),
    };
    match ServerExchange::start(verifier, &first, &scram::server_nonce()) {
        Ok(x) => Ok(x),
        Err(ScramError::ChannelBinding) => Err((
            "08P01",
            "channel binding is not supported: sluice offers SCRAM-SHA-256 without channel binding"
                .into(),
        )),
        Err(e) => Err(("08P01", e.to_string())),
    }
}

pub(super) async fn md5(client: &mut Client, user: Option<&User>) -> Result<bool, LoginError> {
    let mut salt = [0u8; 4];
    scram::random_bytes(&mut salt);
    send_auth(client, 5, &salt).await?;
    let used = password_message(client).await?;
    let Some(got) = password_of(&client.buf[5..used]) else {
        return refuse(client, "invalid password packet size").await;
    };
    let ok = user.is_some_and(|u| {
        // The password, or PostgreSQL's stored form `md5<md5(password || user)>`.
        let inner = match PasswordForm::of(&u.password) {
            PasswordForm::Md5Hash => u.password[3..].to_string(),
            _ => md5_hex(&[u.password.as_bytes(), u.name.as_bytes()]),
        };
        let want = format!("md5{}", md5_hex(&[inner.as_bytes(), &salt]));
        aws_lc_rs::constant_time::verify_slices_are_equal(got, want.as_bytes()).is_ok()
    });
    client.consume(used);
    Ok(ok)
}

/// The cleartext exchange: `Some` when the password is right, with the client key it gives
/// for a user configured with a SCRAM secret (see [`cleartext_matches`]).
pub(super) async fn cleartext(
    client: &mut Client,
    user: Option<&User>,
) -> Result<Option<Option<[u8; 32]>>, LoginError> {
    send_auth(client, 3, &[]).await?;
    let used = password_message(client).await?;
    let Some(got) = password_of(&client.buf[5..used]) else {
        return refuse(client, "invalid password packet size").await;
    };
    let ok = user.and_then(|u| cleartext_matches(u, got));
    client.consume(used);
    Ok(ok)
}

/// Whether `got`, a password sent in cleartext, is `u`'s: checked against the form its
/// password is configured in, as PostgreSQL checks a cleartext password against its stored
/// forms (a stored form sent as the password is not the password). `Some` if it is, with
/// the client key of a SCRAM secret (sluice logs in to the servers with it).
pub(super) fn cleartext_matches(u: &User, got: &[u8]) -> Option<Option<[u8; 32]>> {
    let same = |a: &[u8], b: &[u8]| aws_lc_rs::constant_time::verify_slices_are_equal(a, b).is_ok();
    match PasswordForm::of(&u.password) {
        PasswordForm::Plain => same(got, u.password.as_bytes()).then_some(None),
        PasswordForm::Md5Hash => {
            let hash = format!("md5{}", md5_hex(&[got, u.name.as_bytes()]));
            same(hash.as_bytes(), u.password.as_bytes()).then_some(None)
        }
        PasswordForm::ScramSecret => {
            let stored = Verifier::parse(&u.password).ok()?;
            let got = std::str::from_utf8(got).ok()?;
            let (derived, key) = Verifier::with_client_key(got, &stored.salt, stored.iterations);
            (same(&derived.stored_key, &stored.stored_key)
                && same(&derived.server_key, &stored.server_key))
            .then_some(Some(key))
        }
    }
}

pub(super) async fn refuse<T>(client: &mut Client, why: &str) -> Result<T, LoginError> {
    let _ = client.fatal("08P01", why).await;
    Err(LoginError::Refused(why.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scram_client::{ClientExchange, ClientSecret};
    use sluice_config::PgAuthMethod;

    fn user(name: &str, password: &str) -> User {
        User {
            name: Arc::from(name),
            password: password.into(),
            max_connections: 0,
            require_tls: false,
            auth_method: PgAuthMethod::ScramSha256,
            read_your_writes: false,
            connections: Default::default(),
        }
    }

    /// A full exchange of a client knowing `password` against `v`: whether it logs in.
    fn logs_in(v: &Prepared, password: &str) -> bool {
        let (mut c, first) = ClientExchange::start(ClientSecret::Password(password.into()), "n1");
        let s = ServerExchange::start(v, &first, &scram::server_nonce()).unwrap();
        let fin = c.respond(s.server_first()).unwrap();
        match s.finish(&fin) {
            Ok((server_final, _)) => c.verify(&server_final).is_ok(),
            Err(_) => false,
        }
    }

    /// The salt a verifier announces.
    fn salt(v: &Prepared) -> String {
        let s = ServerExchange::start(v, "n,,n=,r=x", "y").unwrap();
        s.server_first().split(',').nth(1).unwrap().to_string()
    }

    #[test]
    fn known_users_verifiers_are_made_once_per_password() {
        let vs = Verifiers::default();
        let app = user("app", "pw");
        let v = vs.get("app", Some(&app));
        assert!(logs_in(&v, "pw") && !logs_in(&v, "other"));
        assert!(vs.get("app", Some(&app)).shares_keys_with(&v));
        assert_eq!(salt(&vs.get("app", Some(&app))), salt(&v));
        // Nothing of the password in the salt: another process has another one.
        assert_ne!(salt(&Verifiers::default().get("app", Some(&app))), salt(&v));
        // A changed password: a verifier of its own, with a salt of its own.
        let changed = user("app", "pw2");
        let v2 = vs.get("app", Some(&changed));
        assert!(logs_in(&v2, "pw2") && !logs_in(&v2, "pw"));
        assert_ne!(salt(&v2), salt(&v));
        // A stored secret: its own salt and iterations.
        let secret = Verifier::from_password("pencil", b"0123456789abcdef", 4096).to_secret();
        let stored = user("s", &secret);
        let v3 = vs.get("s", Some(&stored));
        assert_eq!(salt(&v3), "s=MDEyMzQ1Njc4OWFiY2RlZg==");
        assert!(logs_in(&v3, "pencil"));
    }

    #[test]
    fn a_stored_form_is_never_the_password() {
        let vs = Verifiers::default();
        // An MD5 hash: SCRAM cannot check it (the configuration refuses it); the hash
        // itself does not log in.
        let hash = format!("md5{}", md5_hex(&[b"pw", b"u"]));
        let md5 = user("u", &hash);
        let v = vs.get("u", Some(&md5));
        assert!(!logs_in(&v, &hash) && !logs_in(&v, "pw"));
        // In cleartext each stored form is checked as PostgreSQL checks it: the password
        // logs in, the stored form does not.
        let secret = Verifier::from_password("pw", b"0123456789abcdef", 4096).to_secret();
        let plain = user("u", "pw");
        assert_eq!(cleartext_matches(&plain, b"pw"), Some(None));
        assert_eq!(cleartext_matches(&plain, b"other"), None);
        for stored in [md5, user("u", &secret)] {
            assert!(
                cleartext_matches(&stored, b"pw").is_some(),
                "{}",
                stored.password
            );
            assert_eq!(cleartext_matches(&stored, b"other"), None);
            assert_eq!(cleartext_matches(&stored, stored.password.as_bytes()), None);
        }
        // The secret's password gives the client key a server storing it takes.
        let (v, key) = Verifier::with_client_key("pw", b"0123456789abcdef", 4096);
        assert_eq!(
            cleartext_matches(&user("u", &v.to_secret()), b"pw"),
            Some(Some(key))
        );
    }

    #[test]
    fn unknown_users_look_like_known_ones_and_never_log_in() {
        let vs = Verifiers::default();
        let a = vs.get("ghost", None);
        // The same salt at every attempt (a real user's stays the same too), another one
        // for another name, the iterations of a real verifier.
        assert_eq!(salt(&a), salt(&vs.get("ghost", None)));
        assert_ne!(salt(&a), salt(&vs.get("ghost2", None)));
        assert_eq!(salt(&a).len(), "s=".len() + 24);
        let s = ServerExchange::start(&a, "n,,n=,r=x", "y").unwrap();
        assert!(s.server_first().ends_with(",i=4096"));
        for password in ["", "pw", "ghost"] {
            assert!(!logs_in(&a, password));
        }
        // A secret that cannot be read is answered the same way.
        let broken = user("broken", "SCRAM-SHA-256$nonsense");
        let b = vs.get("broken", Some(&broken));
        assert_eq!(salt(&b), salt(&vs.get("broken", None)));
        assert!(!logs_in(&b, "SCRAM-SHA-256$nonsense"));
        // Another process answers with other salts.
        assert_ne!(salt(&Verifiers::default().get("ghost", None)), salt(&a));
    }

    #[test]
    fn sasl_initial_responses_are_read_or_refused() {
        let v = Verifiers::default().get("ghost", None);
        let mut body = b"SCRAM-SHA-256\0".to_vec();
        let first = b"n,,n=,r=abc";
        body.extend_from_slice(&(first.len() as i32).to_be_bytes());
        body.extend_from_slice(first);
        let ex = sasl_initial_response(&body, &v).unwrap();
        assert!(ex.server_first().starts_with("r=abc"));
        assert_eq!(
            ex.server_first().split(',').next().unwrap().len(),
            2 + 3 + 24
        );
        let refused = |body: &[u8]| sasl_initial_response(body, &v).err().unwrap();
        assert_eq!(refused(b"SCRAM-SHA-256").0, "08P01");
        let plus = refused(b"SCRAM-SHA-256-PLUS\0\0\0\0\x05p=x,,");
        assert_eq!(plus.0, "08P01");
        assert!(plus.1.contains("\"SCRAM-SHA-256-PLUS\""), "{}", plus.1);
        let bound = refused(b"SCRAM-SHA-256\0\0\0\0\x0ep=tls,,n=,r=ab");
        assert_eq!(bound.0, "08P01");
        assert!(
            bound.1.contains("channel binding is not supported"),
            "{}",
            bound.1
        );
        assert_eq!(refused(b"SCRAM-SHA-256\0\0\0\0\x04n,,x").0, "08P01");
        // The initial response's length is all that follows, exactly.
        for (body, why) in [
            (
                &b"SCRAM-SHA-256\0\0\0\0\x64n,,n=,r=abc"[..],
                "insufficient data left in message",
            ),
            (
                b"SCRAM-SHA-256\0\0\0\0\x02n,,n=,r=abc",
                "invalid message format",
            ),
            (b"SCRAM-SHA-256\0\0\0", "insufficient data left in message"),
        ] {
            assert_eq!(refused(body), ("08P01", why.to_string()));
        }
        // A cleartext or MD5 password is exactly one string.
        assert_eq!(password_of(b"pw\0"), Some(&b"pw"[..]));
        assert_eq!(password_of(b"pw"), None);
        assert_eq!(password_of(b"p\0w\0"), None);
    }
}
