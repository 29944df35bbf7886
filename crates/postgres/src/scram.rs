//! SCRAM-SHA-256 (RFC 5802, RFC 7677) from the server's side, as PostgreSQL runs it: the
//! client's first message (`n,,n=,r=<nonce>`: PostgreSQL ignores the SCRAM user name), the
//! server's (`r=<both nonces>,s=<salt>,i=<iterations>`), the client's proof, and the server's
//! signature. A verifier is derived from a configured password or given as PostgreSQL stores
//! it (`SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>`), so no plaintext is
//! needed. Channel binding (SCRAM-SHA-256-PLUS) is not offered: a client that requires it is
//! refused by its own library with a clear message, since the server does not list it.
//!
//! Passwords are normalised with SASLprep (RFC 4013) first, as PostgreSQL and its clients
//! normalise them (a password SASLprep refuses, with a prohibited character, is used as
//! given, as PostgreSQL uses it).

use aws_lc_rs::{constant_time, digest, hmac, pbkdf2};
use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use std::num::NonZeroU32;
use std::sync::Arc;

/// The mechanism name.
pub const MECHANISM: &str = "SCRAM-SHA-256";

/// PostgreSQL's default iteration count.
pub const DEFAULT_ITERATIONS: u32 = 4096;

/// Why an exchange failed (the client is told "password authentication failed").
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum ScramError {
    /// A message is not what the protocol says.
    #[error("malformed SCRAM message: {0}")]
    Malformed(&'static str),
    /// The client asked for channel binding, which is not offered.
    #[error("channel binding is not supported")]
    ChannelBinding,
    /// The client's final message is not for this exchange.
    #[error("SCRAM nonce mismatch")]
    Nonce,
    /// Wrong password.
    #[error("SCRAM proof does not match")]
    Proof,
    /// A stored verifier could not be read.
    #[error("invalid SCRAM secret: {0}")]
    Secret(&'static str),
    /// The server's salt or iteration count is not the configured secret's, so the client
    /// key sluice learned cannot answer it.
    #[error("the server's SCRAM salt or iteration count differs from the configured secret's: configure the secret the server stores (pg_authid.rolpassword), or the password")]
    OtherSecret,
}

/// PBKDF2-HMAC-SHA-256 of `password` after SASLprep (SaltedPassword in RFC 5802).
pub(crate) fn salted_password(password: &str, salt: &[u8], iterations: u32) -> [u8; 32] {
    let password = stringprep::saslprep(password).unwrap_or(std::borrow::Cow::Borrowed(password));
    let mut salted = [0u8; 32];
    let rounds = NonZeroU32::new(iterations.max(1)).unwrap_or(NonZeroU32::MIN);
    pbkdf2::derive(
        pbkdf2::PBKDF2_HMAC_SHA256,
        rounds,
        salt,
        password.as_bytes(),
        &mut salted,
    );
    salted
}

/// What the server keeps to check a password without knowing it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verifier {
    /// PBKDF2 iterations.
    pub iterations: u32,
    /// The salt.
    pub salt: Vec<u8>,
    /// SHA-256 of the client key.
    pub stored_key: [u8; 32],
    /// HMAC key the server signs with.
    pub server_key: [u8; 32],
}

/// HMAC-SHA-256 of `data` under `key` (set up for this one use).
pub(crate) fn hmac_sha256(key: &[u8], data: &[u8]) -> [u8; 32] {
    let k = hmac::Key::new(hmac::HMAC_SHA256, key);
    let mut out = [0u8; 32];
    out.copy_from_slice(hmac::sign(&k, data).as_ref());
    out
}

/// SHA-256 of `data`.
pub(crate) fn sha256(data: &[u8]) -> [u8; 32] {
    let mut out = [0u8; 32];
    out.copy_from_slice(digest::digest(&digest::SHA256, data).as_ref());
    out
}

impl Verifier {
    /// The verifier of `password` with `salt` and `iterations`.
    pub fn from_password(password: &str, salt: &[u8], iterations: u32) -> Verifier {
        Verifier::with_client_key(password, salt, iterations).0
    }

    /// As [`Verifier::from_password`], and the client key (what logging in to a server that
    /// stores this verifier takes).
    pub fn with_client_key(password: &str, salt: &[u8], iterations: u32) -> (Verifier, [u8; 32]) {
        let salted = salted_password(password, salt, iterations);
        let client_key = hmac_sha256(&salted, b"Client Key");
        let v = Verifier {
            iterations,
            salt: salt.to_vec(),
            stored_key: sha256(&client_key),
            server_key: hmac_sha256(&salted, b"Server Key"),
        };
        (v, client_key)
    }

    /// Reads PostgreSQL's stored form `SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>`.
    pub fn parse(secret: &str) -> Result<Verifier, ScramError> {
        let rest = secret
            .strip_prefix("SCRAM-SHA-256$")
            .ok_or(ScramError::Secret("does not start with SCRAM-SHA-256$"))?;
        let (params, keys) = rest.split_once('$').ok_or(ScramError::Secret("no keys"))?;
        let (iterations, salt) = params
            .split_once(':')
            .ok_or(ScramError::Secret("no salt"))?;
        let (stored, server) = keys
            .split_once(':')
            .ok_or(ScramError::Secret("no server key"))?;
        let key = |s: &str| -> Result<[u8; 32], ScramError> {
            B64.decode(s)
                .ok()
                .and_then(|k| <[u8; 32]>::try_from(k).ok())
                .ok_or(ScramError::Secret("a key is not 32 bytes of base64"))
        };
        Ok(Verifier {
            iterations: iterations
                .parse()
                .map_err(|_| ScramError::Secret("iterations not a number"))?,
            salt: B64
                .decode(salt)
                .map_err(|_| ScramError::Secret("salt not base64"))?,
            stored_key: key(stored)?,
            server_key: key(server)?,
        })
    }

    /// PostgreSQL's stored form.
    pub fn to_secret(&self) -> String {
        format!(
            "SCRAM-SHA-256${}:{}${}:{}",
            self.iterations,
            B64.encode(&self.salt),
            B64.encode(self.stored_key),
            B64.encode(self.server_key)
        )
    }
}

/// A verifier made ready for logins: its two HMAC keys set up once (setting a key up hashes
/// its two padded blocks, a third of what checking a proof costs otherwise) and what the
/// server-first message says of it. Cheap to clone (shared).
#[derive(Clone, Debug)]
pub struct Prepared {
    keys: Arc<Keys>,
    /// `,s=<salt>,i=<iterations>`: the end of the server-first message.
    salt_and_iterations: Arc<str>,
}

/// A verifier's keys, the HMAC ones set up.
#[derive(Debug)]
struct Keys {
    stored_key: [u8; 32],
    stored: hmac::Key,
    server: hmac::Key,
}

impl Prepared {
    /// `verifier` made ready.
    pub fn new(verifier: &Verifier) -> Prepared {
        Prepared {
            keys: Arc::new(Keys {
                stored_key: verifier.stored_key,
                stored: hmac::Key::new(hmac::HMAC_SHA256, &verifier.stored_key),
                server: hmac::Key::new(hmac::HMAC_SHA256, &verifier.server_key),
            }),
            salt_and_iterations: salt_and_iterations(&verifier.salt, verifier.iterations).into(),
        }
    }

    /// True if both have the very same keys (set up once).
    #[cfg(test)]
    pub(crate) fn shares_keys_with(&self, other: &Prepared) -> bool {
        Arc::ptr_eq(&self.keys, &other.keys)
    }

    /// The same keys announced with another salt and iteration count (a mock verifier for
    /// an unknown user: the salt is the user's own, the keys no proof matches).
    pub fn with_salt(&self, salt: &[u8], iterations: u32) -> Prepared {
        Prepared {
            keys: self.keys.clone(),
            salt_and_iterations: salt_and_iterations(salt, iterations).into(),
        }
    }
}

fn salt_and_iterations(salt: &[u8], iterations: u32) -> String {
    format!(",s={},i={iterations}", B64.encode(salt))
}

/// Raw bytes in a server nonce, as PostgreSQL makes it (24 characters of base64).
const NONCE_BYTES: usize = 18;

/// A fresh server nonce: random printable characters, no comma.
pub(crate) fn server_nonce() -> String {
    let mut raw = [0u8; NONCE_BYTES];
    random_bytes(&mut raw);
    B64.encode(raw)
}

/// The server's side of one exchange, between its first and the client's final message.
#[derive(Debug)]
pub struct ServerExchange {
    keys: Arc<Keys>,
    /// The AuthMessage as far as it is known: client-first-message-bare, `,`,
    /// server-first-message, `,` (the client's final message without its proof follows).
    auth: String,
    /// Where the server-first message starts in `auth` (`r=<nonce>,...`).
    server_first_at: usize,
    /// The length of the nonce (the client's and the server's).
    nonce_len: usize,
    /// The client's first message said `y` (it supports channel binding and thinks the
    /// server does not): its final message must say so again (RFC 5802's downgrade check).
    said_y: bool,
}

impl ServerExchange {
    /// Reads the client's first message and makes the server's (see
    /// [`ServerExchange::server_first`]); `server_nonce` is fresh random printable characters
    /// (no comma).
    pub fn start(
        verifier: &Prepared,
        client_first: &str,
        server_nonce: &str,
    ) -> Result<ServerExchange, ScramError> {
        let bare = match client_first.as_bytes().first() {
            Some(b'n') | Some(b'y') => client_first
                .strip_prefix("n,,")
                .or_else(|| client_first.strip_prefix("y,,"))
                .ok_or(ScramError::Malformed("gs2 header"))?,
            Some(b'p') => return Err(ScramError::ChannelBinding),
            _ => return Err(ScramError::Malformed("gs2 header")),
        };
        let client_nonce = bare
            .split(',')
            .find_map(|a| a.strip_prefix("r="))
            .filter(|n| !n.is_empty())
            .ok_or(ScramError::Malformed("no client nonce"))?;
        let nonce_len = client_nonce.len() + server_nonce.len();
        let tail = &*verifier.salt_and_iterations;
        // Room for the client's final message without its proof (`c=biws,r=<nonce>`) too.
        let mut auth = String::with_capacity(bare.len() + 2 * nonce_len + tail.len() + 16);
        auth.push_str(bare);
        auth.push(',');
        let server_first_at = auth.len();
        auth.push_str("r=");
        auth.push_str(client_nonce);
        auth.push_str(server_nonce);
        auth.push_str(tail);
        auth.push(',');
        Ok(ServerExchange {
            keys: verifier.keys.clone(),
            auth,
            server_first_at,
            nonce_len,
            said_y: client_first.starts_with('y'),
        })
    }

    /// The server-first message: `r=<both nonces>,s=<salt>,i=<iterations>`.
    pub fn server_first(&self) -> &str {
        &self.auth[self.server_first_at..self.auth.len() - 1]
    }

    /// Both nonces.
    fn nonce(&self) -> &str {
        let at = self.server_first_at + 2;
        &self.auth[at..at + self.nonce_len]
    }

    /// Checks the client's final message; when the proof holds, the server's final message
    /// and the client key the proof revealed (what logging in to a server that stores the
    /// same secret takes, without the password).
    pub fn finish(mut self, client_final: &str) -> Result<(String, [u8; 32]), ScramError> {
        let (without_proof, proof) = client_final
            .rsplit_once(",p=")
            .ok_or(ScramError::Malformed("no proof"))?;
        let mut binding = None;
        let mut nonce = None;
        for attr in without_proof.split(',') {
            if let Some(c) = attr.strip_prefix("c=") {
                binding = Some(c);
            } else if let Some(r) = attr.strip_prefix("r=") {
                nonce = Some(r);
            }
        }
        // "n,," or "y,," base64-encoded: no channel binding data; and the header of the
        // client's first message, as it sent it.
        match (binding, self.said_y) {
            (Some("biws"), false) | (Some("eSws"), true) => {}
            (Some("biws") | Some("eSws"), _) => {
                return Err(ScramError::Malformed(
                    "unexpected SCRAM channel-binding attribute in client-final-message",
                ))
            }
            _ => return Err(ScramError::ChannelBinding),
        }
        if nonce != Some(self.nonce()) {
            return Err(ScramError::Nonce);
        }
        let proof = decode_proof(proof)?;
        self.auth.push_str(without_proof);
        let keys = &*self.keys;
        let signature = hmac::sign(&keys.stored, self.auth.as_bytes());
        let mut client_key = [0u8; 32];
        for (k, (p, s)) in client_key
            .iter_mut()
            .zip(proof.iter().zip(signature.as_ref()))
        {
            *k = p ^ s;
        }
        constant_time::verify_slices_are_equal(&sha256(&client_key), &keys.stored_key)
            .map_err(|_| ScramError::Proof)?;
        let server_signature = hmac::sign(&keys.server, self.auth.as_bytes());
        // The AuthMessage's room holds the answer.
        let mut server_final = self.auth;
        server_final.clear();
        server_final.push_str("v=");
        B64.encode_string(server_signature.as_ref(), &mut server_final);
        Ok((server_final, client_key))
    }
}

/// The client's proof: 32 bytes in base64.
fn decode_proof(proof: &str) -> Result<[u8; 32], ScramError> {
    const NOT_BASE64: ScramError = ScramError::Malformed("proof not base64");
    let mut buf = [0u8; 48];
    // Base64 of up to 48 bytes decodes on the stack; a longer one is too long anyway.
    let len = if proof.len() <= 64 {
        B64.decode_slice(proof, &mut buf).map_err(|_| NOT_BASE64)?
    } else {
        B64.decode(proof).map_err(|_| NOT_BASE64)?.len()
    };
    buf.get(..len)
        .and_then(|b| <[u8; 32]>::try_from(b).ok())
        .ok_or(ScramError::Malformed("proof not 32 bytes"))
}

/// Fills `out` with unpredictable bytes (nonces, salts, cancel keys) from aws-lc's
/// CSPRNG, drawn [`RANDOM_POOL`] bytes at a time per thread: a draw of 512 bytes costs
/// little more than one of 18 (the generator's own upkeep dominates), so a login's 22 bytes
/// cost a twentieth of one. Bytes handed out are wiped from the pool; those it still holds
/// are no more exposed than the generator's own state, from which they would follow.
pub(crate) fn random_bytes(out: &mut [u8]) {
    thread_local! {
        static POOL: std::cell::RefCell<([u8; RANDOM_POOL], usize)> =
            const { std::cell::RefCell::new(([0; RANDOM_POOL], RANDOM_POOL)) };
    }
    if out.len() > RANDOM_POOL / 4 {
        let _ = aws_lc_rs::rand::fill(out);
        return;
    }
    POOL.with_borrow_mut(|(pool, used)| {
        let mut out = &mut out[..];
        while !out.is_empty() {
            if *used == RANDOM_POOL {
                // aws-lc aborts rather than fail to produce randomness.
                let _ = aws_lc_rs::rand::fill(pool);
                *used = 0;
            }
            let n = out.len().min(RANDOM_POOL - *used);
            let (now, rest) = std::mem::take(&mut out).split_at_mut(n);
            let taken = &mut pool[*used..*used + n];
            now.copy_from_slice(taken);
            taken.fill(0);
            *used += n;
            out = rest;
        }
    })
}

/// Bytes each thread draws from the CSPRNG at a time.
const RANDOM_POOL: usize = 512;

#[cfg(test)]
mod tests {
    use super::*;

    // RFC 7677, section 3 (user "user", password "pencil").
    const CLIENT_FIRST: &str = "n,,n=user,r=rOprNGfwEbeRWgbNEkqO";
    const SERVER_NONCE: &str = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0";
    const SALT_B64: &str = "W22ZaJ0SNY7soEsUEjb6gQ==";
    const SERVER_FIRST: &str =
        "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096";
    const CLIENT_FINAL: &str = "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=";
    const SERVER_FINAL: &str = "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=";

    #[test]
    fn passwords_are_normalised_with_saslprep_unless_it_refuses_them() {
        let salted = |p: &str| salted_password(p, b"salt", 16);
        // A ligature and a no-break space: as `file pw`.
        assert_eq!(salted("\u{FB01}le\u{A0}pw"), salted("file pw"));
        // A soft hyphen is mapped to nothing.
        assert_eq!(salted("pass\u{AD}word"), salted("password"));
        // A control character is prohibited: the password is used as given.
        let raw = "pass\u{7}word";
        let mut want = [0u8; 32];
        pbkdf2::derive(
            pbkdf2::PBKDF2_HMAC_SHA256,
            NonZeroU32::new(16).unwrap(),
            b"salt",
            raw.as_bytes(),
            &mut want,
        );
        assert_eq!(salted(raw), want);
    }

    fn pencil() -> Verifier {
        Verifier::from_password("pencil", &B64.decode(SALT_B64).unwrap(), 4096)
    }

    fn start(v: &Verifier, first: &str, nonce: &str) -> Result<ServerExchange, ScramError> {
        ServerExchange::start(&Prepared::new(v), first, nonce)
    }

    #[test]
    fn the_rfc_7677_exchange_succeeds_byte_for_byte() {
        let ex = start(&pencil(), CLIENT_FIRST, SERVER_NONCE).unwrap();
        assert_eq!(ex.server_first(), SERVER_FIRST);
        assert_eq!(ex.finish(CLIENT_FINAL).unwrap().0, SERVER_FINAL);
    }

    #[test]
    fn the_final_message_must_repeat_the_first_ones_channel_binding_header() {
        // `n,,` first, then `c=eSws` (`y,,`): refused before the proof is looked at, as
        // PostgreSQL refuses it.
        let ex = start(&pencil(), CLIENT_FIRST, SERVER_NONCE).unwrap();
        let err = ex
            .finish(&CLIENT_FINAL.replace("c=biws", "c=eSws"))
            .unwrap_err();
        assert!(err
            .to_string()
            .contains("unexpected SCRAM channel-binding attribute"));
        // `y,,` first, then `c=biws` (`n,,`).
        let y = CLIENT_FIRST.replacen("n,,", "y,,", 1);
        let ex = start(&pencil(), &y, SERVER_NONCE).unwrap();
        assert!(matches!(
            ex.finish(CLIENT_FINAL),
            Err(ScramError::Malformed(_))
        ));
        // `y,,` both times: the proof decides (it covers the bare messages, not the header).
        let ex = start(&pencil(), &y, SERVER_NONCE).unwrap();
        let final_y = CLIENT_FINAL.replace("c=biws", "c=eSws");
        assert_eq!(ex.finish(&final_y), Err(ScramError::Proof));
    }

    #[test]
    fn keys_set_up_once_sign_as_keys_set_up_each_time() {
        let v = pencil();
        let p = Prepared::new(&v);
        for msg in [&b""[..], b"Client Key", &[7u8; 300]] {
            let stored = hmac::sign(&p.keys.stored, msg);
            assert_eq!(stored.as_ref(), hmac_sha256(&v.stored_key, msg));
            let server = hmac::sign(&p.keys.server, msg);
            assert_eq!(server.as_ref(), hmac_sha256(&v.server_key, msg));
        }
        // One prepared verifier serves exchange after exchange.
        for _ in 0..3 {
            let ex = ServerExchange::start(&p, CLIENT_FIRST, SERVER_NONCE).unwrap();
            assert_eq!(ex.finish(CLIENT_FINAL).unwrap().0, SERVER_FINAL);
        }
        let (_, key) = ServerExchange::start(&p, CLIENT_FIRST, SERVER_NONCE)
            .unwrap()
            .finish(CLIENT_FINAL)
            .unwrap();
        assert_eq!(sha256(&key), v.stored_key);
    }

    #[test]
    fn another_salt_is_announced() {
        let p = Prepared::new(&pencil()).with_salt(b"0123456789abcdef", 4096);
        let ex = ServerExchange::start(&p, CLIENT_FIRST, SERVER_NONCE).unwrap();
        assert!(ex
            .server_first()
            .ends_with(",s=MDEyMzQ1Njc4OWFiY2RlZg==,i=4096"));
        // The proof covers the server-first message the client saw, with the RFC's salt.
        assert_eq!(ex.finish(CLIENT_FINAL), Err(ScramError::Proof));
    }

    #[test]
    fn proofs_of_the_wrong_size_or_not_base64_are_malformed() {
        let good = "dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=";
        assert!(decode_proof(good).is_ok());
        const NOT_BASE64: ScramError = ScramError::Malformed("proof not base64");
        const SIZE: ScramError = ScramError::Malformed("proof not 32 bytes");
        assert_eq!(decode_proof("dHzb*apW"), Err(NOT_BASE64));
        assert_eq!(decode_proof("dHzbZapW"), Err(SIZE));
        assert_eq!(decode_proof(""), Err(SIZE));
        assert_eq!(decode_proof(&B64.encode([1u8; 33])), Err(SIZE));
        assert_eq!(decode_proof(&B64.encode([1u8; 48])), Err(SIZE));
        assert_eq!(decode_proof(&B64.encode([1u8; 300])), Err(SIZE));
        assert_eq!(decode_proof(&"*".repeat(100)), Err(NOT_BASE64));
    }

    #[test]
    fn random_bytes_come_fresh_across_pool_refills() {
        let mut seen = std::collections::HashSet::new();
        // Sizes that straddle the pool's end, and one drawn directly.
        for len in [4, 18, 100, 7, RANDOM_POOL / 4, RANDOM_POOL, 4, 18] {
            for _ in 0..40 {
                let mut b = vec![0u8; len];
                random_bytes(&mut b);
                assert!(seen.insert(b), "a {len}-byte draw repeated");
            }
        }
        let n = server_nonce();
        assert_eq!(n.len(), 24);
        assert!(!n.contains(',') && n != server_nonce());
    }

    #[test]
    fn a_stored_secret_checks_the_same_password() {
        let secret = pencil().to_secret();
        assert!(secret.starts_with("SCRAM-SHA-256$4096:W22ZaJ0SNY7soEsUEjb6gQ==$"));
        let v = Verifier::parse(&secret).unwrap();
        assert_eq!(v, pencil());
        let ex = start(&v, CLIENT_FIRST, SERVER_NONCE).unwrap();
        assert_eq!(ex.finish(CLIENT_FINAL).unwrap().0, SERVER_FINAL);
        for bad in [
            "md5abc",
            "SCRAM-SHA-256$4096:salt",
            "SCRAM-SHA-256$x:W22ZaJ0SNY7soEsUEjb6gQ==$a:b",
            "SCRAM-SHA-256$4096:W22ZaJ0SNY7soEsUEjb6gQ==$c2hvcnQ=:c2hvcnQ=",
        ] {
            assert!(Verifier::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_wrong_password_a_foreign_nonce_or_channel_binding_fail() {
        let wrong = Verifier::from_password("pencil2", &B64.decode(SALT_B64).unwrap(), 4096);
        let ex = start(&wrong, CLIENT_FIRST, SERVER_NONCE).unwrap();
        assert_eq!(ex.finish(CLIENT_FINAL), Err(ScramError::Proof));

        let ex = start(&pencil(), CLIENT_FIRST, "other").unwrap();
        assert_eq!(ex.finish(CLIENT_FINAL), Err(ScramError::Nonce));

        let plus = "p=tls-server-end-point,,n=,r=abc";
        assert_eq!(
            start(&pencil(), plus, SERVER_NONCE).unwrap_err(),
            ScramError::ChannelBinding
        );
        let ex = start(&pencil(), CLIENT_FIRST, SERVER_NONCE).unwrap();
        let bound = CLIENT_FINAL.replace("c=biws", "c=cD10bHMtc2VydmVyLWVuZC1wb2ludCws");
        assert_eq!(ex.finish(&bound), Err(ScramError::ChannelBinding));

        for bad in ["", "x,,r=a", "n,,n=user"] {
            assert!(start(&pencil(), bad, SERVER_NONCE).is_err(), "{bad:?}");
        }
        let ex = start(&pencil(), CLIENT_FIRST, SERVER_NONCE).unwrap();
        assert!(ex.finish("c=biws,r=x").is_err());
        // A nonce that only starts like the exchange's is not it.
        let ex = start(&pencil(), CLIENT_FIRST, SERVER_NONCE).unwrap();
        let longer = CLIENT_FINAL.replace("$k0,p=", "$k0x,p=");
        assert_eq!(ex.finish(&longer), Err(ScramError::Nonce));
    }

    #[test]
    fn postgres_clients_send_an_empty_user_name() {
        // libpq's client-first: the user name is in the startup packet, not here.
        let ex = start(&pencil(), "n,,n=,r=rOprNGfwEbeRWgbNEkqO", SERVER_NONCE).unwrap();
        assert_eq!(ex.server_first(), SERVER_FIRST);
        // The proof covers the client-first-message-bare, so it differs from the RFC's.
        assert_eq!(ex.finish(CLIENT_FINAL), Err(ScramError::Proof));
    }
}
