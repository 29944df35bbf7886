//! Target `handshake`: the connection-phase decoders. The whole input is given to each of
//! them: the server greeting, the client's handshake response, and the auth-switch request.
//! Whatever decodes must encode to bytes that decode to the same value, so the proxy can
//! pass on what it understood without changing it.

use sluice_mysql::wire::cap;
use sluice_mysql::wire::handshake::{
    decode_auth_switch, encode_auth_switch, Greeting, HandshakeResponse,
};

/// The harness body.
pub fn run(data: &[u8]) {
    if let Some(g) = Greeting::decode(data) {
        let mut wire = Vec::new();
        g.encode(&mut wire);
        assert_eq!(Greeting::decode(&wire), Some(g), "greeting round trip");
    }
    if let Some(mut h) = HandshakeResponse::decode(data) {
        assert!(h.attributes.len() <= 64, "attributes are bounded");
        let mut wire = Vec::new();
        h.encode(&mut wire);
        // With CLIENT_PLUGIN_AUTH, a missing plugin name is written as an empty one; both
        // mean "the server's default".
        if h.capabilities & cap::PLUGIN_AUTH != 0 && h.auth_plugin.is_none() {
            h.auth_plugin = Some(String::new());
        }
        assert_eq!(
            HandshakeResponse::decode(&wire),
            Some(h),
            "handshake response round trip"
        );
    }
    if let Some((plugin, auth)) = decode_auth_switch(data) {
        let mut wire = Vec::new();
        encode_auth_switch(&mut wire, &plugin, &auth);
        assert_eq!(
            decode_auth_switch(&wire),
            Some((plugin, auth)),
            "auth switch round trip"
        );
    }
}
