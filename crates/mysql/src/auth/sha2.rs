//! `caching_sha2_password`.
//!
//! Fast path: the client sends SHA256(pw) XOR SHA256(SHA256(SHA256(pw)) + nonce). A MySQL
//! server keeps only a hash of the password and can check this only for users in its cache,
//! asking the others for full authentication (the password over TLS or RSA-encrypted). The
//! proxy knows every password, so it checks the fast path for anyone, any time: a client never
//! needs TLS or the server's RSA key to log in (as a server, the proxy never asks for full
//! authentication; as a client of MySQL 8 servers, it performs it — see `backend::conn`).

use sha2::{Digest, Sha256};

/// AuthMoreData byte: the fast path succeeded.
pub const FAST_AUTH_SUCCESS: u8 = 3;
/// AuthMoreData byte: send the password (full authentication).
pub const PERFORM_FULL_AUTHENTICATION: u8 = 4;
/// Client byte: please send the public key.
pub const REQUEST_PUBLIC_KEY: u8 = 2;

/// The fast-path response for `password` and `nonce`.
pub fn scramble(password: &[u8], nonce: &[u8]) -> Vec<u8> {
    if password.is_empty() {
        return Vec::new();
    }
    let stage1 = Sha256::digest(password);
    let stage2 = Sha256::digest(stage1);
    let mut h = Sha256::new();
    h.update(stage2);
    h.update(&nonce[..nonce.len().min(20)]);
    let mix = h.finalize();
    stage1.iter().zip(mix.iter()).map(|(a, b)| a ^ b).collect()
}

/// Checks a fast-path response against the known password.
pub fn verify_fast(password: &[u8], nonce: &[u8], response: &[u8]) -> bool {
    super::constant_time_eq(&scramble(password, nonce), response)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fast_path() {
        let nonce = b"abcdefghijklmnopqrst";
        let s = scramble(b"secret", nonce);
        assert_eq!(s.len(), 32);
        assert!(verify_fast(b"secret", nonce, &s));
        assert!(!verify_fast(b"secreT", nonce, &s));
    }
}
