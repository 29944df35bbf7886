//! RSA for `caching_sha2_password` full authentication with a server over plain TCP: the
//! proxy, as a client, encrypts the password with the server's public key.
//!
//! (The proxy never asks its own clients for full authentication: it knows every password,
//! so it verifies their scrambles directly; see `frontend::handshake`.)
//!
//! Uses aws-lc-rs (RSA-OAEP with SHA-1, as MySQL clients encrypt).

use aws_lc_rs::rsa::{OaepPublicEncryptingKey, PublicEncryptingKey, OAEP_SHA1_MGF1SHA1};
use base64::Engine;

/// RSA failures.
#[derive(Debug, thiserror::Error)]
pub enum RsaError {
    /// The key could not be parsed.
    #[error("RSA key error")]
    Key,
    /// Encryption failed.
    #[error("RSA encryption failed")]
    Encrypt,
}

/// Encrypts `password` for a server's `caching_sha2_password` full authentication: the
/// NUL-terminated password XOR the nonce, RSA-OAEP with the server's PEM public key.
pub fn encrypt_password(
    public_pem: &[u8],
    password: &[u8],
    nonce: &[u8],
) -> Result<Vec<u8>, RsaError> {
    let der = pem_decode(public_pem).ok_or(RsaError::Key)?;
    let key = PublicEncryptingKey::from_der(&der).map_err(|_| RsaError::Key)?;
    let key = OaepPublicEncryptingKey::new(key).map_err(|_| RsaError::Key)?;
    let mut plain = password.to_vec();
    plain.push(0);
    let plain = super::xor_cycle(&plain, &nonce[..nonce.len().min(20)]);
    let mut out = vec![0u8; key.ciphertext_size()];
    let ct = key
        .encrypt(&OAEP_SHA1_MGF1SHA1, &plain, &mut out, None)
        .map_err(|_| RsaError::Encrypt)?;
    Ok(ct.to_vec())
}

fn pem_decode(pem: &[u8]) -> Option<Vec<u8>> {
    let text = std::str::from_utf8(pem).ok()?;
    let body: String = text
        .lines()
        .filter(|l| !l.starts_with("-----"))
        .map(str::trim)
        .collect();
    base64::engine::general_purpose::STANDARD.decode(body).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_lc_rs::encoding::AsDer;
    use aws_lc_rs::rsa::{KeySize, OaepPrivateDecryptingKey, PrivateDecryptingKey};

    #[test]
    fn encrypt_then_decrypt() {
        let key = PrivateDecryptingKey::generate(KeySize::Rsa2048).unwrap();
        let der = key.public_key().as_der().unwrap();
        let b64 = base64::engine::general_purpose::STANDARD.encode(der.as_ref());
        let pem = format!("-----BEGIN PUBLIC KEY-----\n{b64}\n-----END PUBLIC KEY-----\n");
        let nonce = b"abcdefghijklmnopqrst";
        let ct = encrypt_password(pem.as_bytes(), b"secret", nonce).unwrap();
        let private = OaepPrivateDecryptingKey::new(key).unwrap();
        let mut out = vec![0u8; private.min_output_size()];
        let plain = private
            .decrypt(&OAEP_SHA1_MGF1SHA1, &ct, &mut out, None)
            .unwrap();
        assert_eq!(super::super::xor_cycle(plain, nonce), b"secret\0");
    }
}
