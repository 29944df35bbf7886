//! Self-signed certificates for tests (openssl CLI).
#![allow(dead_code)]

use std::path::Path;
use std::process::Command;

/// A self-signed certificate for 127.0.0.1 with subject common name `cn`, and its key, in
/// `dir` as `{name}-cert.pem` and `{name}-key.pem`: (cert, key).
pub fn self_signed(dir: &Path, name: &str, cn: &str) -> (String, String) {
    let (cert, key) = (
        dir.join(format!("{name}-cert.pem")),
        dir.join(format!("{name}-key.pem")),
    );
    let openssl = sluice_testkit::find_program("openssl", "openssl").expect("openssl");
    let out = Command::new(openssl)
        .args([
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
        ])
        .args([
            "-subj",
            &format!("/CN={cn}"),
            "-addext",
            "subjectAltName=IP:127.0.0.1",
        ])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .expect("run openssl");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    (cert.display().to_string(), key.display().to_string())
}
