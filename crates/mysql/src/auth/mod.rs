//! Password authentication: `mysql_native_password` and `caching_sha2_password`, which plugin
//! verifies which client (`plugin`), and the RSA encryption the proxy needs as a client of
//! MySQL 8 servers.
//!
//! The proxy knows each user's password, so it can both verify clients and log in to servers
//! with the same credentials.

pub mod native;
pub mod plugin;
pub mod rsa;
pub mod sha2;

/// Compares two byte strings in time independent of where they differ.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let mut diff = 0u8;
    for (x, y) in a.iter().zip(b) {
        diff |= x ^ y;
    }
    diff == 0
}

/// A fresh 20-byte nonce of printable, non-NUL bytes (clients treat part of it as a C string).
pub fn new_scramble() -> [u8; 20] {
    use rand::RngExt;
    let mut rng = rand::rng();
    let mut s = [0u8; 20];
    for b in s.iter_mut() {
        *b = rng.random_range(0x21u8..0x7f);
    }
    s
}

/// `data` XOR `key`, repeating `key`.
pub fn xor_cycle(data: &[u8], key: &[u8]) -> Vec<u8> {
    data.iter()
        .zip(key.iter().cycle())
        .map(|(d, k)| d ^ k)
        .collect()
}
