//! SCRAM-SHA-256 from the client's side: how sluice logs in to a PostgreSQL server that asks
//! for it. No channel binding (`n,,`, the mechanism `SCRAM-SHA-256` even over `[pool] tls`,
//! where the server also offers `-PLUS`): a server requires it only by its clients' choice.

use crate::scram::{hmac_sha256, salted_password, sha256, ScramError};
use aws_lc_rs::constant_time;
use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;

/// What sluice proves itself with.
#[derive(Clone, Debug)]
pub enum ClientSecret {
    /// The password.
    Password(String),
    /// The keys of a stored secret, with the client key a client's proof revealed (SCRAM
    /// pass-through): good for servers that store that same secret (same salt and
    /// iterations).
    Keys {
        /// The secret's verifier (salt, iterations, server key).
        verifier: crate::scram::Verifier,
        /// The client key.
        client_key: [u8; 32],
    },
}

/// SaltedPassword values already derived (PBKDF2 costs a millisecond or more of CPU, and a
/// server answers every login of a role with the same salt and iterations): a pool that
/// opens fifty connections derives once. Bounded; the oldest entry goes first.
static SALTED: parking_lot::Mutex<Vec<Salted>> = parking_lot::Mutex::new(Vec::new());

/// Most SaltedPassword values kept (one per configured role and server secret).
const SALTED_KEPT: usize = 64;

struct Salted {
    password: String,
    salt: Vec<u8>,
    iterations: u32,
    salted: [u8; 32],
}

/// [`salted_password`] if it was derived already.
fn salted_kept(password: &str, salt: &[u8], iterations: u32) -> Option<[u8; 32]> {
    SALTED.lock().iter().find_map(|e| {
        (e.iterations == iterations && e.salt == salt && e.password == password).then_some(e.salted)
    })
}

/// [`salted_password`], derived once per password, salt and iteration count.
fn salted_cached(password: &str, salt: &[u8], iterations: u32) -> [u8; 32] {
    if let Some(salted) = salted_kept(password, salt, iterations) {
        return salted;
    }
    // Derived outside the lock: other logins do not wait for this one.
    let salted = salted_password(password, salt, iterations);
    let mut kept = SALTED.lock();
    if kept.len() >= SALTED_KEPT {
        kept.remove(0);
    }
    kept.push(Salted {
        password: password.to_string(),
        salt: salt.to_vec(),
        iterations,
        salted,
    });
    salted
}

/// One exchange in progress.
#[derive(Debug)]
pub struct ClientExchange {
    secret: ClientSecret,
    nonce: String,
    client_first_bare: String,
    server_key: Option<[u8; 32]>,
    auth_message: String,
}

impl ClientExchange {
    /// Starts an exchange for `password`; `nonce` is fresh random printable characters. The
    /// client-first message to send.
    pub fn start(secret: ClientSecret, nonce: &str) -> (ClientExchange, String) {
        let bare = format!("n=,r={nonce}");
        let first = format!("n,,{bare}");
        let ex = ClientExchange {
            secret,
            nonce: nonce.to_string(),
            client_first_bare: bare,
            server_key: None,
            auth_message: String::new(),
        };
        (ex, first)
    }

    /// Derives, on a blocking thread, the salted password the server-first message asks
    /// for, unless it was derived before (then [`ClientExchange::respond`] finds it). PBKDF2
    /// with the server's iteration count (up to 10,000,000: seconds of CPU) would otherwise
    /// run on the event loop, and every session of the thread would wait for it; a server
    /// that sends a new salt at every login could stall them at will. Nothing to do for a
    /// stored secret's keys, or for a message [`ClientExchange::respond`] will refuse.
    pub async fn derive_off_loop(&self, server_first: &str) {
        let ClientSecret::Password(password) = &self.secret else {
            return;
        };
        let Ok(first) = read_server_first(server_first) else {
            return;
        };
        if salted_kept(password, &first.salt, first.iterations).is_some() {
            return;
        }
        let password = password.clone();
        let derive = move || salted_cached(&password, &first.salt, first.iterations);
        // (Should the thread fail, `respond` derives it.)
        let _ = tokio::task::spawn_blocking(derive).await;
    }

    /// Answers the server-first message with the client-final message (the proof).
    pub fn respond(&mut self, server_first: &str) -> Result<String, ScramError> {
        let ServerFirst {
            nonce,
            salt,
            iterations,
        } = read_server_first(server_first)?;
        if !nonce.starts_with(&self.nonce) || nonce.len() == self.nonce.len() {
            return Err(ScramError::Nonce);
        }
        let (client_key, server_key) = match &self.secret {
            ClientSecret::Password(password) => {
                let salted = salted_cached(password, &salt, iterations);
                (
                    hmac_sha256(&salted, b"Client Key"),
                    hmac_sha256(&salted, b"Server Key"),
                )
            }
            ClientSecret::Keys {
                verifier,
                client_key,
            } => {
                if verifier.salt != salt || verifier.iterations != iterations {
                    return Err(ScramError::OtherSecret);
                }
                (*client_key, verifier.server_key)
            }
        };
        let stored_key = sha256(&client_key);
        let without_proof = format!("c=biws,r={nonce}");
        self.auth_message = format!("{},{server_first},{without_proof}", self.client_first_bare);
        let signature = hmac_sha256(&stored_key, self.auth_message.as_bytes());
        let proof: Vec<u8> = client_key
            .iter()
            .zip(signature)
            .map(|(k, s)| k ^ s)
            .collect();
        self.server_key = Some(server_key);
        Ok(format!("{without_proof},p={}", B64.encode(proof)))
    }

    /// Checks the server-final message: the server knew the password too.
    pub fn verify(&self, server_final: &str) -> Result<(), ScramError> {
        let v = server_final
            .strip_prefix("v=")
            .ok_or(ScramError::Malformed("no server signature"))?;
        let got = B64
            .decode(v)
            .map_err(|_| ScramError::Malformed("signature not base64"))?;
        let key = self
            .server_key
            .ok_or(ScramError::Malformed("out of order"))?;
        let want = hmac_sha256(&key, self.auth_message.as_bytes());
        constant_time::verify_slices_are_equal(&got, &want).map_err(|_| ScramError::Proof)
    }
}

/// What a server-first message says.
struct ServerFirst<'a> {
    /// The client's nonce and the server's.
    nonce: &'a str,
    salt: Vec<u8>,
    iterations: u32,
}

/// Reads a server-first message (`r=<nonce>,s=<salt>,i=<iterations>`).
fn read_server_first(server_first: &str) -> Result<ServerFirst<'_>, ScramError> {
    let mut nonce = None;
    let mut salt = None;
    let mut iterations = None;
    for attr in server_first.split(',') {
        if let Some(v) = attr.strip_prefix("r=") {
            nonce = Some(v);
        } else if let Some(v) = attr.strip_prefix("s=") {
            salt = Some(v);
        } else if let Some(v) = attr.strip_prefix("i=") {
            iterations = v.parse::<u32>().ok();
        }
    }
    let nonce = nonce.ok_or(ScramError::Malformed("no server nonce"))?;
    let salt = B64
        .decode(salt.ok_or(ScramError::Malformed("no salt"))?)
        .map_err(|_| ScramError::Malformed("salt not base64"))?;
    let iterations = iterations
        .filter(|i| (1..=10_000_000).contains(i))
        .ok_or(ScramError::Malformed("iteration count"))?;
    Ok(ServerFirst {
        nonce,
        salt,
        iterations,
    })
}

/// PostgreSQL's MD5 password answer: `md5` + md5(md5(password + user) + salt), in hex.
pub fn md5_response(user: &str, password: &str, salt: [u8; 4]) -> String {
    let inner = md5_hex(&[password.as_bytes(), user.as_bytes()]);
    format!("md5{}", md5_hex(&[inner.as_bytes(), &salt]))
}

/// md5(password + user) in hex, as PostgreSQL stores MD5 passwords (after `md5`).
pub fn md5_hex(parts: &[&[u8]]) -> String {
    use md5::Digest;
    let mut h = md5::Md5::new();
    for p in parts {
        h.update(p);
    }
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scram::{Prepared, ServerExchange, Verifier};
    use std::sync::atomic::Ordering;

    #[test]
    fn the_client_logs_in_to_sluices_own_server_side() {
        let v = Verifier::from_password("pencil", b"saltsalt", 4096);
        let (mut c, first) =
            ClientExchange::start(ClientSecret::Password("pencil".into()), "abcdef");
        let s = ServerExchange::start(&Prepared::new(&v), &first, "XYZ").unwrap();
        let fin = c.respond(s.server_first()).unwrap();
        let (server_final, client_key) = s.finish(&fin).unwrap();
        c.verify(&server_final).unwrap();
        assert!(c.verify("v=AAAA").is_err());

        // The client key the proof revealed logs in to a server with the same secret...
        let keys = ClientSecret::Keys {
            verifier: v.clone(),
            client_key,
        };
        let (mut c, first) = ClientExchange::start(keys.clone(), "ghijkl");
        let s = ServerExchange::start(&Prepared::new(&v), &first, "UVW").unwrap();
        let fin = c.respond(s.server_first()).unwrap();
        c.verify(&s.finish(&fin).unwrap().0).unwrap();
        // ... and not to one with another salt.
        let other = Verifier::from_password("pencil", b"pepperpe", 4096);
        let (mut c, first) = ClientExchange::start(keys, "mnopqr");
        let s = ServerExchange::start(&Prepared::new(&other), &first, "RST").unwrap();
        assert_eq!(c.respond(s.server_first()), Err(ScramError::OtherSecret));
    }

    #[test]
    fn salted_passwords_are_derived_once_and_bounded() {
        let a = salted_cached("pw-cache-test", b"salt-one", 16);
        assert_eq!(a, salted_password("pw-cache-test", b"salt-one", 16));
        assert_eq!(salted_cached("pw-cache-test", b"salt-one", 16), a);
        // Another salt, iteration count or password is another value.
        assert_ne!(salted_cached("pw-cache-test", b"salt-two", 16), a);
        assert_ne!(salted_cached("pw-cache-test", b"salt-one", 17), a);
        assert_ne!(salted_cached("pw-cache-tesT", b"salt-one", 16), a);
        for i in 0..2 * SALTED_KEPT {
            salted_cached(&format!("pw-{i}"), b"s", 1);
        }
        assert!(SALTED.lock().len() <= SALTED_KEPT);
    }

    /// An uncached salted password is derived on a blocking thread: while it is, the event
    /// loop serves its other tasks (on a current-thread runtime, a task spawned before the
    /// derivation runs before it ends only if the derivation waits off the loop). After it,
    /// the answer takes the kept value.
    #[test]
    fn an_uncached_salted_password_is_derived_off_the_event_loop() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        rt.block_on(async {
            let v = Verifier::from_password("off-loop", b"a fresh salt", 200_000);
            let (mut c, first) =
                ClientExchange::start(ClientSecret::Password("off-loop".into()), "abcdef");
            let s = ServerExchange::start(&Prepared::new(&v), &first, "XYZ").unwrap();
            assert!(salted_kept("off-loop", b"a fresh salt", 200_000).is_none());
            let other = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
            let ran = other.clone();
            let task = tokio::spawn(async move { ran.store(true, Ordering::SeqCst) });
            c.derive_off_loop(s.server_first()).await;
            assert!(other.load(Ordering::SeqCst), "the loop served another task");
            assert!(salted_kept("off-loop", b"a fresh salt", 200_000).is_some());
            task.await.unwrap();
            let fin = c.respond(s.server_first()).unwrap();
            c.verify(&s.finish(&fin).unwrap().0).unwrap();
        });
    }

    #[test]
    fn md5_is_md5() {
        assert_eq!(md5_hex(&[b"a", b"bc"]), "900150983cd24fb0d6963f7d28e17f72");
        let r = md5_response("u", "p", [1, 2, 3, 4]);
        assert!(r.starts_with("md5") && r.len() == 35);
    }
}
