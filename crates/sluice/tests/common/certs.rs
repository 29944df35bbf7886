//! Certificates for tests (openssl CLI): self-signed ones, and a CA with a certificate it
//! signed.
#![allow(dead_code)]

use std::ffi::OsStr;
use std::path::Path;
use std::process::Command;

/// Runs openssl with `args`, asserting it succeeds.
fn openssl<S: AsRef<OsStr>>(args: &[S]) {
    let bin = sluice_testkit::find_program("openssl", "openssl").expect("openssl");
    let out = Command::new(bin).args(args).output().expect("run openssl");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn path(p: &Path) -> String {
    p.display().to_string()
}

/// A self-signed certificate for 127.0.0.1 with subject common name `cn`, and its key, in
/// `dir` as `{name}-cert.pem` and `{name}-key.pem`: (cert, key).
pub fn self_signed(dir: &Path, name: &str, cn: &str) -> (String, String) {
    let (cert, key) = (
        path(&dir.join(format!("{name}-cert.pem"))),
        path(&dir.join(format!("{name}-key.pem"))),
    );
    openssl(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "1",
        "-subj",
        &format!("/CN={cn}"),
        "-addext",
        "subjectAltName=IP:127.0.0.1",
        "-keyout",
        &key,
        "-out",
        &cert,
    ]);
    (cert, key)
}

/// A CA, and a certificate for 127.0.0.1 it signed (rustls, rightly, refuses a CA
/// certificate used as a server's own): (ca, cert, key).
pub fn signed(dir: &Path, name: &str) -> (String, String, String) {
    let (ca, _) = self_signed(dir, &format!("{name}-ca"), "127.0.0.1");
    let ca_key = path(&dir.join(format!("{name}-ca-key.pem")));
    let (cert, key, csr, ext) = (
        path(&dir.join(format!("{name}-cert.pem"))),
        path(&dir.join(format!("{name}-key.pem"))),
        path(&dir.join(format!("{name}.csr"))),
        path(&dir.join(format!("{name}.ext"))),
    );
    std::fs::write(
        &ext,
        "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n",
    )
    .unwrap();
    openssl(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-subj",
        "/CN=127.0.0.1",
        "-keyout",
        &key,
        "-out",
        &csr,
    ]);
    openssl(&[
        "x509",
        "-req",
        "-in",
        &csr,
        "-CA",
        &ca,
        "-CAkey",
        &ca_key,
        "-CAcreateserial",
        "-days",
        "1",
        "-extfile",
        &ext,
        "-out",
        &cert,
    ]);
    (ca, cert, key)
}
