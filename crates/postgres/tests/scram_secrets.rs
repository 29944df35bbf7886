//! The SCRAM verifier sluice derives from a password is the one a real PostgreSQL stores for
//! it, and sluice reads PostgreSQL's stored form.
// A tool around the proxy (tests, benchmarks, fuzzing): a broken invariant or a failed
// set-up step is reported by panicking, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use sluice_postgres::scram::Verifier;
use sluice_testkit::Postgres;

#[test]
fn verifiers_match_what_postgres_stores() {
    let pg = Postgres::start_primary().expect("PostgreSQL starts (is postgresql-15 installed?)");
    pg.sql("SET password_encryption = 'scram-sha-256'; CREATE ROLE app LOGIN PASSWORD 'pencil'")
        .unwrap();
    let secret = pg
        .sql("SELECT rolpassword FROM pg_authid WHERE rolname = 'app'")
        .unwrap();
    let stored = Verifier::parse(&secret).expect("PostgreSQL's stored form");
    assert_eq!(stored.to_secret(), secret);
    let derived = Verifier::from_password("pencil", &stored.salt, stored.iterations);
    assert_eq!(
        derived, stored,
        "same keys for the same password, salt and iterations"
    );
    let other = Verifier::from_password("pencil2", &stored.salt, stored.iterations);
    assert_ne!(other.stored_key, stored.stored_key);
}
