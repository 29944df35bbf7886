//! Which plugin the proxy verifies a client with, for whatever plugin the client announced.
//!
//! The proxy speaks `mysql_native_password` and `caching_sha2_password`, and since it knows
//! every password it can verify either at any time (see `sha2`). A client that announced one
//! of them with an answer is verified as it is. A client that announced one of them without
//! an answer (libmysqlclient does so in COM_CHANGE_USER) is asked again in the same plugin
//! with a fresh nonce. Anything else — `sha256_password`, `mysql_clear_password`,
//! `client_ed25519`, `dialog`, a name nobody knows — is switched to `[proxy]
//! default_auth_plugin`, as a MariaDB or MySQL server switches a client to the account's
//! plugin. The password is never asked for in clear.

use crate::wire::consts::{CACHING_SHA2_PASSWORD, NATIVE_PASSWORD};

/// What to do with a client's first authentication answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Plan {
    /// Verify the answer as this plugin's.
    Verify(&'static str),
    /// Send an auth switch to this plugin (with a fresh nonce) and verify its answer.
    Switch(&'static str),
}

/// The plan for a client that announced `announced` with an empty or non-empty answer, for an
/// account with or without a password; `default` is the plugin the greeting announced.
pub fn plan(announced: &str, answered: bool, has_password: bool, default: &'static str) -> Plan {
    let known = match announced {
        NATIVE_PASSWORD => Some(NATIVE_PASSWORD),
        CACHING_SHA2_PASSWORD => Some(CACHING_SHA2_PASSWORD),
        _ => None,
    };
    match known {
        Some(p) if answered || !has_password => Plan::Verify(p),
        Some(p) => Plan::Switch(p),
        None => Plan::Switch(default),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_announced_plugin_has_a_plan() {
        use Plan::*;
        let (n, s) = (NATIVE_PASSWORD, CACHING_SHA2_PASSWORD);
        // (announced, answered, has_password, default) -> plan
        let table: &[(&str, bool, bool, &'static str, Plan)] = &[
            (n, true, true, n, Verify(n)),
            (n, true, true, s, Verify(n)),
            (s, true, true, n, Verify(s)),
            (s, true, true, s, Verify(s)),
            // libmysqlclient's COM_CHANGE_USER: caching_sha2 without an answer.
            (s, false, true, n, Switch(s)),
            (n, false, true, s, Switch(n)),
            // An empty password needs no answer.
            (n, false, false, n, Verify(n)),
            (s, false, false, n, Verify(s)),
            ("sha256_password", true, true, n, Switch(n)),
            ("sha256_password", true, true, s, Switch(s)),
            ("mysql_clear_password", true, true, n, Switch(n)),
            ("client_ed25519", true, true, s, Switch(s)),
            ("dialog", false, true, n, Switch(n)),
            ("no_such_plugin", true, false, n, Switch(n)),
            ("", true, true, n, Switch(n)),
        ];
        for &(announced, answered, has_password, default, want) in table {
            assert_eq!(
                plan(announced, answered, has_password, default),
                want,
                "{announced} answered={answered} password={has_password} default={default}"
            );
        }
    }
}
