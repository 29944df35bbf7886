//! The connection-phase packets: the server greeting (Handshake v10), the client's handshake
//! response, the SSL request, and auth-switch requests. Both directions are here because the
//! proxy is a server to its clients and a client to its backends.

use super::buf::{put_lenenc, put_lenenc_bytes, Reader};
use super::consts::cap;

/// Handshake v10, as sent by a server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Greeting {
    /// Server version string.
    pub server_version: String,
    /// Connection (thread) id.
    pub connection_id: u32,
    /// The 20-byte nonce.
    pub scramble: [u8; 20],
    /// Capability flags (lower 32 bits; MariaDB's extended flags are not used).
    pub capabilities: u64,
    /// Default collation id.
    pub collation: u8,
    /// Status flags.
    pub status: u16,
    /// Default authentication plugin.
    pub auth_plugin: String,
}

impl Greeting {
    /// Serialises the greeting payload.
    pub fn encode(&self, out: &mut Vec<u8>) {
        let caps = self.capabilities;
        out.push(10);
        out.extend_from_slice(self.server_version.as_bytes());
        out.push(0);
        out.extend_from_slice(&self.connection_id.to_le_bytes());
        out.extend_from_slice(&self.scramble[..8]);
        out.push(0);
        out.extend_from_slice(&(caps as u16).to_le_bytes());
        out.push(self.collation);
        out.extend_from_slice(&self.status.to_le_bytes());
        out.extend_from_slice(&((caps >> 16) as u16).to_le_bytes());
        out.push(21); // auth plugin data length: 20 + NUL
        out.extend_from_slice(&[0; 10]);
        // As decode reads them: the second part of the nonce and the plugin name exist only
        // with these capabilities.
        if caps & cap::SECURE_CONNECTION != 0 {
            out.extend_from_slice(&self.scramble[8..]);
            out.push(0);
        }
        if caps & cap::PLUGIN_AUTH != 0 {
            out.extend_from_slice(self.auth_plugin.as_bytes());
            out.push(0);
        }
    }

    /// Parses a greeting payload.
    pub fn decode(payload: &[u8]) -> Option<Greeting> {
        let mut r = Reader::new(payload);
        if r.u8()? != 10 {
            return None;
        }
        let server_version = String::from_utf8_lossy(r.nul_str()).into_owned();
        let connection_id = r.u32()?;
        let mut scramble = [0u8; 20];
        scramble[..8].copy_from_slice(r.take(8)?);
        r.u8()?;
        let lower = r.u16()? as u64;
        let collation = r.u8().unwrap_or(0);
        let status = r.u16().unwrap_or(0);
        let upper = r.u16().unwrap_or(0) as u64;
        let capabilities = lower | (upper << 16);
        let data_len = r.u8().unwrap_or(0) as usize;
        r.take(10)?;
        if capabilities & cap::SECURE_CONNECTION != 0 {
            let n = data_len.saturating_sub(8).max(13);
            let part2 = r.take(n)?;
            let take = part2.len().min(12);
            scramble[8..8 + take].copy_from_slice(&part2[..take]);
        }
        let auth_plugin = if capabilities & cap::PLUGIN_AUTH != 0 {
            String::from_utf8_lossy(r.nul_str()).into_owned()
        } else {
            super::consts::NATIVE_PASSWORD.to_string()
        };
        Some(Greeting {
            server_version,
            connection_id,
            scramble,
            capabilities,
            collation,
            status,
            auth_plugin,
        })
    }
}

/// A client's handshake response (Protocol::HandshakeResponse41).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HandshakeResponse {
    /// Client capability flags.
    pub capabilities: u64,
    /// Maximum packet size the client accepts.
    pub max_packet: u32,
    /// Client collation id.
    pub collation: u8,
    /// User name.
    pub user: String,
    /// Authentication response for `auth_plugin`.
    pub auth_response: Vec<u8>,
    /// Initial schema (CLIENT_CONNECT_WITH_DB).
    pub database: Option<String>,
    /// Plugin the auth response was computed for.
    pub auth_plugin: Option<String>,
    /// Connection attributes.
    pub attributes: Vec<(String, String)>,
}

/// Length of an SSL request: the first 32 bytes of a handshake response.
pub const SSL_REQUEST_LEN: usize = 32;

impl HandshakeResponse {
    /// Parses a handshake response. `None` if malformed or pre-4.1.
    pub fn decode(payload: &[u8]) -> Option<HandshakeResponse> {
        let mut r = Reader::new(payload);
        let caps = r.u32()? as u64;
        if caps & cap::PROTOCOL_41 == 0 {
            return None;
        }
        let max_packet = r.u32()?;
        let collation = r.u8()?;
        r.take(23)?;
        let user = String::from_utf8_lossy(r.nul_str()).into_owned();
        let auth_response = if caps & cap::PLUGIN_AUTH_LENENC_CLIENT_DATA != 0 {
            r.lenenc_bytes()?.to_vec()
        } else if caps & cap::SECURE_CONNECTION != 0 {
            let n = r.u8()? as usize;
            r.take(n)?.to_vec()
        } else {
            r.nul_str().to_vec()
        };
        let database = if caps & cap::CONNECT_WITH_DB != 0 && r.remaining() > 0 {
            let db = r.nul_str();
            (!db.is_empty()).then(|| String::from_utf8_lossy(db).into_owned())
        } else {
            None
        };
        let auth_plugin = if caps & cap::PLUGIN_AUTH != 0 && r.remaining() > 0 {
            Some(String::from_utf8_lossy(r.nul_str()).into_owned())
        } else {
            None
        };
        let mut attributes = Vec::new();
        if caps & cap::CONNECT_ATTRS != 0 && r.remaining() > 0 {
            if let Some(block) = r.lenenc_bytes() {
                let mut a = Reader::new(block);
                while a.remaining() > 0 {
                    let (Some(k), Some(v)) = (a.lenenc_bytes(), a.lenenc_bytes()) else {
                        break;
                    };
                    if attributes.len() < 64 {
                        attributes.push((
                            String::from_utf8_lossy(k).into_owned(),
                            String::from_utf8_lossy(v).into_owned(),
                        ));
                    }
                }
            }
        }
        Some(HandshakeResponse {
            capabilities: caps,
            max_packet,
            collation,
            user,
            auth_response,
            database,
            auth_plugin,
            attributes,
        })
    }

    /// Serialises the response (as the proxy sends it to a backend).
    pub fn encode(&self, out: &mut Vec<u8>) {
        let caps = self.capabilities;
        out.extend_from_slice(&(caps as u32).to_le_bytes());
        out.extend_from_slice(&self.max_packet.to_le_bytes());
        out.push(self.collation);
        out.extend_from_slice(&[0; 23]);
        out.extend_from_slice(self.user.as_bytes());
        out.push(0);
        if caps & cap::PLUGIN_AUTH_LENENC_CLIENT_DATA != 0 {
            put_lenenc_bytes(out, &self.auth_response);
        } else if caps & cap::SECURE_CONNECTION != 0 {
            out.push(self.auth_response.len() as u8);
            out.extend_from_slice(&self.auth_response);
        } else {
            // Without CLIENT_SECURE_CONNECTION the response is NUL-terminated, as decode reads it.
            out.extend_from_slice(&self.auth_response);
            out.push(0);
        }
        if caps & cap::CONNECT_WITH_DB != 0 {
            out.extend_from_slice(self.database.as_deref().unwrap_or("").as_bytes());
            out.push(0);
        }
        if caps & cap::PLUGIN_AUTH != 0 {
            out.extend_from_slice(self.auth_plugin.as_deref().unwrap_or("").as_bytes());
            out.push(0);
        }
        if caps & cap::CONNECT_ATTRS != 0 {
            let mut block = Vec::new();
            for (k, v) in &self.attributes {
                put_lenenc_bytes(&mut block, k.as_bytes());
                put_lenenc_bytes(&mut block, v.as_bytes());
            }
            put_lenenc(out, block.len() as u64);
            out.extend_from_slice(&block);
        }
    }
}

/// An auth-switch request: `0xFE`, plugin name, plugin data.
pub fn encode_auth_switch(out: &mut Vec<u8>, plugin: &str, data: &[u8]) {
    out.push(0xfe);
    out.extend_from_slice(plugin.as_bytes());
    out.push(0);
    out.extend_from_slice(data);
    out.push(0);
}

/// Parses an auth-switch request into (plugin, data without trailing NUL).
pub fn decode_auth_switch(payload: &[u8]) -> Option<(String, Vec<u8>)> {
    let mut r = Reader::new(payload);
    if r.u8()? != 0xfe {
        return None;
    }
    let plugin = String::from_utf8_lossy(r.nul_str()).into_owned();
    let mut data = r.take_rest().to_vec();
    if data.last() == Some(&0) {
        data.pop();
    }
    Some((plugin, data))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn greeting_round_trip() {
        let g = Greeting {
            server_version: "5.5.5-10.11.19-MariaDB".into(),
            connection_id: 77,
            scramble: *b"abcdefghijklmnopqrst",
            capabilities: cap::PROTOCOL_41
                | cap::SECURE_CONNECTION
                | cap::PLUGIN_AUTH
                | cap::DEPRECATE_EOF,
            collation: 45,
            status: 2,
            auth_plugin: "mysql_native_password".into(),
        };
        let mut v = Vec::new();
        g.encode(&mut v);
        assert_eq!(Greeting::decode(&v), Some(g));
    }

    #[test]
    fn response_round_trip() {
        let h = HandshakeResponse {
            capabilities: cap::PROTOCOL_41
                | cap::SECURE_CONNECTION
                | cap::PLUGIN_AUTH
                | cap::PLUGIN_AUTH_LENENC_CLIENT_DATA
                | cap::CONNECT_WITH_DB
                | cap::CONNECT_ATTRS,
            max_packet: 1 << 24,
            collation: 45,
            user: "app".into(),
            auth_response: vec![1; 20],
            database: Some("test".into()),
            auth_plugin: Some("mysql_native_password".into()),
            attributes: vec![("_client_name".into(), "sluice".into())],
        };
        let mut v = Vec::new();
        h.encode(&mut v);
        assert_eq!(HandshakeResponse::decode(&v), Some(h));
        assert_eq!(HandshakeResponse::decode(&v[..10]), None);
    }

    /// Found by fuzzing (target `handshake`): without CLIENT_SECURE_CONNECTION the encoders
    /// wrote what the decoders do not read (a second nonce part and plugin name in the
    /// greeting, a length-prefixed auth response), so a decoded packet did not survive being
    /// written again.
    #[test]
    fn encoders_follow_the_capabilities_like_the_decoders() {
        let g = Greeting {
            server_version: "10.11".into(),
            connection_id: 1,
            scramble: *b"abcdefgh\0\0\0\0\0\0\0\0\0\0\0\0",
            capabilities: cap::PROTOCOL_41,
            collation: 8,
            status: 2,
            auth_plugin: super::super::consts::NATIVE_PASSWORD.into(),
        };
        let mut v = Vec::new();
        g.encode(&mut v);
        assert_eq!(Greeting::decode(&v), Some(g));

        let h = HandshakeResponse {
            capabilities: cap::PROTOCOL_41 | cap::CONNECT_WITH_DB,
            user: "app".into(),
            auth_response: b"secret".to_vec(),
            database: Some("test".into()),
            ..HandshakeResponse::default()
        };
        let mut v = Vec::new();
        h.encode(&mut v);
        assert_eq!(HandshakeResponse::decode(&v), Some(h));
    }

    #[test]
    fn auth_switch_round_trip() {
        let mut v = Vec::new();
        encode_auth_switch(&mut v, "mysql_native_password", b"01234567890123456789");
        assert_eq!(
            decode_auth_switch(&v),
            Some((
                "mysql_native_password".to_string(),
                b"01234567890123456789".to_vec()
            ))
        );
    }
}
