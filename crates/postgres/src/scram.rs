//! SCRAM-SHA-256 (RFC 5802, RFC 7677) from the server's side, as PostgreSQL runs it: the
//! client's first message (`n,,n=,r=<nonce>`: PostgreSQL ignores the SCRAM user name), the
//! server's (`r=<both nonces>,s=<salt>,i=<iterations>`), the client's proof, and the server's
//! signature. A verifier is derived from a configured password or given as PostgreSQL stores
//! it (`SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>`), so no plaintext is
//! needed. Channel binding (SCRAM-SHA-256-PLUS) is not offered: a client that requires it is
//! refused by its own library with a clear message, since the server does not list it.
//!
//! Passwords are used as given (SASLprep leaves ASCII passwords unchanged; non-ASCII ones
//! that SASLprep would normalise are not).

use aws_lc_rs::{constant_time, digest, hmac, pbkdf2};
use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use std::num::NonZeroU32;

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

/// PBKDF2-HMAC-SHA-256 of `password` (SaltedPassword in RFC 5802).
pub(crate) fn salted_password(password: &str, salt: &[u8], iterations: u32) -> [u8; 32] {
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

pub(crate) fn hmac_sha256(key: &[u8], data: &[u8]) -> [u8; 32] {
    let k = hmac::Key::new(hmac::HMAC_SHA256, key);
    let mut out = [0u8; 32];
    out.copy_from_slice(hmac::sign(&k, data).as_ref());
    out
}

pub(crate) fn sha256(data: &[u8]) -> [u8; 32] {
    let mut out = [0u8; 32];
    out.copy_from_slice(digest::digest(&digest::SHA256, data).as_ref());
    out
}

impl Verifier {
    /// The verifier of `password` with `salt` and `iterations`.
    pub fn from_password(password: &str, salt: &[u8], iterations: u32) -> Verifier {
        let salted = salted_password(password, salt, iterations);
        let client_key = hmac_sha256(&salted, b"Client Key");
        Verifier {
            iterations,
            salt: salt.to_vec(),
            stored_key: sha256(&client_key),
            server_key: hmac_sha256(&salted, b"Server Key"),
        }
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

/// The server's side of one exchange, between its first and the client's final message.
#[derive(Debug)]
pub struct ServerExchange {
    verifier: Verifier,
    client_first_bare: String,
    server_first: String,
    nonce: String,
}

impl ServerExchange {
    /// Reads the client's first message and answers it; `server_nonce` is fresh random
    /// printable characters (no comma).
    pub fn start(
        verifier: Verifier,
        client_first: &str,
        server_nonce: &str,
    ) -> Result<(ServerExchange, String), ScramError> {
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
        let nonce = format!("{client_nonce}{server_nonce}");
        let server_first = format!(
            "r={nonce},s={},i={}",
            B64.encode(&verifier.salt),
            verifier.iterations
        );
        let exchange = ServerExchange {
            verifier,
            client_first_bare: bare.to_string(),
            server_first: server_first.clone(),
            nonce,
        };
        Ok((exchange, server_first))
    }

    /// Checks the client's final message; when the proof holds, the server's final message
    /// and the client key the proof revealed (what logging in to a server that stores the
    /// same secret takes, without the password).
    pub fn finish(self, client_final: &str) -> Result<(String, [u8; 32]), ScramError> {
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
        // "n,," or "y,," base64-encoded: no channel binding data.
        if !matches!(binding, Some("biws") | Some("eSws")) {
            return Err(ScramError::ChannelBinding);
        }
        if nonce != Some(self.nonce.as_str()) {
            return Err(ScramError::Nonce);
        }
        let proof = B64
            .decode(proof)
            .map_err(|_| ScramError::Malformed("proof not base64"))?;
        if proof.len() != 32 {
            return Err(ScramError::Malformed("proof not 32 bytes"));
        }
        let auth_message = format!(
            "{},{},{}",
            self.client_first_bare, self.server_first, without_proof
        );
        let signature = hmac_sha256(&self.verifier.stored_key, auth_message.as_bytes());
        let mut client_key = [0u8; 32];
        for (k, (p, s)) in client_key.iter_mut().zip(proof.iter().zip(signature)) {
            *k = p ^ s;
        }
        constant_time::verify_slices_are_equal(&sha256(&client_key), &self.verifier.stored_key)
            .map_err(|_| ScramError::Proof)?;
        let server_signature = hmac_sha256(&self.verifier.server_key, auth_message.as_bytes());
        Ok((format!("v={}", B64.encode(server_signature)), client_key))
    }
}

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

    fn pencil() -> Verifier {
        Verifier::from_password("pencil", &B64.decode(SALT_B64).unwrap(), 4096)
    }

    #[test]
    fn the_rfc_7677_exchange_succeeds_byte_for_byte() {
        let (ex, first) = ServerExchange::start(pencil(), CLIENT_FIRST, SERVER_NONCE).unwrap();
        assert_eq!(first, SERVER_FIRST);
        assert_eq!(ex.finish(CLIENT_FINAL).unwrap().0, SERVER_FINAL);
    }

    #[test]
    fn a_stored_secret_checks_the_same_password() {
        let secret = pencil().to_secret();
        assert!(secret.starts_with("SCRAM-SHA-256$4096:W22ZaJ0SNY7soEsUEjb6gQ==$"));
        let v = Verifier::parse(&secret).unwrap();
        assert_eq!(v, pencil());
        let (ex, _) = ServerExchange::start(v, CLIENT_FIRST, SERVER_NONCE).unwrap();
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
        let (ex, _) = ServerExchange::start(wrong, CLIENT_FIRST, SERVER_NONCE).unwrap();
        assert_eq!(ex.finish(CLIENT_FINAL), Err(ScramError::Proof));

        let (ex, _) = ServerExchange::start(pencil(), CLIENT_FIRST, "other").unwrap();
        assert_eq!(ex.finish(CLIENT_FINAL), Err(ScramError::Nonce));

        let plus = "p=tls-server-end-point,,n=,r=abc";
        assert_eq!(
            ServerExchange::start(pencil(), plus, SERVER_NONCE).unwrap_err(),
            ScramError::ChannelBinding
        );
        let (ex, _) = ServerExchange::start(pencil(), CLIENT_FIRST, SERVER_NONCE).unwrap();
        let bound = CLIENT_FINAL.replace("c=biws", "c=cD10bHMtc2VydmVyLWVuZC1wb2ludCws");
        assert_eq!(ex.finish(&bound), Err(ScramError::ChannelBinding));

        for bad in ["", "x,,r=a", "n,,n=user"] {
            assert!(
                ServerExchange::start(pencil(), bad, SERVER_NONCE).is_err(),
                "{bad:?}"
            );
        }
        let (ex, _) = ServerExchange::start(pencil(), CLIENT_FIRST, SERVER_NONCE).unwrap();
        assert!(ex.finish("c=biws,r=x").is_err());
    }

    #[test]
    fn postgres_clients_send_an_empty_user_name() {
        // libpq's client-first: the user name is in the startup packet, not here.
        let (ex, first) =
            ServerExchange::start(pencil(), "n,,n=,r=rOprNGfwEbeRWgbNEkqO", SERVER_NONCE).unwrap();
        assert_eq!(first, SERVER_FIRST);
        // The proof covers the client-first-message-bare, so it differs from the RFC's.
        assert_eq!(ex.finish(CLIENT_FINAL), Err(ScramError::Proof));
    }
}
