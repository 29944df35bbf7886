//! The RSA key pair for `caching_sha2_password` full authentication without TLS.
//!
//! Uses aws-lc-rs (RSA-OAEP with SHA-1, as MySQL clients encrypt), whose RSA decryption has no
//! open timing advisory — unlike the `rsa` crate (RUSTSEC-2023-0071, Marvin attack).

use aws_lc_rs::encoding::AsDer;
use aws_lc_rs::rsa::{
    KeySize, OaepPrivateDecryptingKey, OaepPublicEncryptingKey, PrivateDecryptingKey,
    PublicEncryptingKey, OAEP_SHA1_MGF1SHA1,
};
use base64::Engine;

/// The proxy's RSA key pair.
pub struct RsaKey {
    private: OaepPrivateDecryptingKey,
    public_pem: String,
}

impl std::fmt::Debug for RsaKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RsaKey").finish_non_exhaustive()
    }
}

/// RSA failures.
#[derive(Debug, thiserror::Error)]
pub enum RsaError {
    /// Key generation or parsing failed.
    #[error("RSA key error")]
    Key,
    /// Decryption failed (wrong key or corrupted data).
    #[error("RSA decryption failed")]
    Decrypt,
    /// Encryption failed.
    #[error("RSA encryption failed")]
    Encrypt,
}

impl RsaKey {
    /// Generates a 2048-bit key pair.
    pub fn generate() -> Result<RsaKey, RsaError> {
        let key = PrivateDecryptingKey::generate(KeySize::Rsa2048).map_err(|_| RsaError::Key)?;
        let der = key.public_key().as_der().map_err(|_| RsaError::Key)?;
        let public_pem = pem("PUBLIC KEY", der.as_ref());
        let private = OaepPrivateDecryptingKey::new(key).map_err(|_| RsaError::Key)?;
        Ok(RsaKey {
            private,
            public_pem,
        })
    }

    /// The public key in PEM (SubjectPublicKeyInfo), as sent to clients.
    pub fn public_pem(&self) -> &str {
        &self.public_pem
    }

    /// Decrypts a client's RSA-OAEP ciphertext.
    pub fn decrypt(&self, ciphertext: &[u8]) -> Result<Vec<u8>, RsaError> {
        let mut out = vec![0u8; self.private.min_output_size()];
        let plain = self
            .private
            .decrypt(&OAEP_SHA1_MGF1SHA1, ciphertext, &mut out, None)
            .map_err(|_| RsaError::Decrypt)?;
        Ok(plain.to_vec())
    }
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

fn pem(label: &str, der: &[u8]) -> String {
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut s = format!("-----BEGIN {label}-----\n");
    for chunk in b64.as_bytes().chunks(64) {
        s.push_str(std::str::from_utf8(chunk).unwrap_or(""));
        s.push('\n');
    }
    s.push_str(&format!("-----END {label}-----\n"));
    s
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

    #[test]
    fn encrypt_then_decrypt() {
        let key = RsaKey::generate().unwrap();
        assert!(key.public_pem().starts_with("-----BEGIN PUBLIC KEY-----\n"));
        let nonce = b"abcdefghijklmnopqrst";
        let ct = encrypt_password(key.public_pem().as_bytes(), b"secret", nonce).unwrap();
        let plain = key.decrypt(&ct).unwrap();
        assert_eq!(super::super::xor_cycle(&plain, nonce), b"secret\0");
        assert!(key.decrypt(&ct[1..]).is_err());
    }
}
