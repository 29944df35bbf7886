//! The first packet a client sends: a length, a code, and for a StartupMessage its parameters.
//! The code says which of four packets it is: a StartupMessage (protocol 3.x), an SSLRequest
//! or GSSENCRequest (asking to encrypt before starting), or a CancelRequest (on a connection
//! of its own). A client may ask for a newer minor version or for `_pq_.` protocol options
//! than the server supports; the server answers with NegotiateProtocolVersion and goes on in
//! the version it has (libpq 18+ asks for 3.2; libpq 19 "greases" with an unknown version to
//! keep servers honest).

/// The longest startup packet accepted (PostgreSQL's own limit is 10,000 bytes).
pub const MAX_STARTUP: usize = 10_000;

/// The newest protocol minor version sluice speaks (3.0).
pub const SUPPORTED_MINOR: u16 = 0;

const SSL_REQUEST: u32 = 80_877_103;
const GSSENC_REQUEST: u32 = 80_877_104;
const CANCEL_REQUEST: u32 = 80_877_102;

/// A malformed first packet (the client is told, then disconnected).
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// The length field is below the smallest packet or above [`MAX_STARTUP`].
    #[error("invalid startup packet length {0}")]
    Length(u32),
    /// A protocol major version other than 3.
    #[error(
        "unsupported frontend protocol {major}.{minor}: server supports 3.0 to 3.{SUPPORTED_MINOR}"
    )]
    Version {
        /// Major version asked for.
        major: u16,
        /// Minor version asked for.
        minor: u16,
    },
    /// The parameters are not NUL-terminated name/value pairs, or not UTF-8.
    #[error("invalid startup packet layout: {0}")]
    Layout(&'static str),
    /// A StartupMessage without a `user`.
    #[error("no PostgreSQL user name specified in startup packet")]
    NoUser,
    /// A message type no client sends after its login (PostgreSQL's own words for it).
    #[error("invalid frontend message type {0}")]
    MessageType(u8),
    /// A message (after the startup packet, from a client or a server) whose length field is
    /// below 4 (PostgreSQL's words, with the length).
    #[error("invalid message length {0}")]
    MessageLength(u32),
    /// A message longer than the limit given to [`crate::wire::read_message`].
    #[error("message of {len} bytes is over the limit of {limit}")]
    TooLong {
        /// Its announced length.
        len: usize,
        /// The limit.
        limit: usize,
    },
}

/// A StartupMessage's contents.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StartupParams {
    /// The minor protocol version the client asked for.
    pub minor: u16,
    /// Every parameter but the `_pq_.` protocol options, in the client's order (`user`,
    /// `database`, `application_name`, `options`, GUCs...): each name and value followed by
    /// a NUL, in one string (one allocation, not two per parameter).
    params: String,
    /// The `_pq_.` protocol options the client asked for; sluice supports none.
    pub protocol_options: Vec<String>,
}

impl StartupParams {
    /// The parameters (name, value), in the client's order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        let mut rest = self.params.as_str();
        // A byte loop: the strings are short, a searcher's setup would cost more.
        let mut next = move || {
            let end = rest.bytes().position(|b| b == 0)?;
            let s = rest.get(..end)?;
            rest = rest.get(end + 1..)?;
            Some(s)
        };
        std::iter::from_fn(move || Some((next()?, next()?)))
    }

    /// The parameters as received (each name and value followed by a NUL): equal texts,
    /// equal parameters.
    pub fn text(&self) -> &str {
        &self.params
    }

    /// A parameter's value (the last one given, as PostgreSQL takes it).
    pub fn get(&self, name: &str) -> Option<&str> {
        let [value] = self.get_all([name]);
        value
    }

    /// The values of `names` (the last one given of each), read in one pass.
    pub fn get_all<const N: usize>(&self, names: [&str; N]) -> [Option<&str>; N] {
        let mut values = [None; N];
        for (n, v) in self.iter() {
            if let Some(i) = names.iter().position(|&name| name == n) {
                values[i] = Some(v);
            }
        }
        values
    }

    /// The database: `database`, or the user name when none is given (as PostgreSQL does).
    pub fn database(&self) -> Option<&str> {
        let [database, user] = self.get_all(["database", "user"]);
        database.filter(|d| !d.is_empty()).or(user)
    }

    /// Whether the server must answer NegotiateProtocolVersion before going on: a newer minor
    /// version, or protocol options, were asked for.
    pub fn needs_negotiation(&self) -> bool {
        self.minor > SUPPORTED_MINOR || !self.protocol_options.is_empty()
    }

    /// The NegotiateProtocolVersion message: the newest minor version sluice supports and the
    /// options it does not.
    pub fn negotiate_protocol_version(&self) -> Vec<u8> {
        let mut w = crate::wire::Writer::new();
        w.begin(b'v');
        w.i32(i32::from(SUPPORTED_MINOR) | (3 << 16));
        w.i32(self.protocol_options.len() as i32);
        for o in &self.protocol_options {
            w.cstr(o);
        }
        w.end();
        w.into_bytes()
    }
}

/// The first packet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Startup {
    /// StartupMessage.
    Start(StartupParams),
    /// SSLRequest: answer `S` and run TLS, or `N`.
    SslRequest,
    /// GSSENCRequest: answered `N` (not supported), after which the client may send an
    /// SSLRequest or a StartupMessage.
    GssEncRequest,
    /// CancelRequest for the session with this process id and secret key.
    Cancel {
        /// The process id the client was given.
        pid: u32,
        /// The secret key it was given.
        secret: u32,
    },
}

/// A StartupMessage for protocol 3.0 with `params` (name, value), as a client sends it.
pub fn startup_message(params: &[(&str, &str)]) -> Vec<u8> {
    // No type byte: the length, the version, then NUL-terminated pairs and an empty name.
    let mut out = vec![0; 4];
    out.extend_from_slice(&(3u32 << 16).to_be_bytes());
    for (k, v) in params {
        out.extend_from_slice(k.as_bytes());
        out.push(0);
        out.extend_from_slice(v.as_bytes());
        out.push(0);
    }
    out.push(0);
    let len = (out.len() as u32).to_be_bytes();
    out[..4].copy_from_slice(&len);
    out
}

/// Reads the first packet from the start of `buf`: `Ok(None)` while it is incomplete, else
/// the packet and the bytes it took.
pub fn read_startup(buf: &[u8]) -> Result<Option<(Startup, usize)>, WireError> {
    let Some(len) = buf.get(..4) else {
        return Ok(None);
    };
    let len = u32::from_be_bytes([len[0], len[1], len[2], len[3]]);
    // PostgreSQL's limit is on the packet after its length word.
    if !(8..=MAX_STARTUP as u32 + 4).contains(&len) {
        return Err(WireError::Length(len));
    }
    let len = len as usize;
    let Some(packet) = buf.get(4..len) else {
        return Ok(None);
    };
    let code = u32::from_be_bytes([packet[0], packet[1], packet[2], packet[3]]);
    let body = &packet[4..];
    let startup = match code {
        SSL_REQUEST if body.is_empty() => Startup::SslRequest,
        GSSENC_REQUEST if body.is_empty() => Startup::GssEncRequest,
        CANCEL_REQUEST if body.len() == 8 => Startup::Cancel {
            pid: u32::from_be_bytes([body[0], body[1], body[2], body[3]]),
            secret: u32::from_be_bytes([body[4], body[5], body[6], body[7]]),
        },
        SSL_REQUEST | GSSENC_REQUEST | CANCEL_REQUEST => {
            return Err(WireError::Layout("request of the wrong length"))
        }
        version => {
            let (major, minor) = ((version >> 16) as u16, version as u16);
            if major != 3 {
                return Err(WireError::Version { major, minor });
            }
            Startup::Start(parse_params(minor, body)?)
        }
    };
    Ok(Some((startup, len)))
}

/// NUL-terminated name/value pairs, ended by an empty name.
fn parse_params(minor: u16, body: &[u8]) -> Result<StartupParams, WireError> {
    let mut p = StartupParams {
        minor,
        params: String::with_capacity(body.len()),
        protocol_options: Vec::new(),
    };
    // Checked as a whole (nearly always UTF-8), else string by string, as the pairs are read
    // (the first fault found is the one reported).
    let text = std::str::from_utf8(body).ok();
    // Whether the last `user` given names one (read here: no pass of its own).
    let mut user = false;
    let mut at = 0;
    let mut cstr = || {
        let len = body[at..]
            .iter()
            .position(|&b| b == 0)
            .ok_or(WireError::Layout("string without its terminating NUL"))?;
        let range = at..at + len;
        at += len + 1;
        match text {
            Some(text) => text.get(range),
            None => std::str::from_utf8(&body[range]).ok(),
        }
        .ok_or(WireError::Layout("string not UTF-8"))
    };
    loop {
        let name = cstr()?;
        if name.is_empty() {
            break;
        }
        let value = cstr()?;
        if name.starts_with("_pq_.") {
            p.protocol_options.push(name.to_string());
        } else {
            if name == "user" {
                user = !value.is_empty();
            }
            for s in [name, value] {
                p.params.push_str(s);
                p.params.push('\0');
            }
        }
    }
    if at != body.len() {
        return Err(WireError::Layout("bytes after the parameter list"));
    }
    if !user {
        return Err(WireError::NoUser);
    }
    Ok(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn startup(version: u32, pairs: &[(&str, &str)]) -> Vec<u8> {
        let mut body = version.to_be_bytes().to_vec();
        for (n, v) in pairs {
            body.extend_from_slice(n.as_bytes());
            body.push(0);
            body.extend_from_slice(v.as_bytes());
            body.push(0);
        }
        body.push(0);
        let mut out = ((body.len() + 4) as u32).to_be_bytes().to_vec();
        out.extend(body);
        out
    }

    #[test]
    fn a_client_startup_message_reads_back() {
        let bytes = startup_message(&[("user", "app"), ("database", "db")]);
        assert_eq!(
            bytes,
            startup(3 << 16, &[("user", "app"), ("database", "db")])
        );
        let Ok(Some((Startup::Start(p), n))) = read_startup(&bytes) else {
            panic!("not a startup message");
        };
        assert_eq!(n, bytes.len());
        assert_eq!((p.get("user"), p.database()), (Some("app"), Some("db")));
    }

    #[test]
    fn a_parameter_given_twice_is_read_as_its_last_value() {
        let bytes = startup(
            3 << 16,
            &[
                ("options", "-c a=1"),
                ("user", "app"),
                ("database", ""),
                ("options", "-c b=2"),
            ],
        );
        let Ok(Some((Startup::Start(p), _))) = read_startup(&bytes) else {
            panic!("not a startup message");
        };
        assert_eq!(
            p.get_all(["options", "user", "replication"]),
            [Some("-c b=2"), Some("app"), None]
        );
        // An empty database is the user's.
        assert_eq!(p.database(), Some("app"));
    }

    #[test]
    fn a_startup_message_gives_its_parameters_in_order() {
        let bytes = startup(
            3 << 16,
            &[
                ("user", "app"),
                ("database", "shop"),
                ("application_name", "psql"),
            ],
        );
        let (s, used) = read_startup(&bytes).unwrap().unwrap();
        assert_eq!(used, bytes.len());
        let Startup::Start(p) = s else {
            panic!("{s:?}")
        };
        assert_eq!(p.get("user"), Some("app"));
        assert_eq!(p.database(), Some("shop"));
        assert_eq!(
            p.iter().collect::<Vec<_>>(),
            [
                ("user", "app"),
                ("database", "shop"),
                ("application_name", "psql")
            ]
        );
        assert!(!p.needs_negotiation());
    }

    #[test]
    fn empty_values_and_repeated_names_keep_their_places() {
        let pairs = [
            ("user", "app"),
            ("options", ""),
            ("application_name", "x"),
            ("application_name", ""),
        ];
        let bytes = startup(3 << 16, &pairs);
        let Some((Startup::Start(p), _)) = read_startup(&bytes).unwrap() else {
            panic!()
        };
        assert_eq!(p.iter().collect::<Vec<_>>(), pairs);
        assert_eq!(p.get("options"), Some(""));
        // The last of a repeated parameter counts, as in PostgreSQL.
        assert_eq!(p.get("application_name"), Some(""));
        assert_eq!(p.get("database"), None);
    }

    #[test]
    fn the_database_defaults_to_the_user_name() {
        let bytes = startup(3 << 16, &[("user", "app")]);
        let Some((Startup::Start(p), _)) = read_startup(&bytes).unwrap() else {
            panic!()
        };
        assert_eq!(p.database(), Some("app"));
    }

    #[test]
    fn newer_versions_and_protocol_options_are_negotiated_down() {
        // libpq 18 asks for 3.2; libpq 19's grease asks for an unknown minor and option.
        for minor in [2u32, 9999] {
            let bytes = startup(
                (3 << 16) | minor,
                &[("user", "app"), ("_pq_.test_grease", "1")],
            );
            let Some((Startup::Start(p), _)) = read_startup(&bytes).unwrap() else {
                panic!()
            };
            assert_eq!(p.minor as u32, minor);
            assert!(p.needs_negotiation());
            assert_eq!(p.protocol_options, ["_pq_.test_grease"]);
            assert!(p.get("_pq_.test_grease").is_none());
            let m = p.negotiate_protocol_version();
            let mut want = vec![b'v', 0, 0, 0, 0, 0, 3, 0, 0, 0, 0, 0, 1];
            want.extend_from_slice(b"_pq_.test_grease\0");
            let len = (want.len() - 1) as u32;
            want[1..5].copy_from_slice(&len.to_be_bytes());
            assert_eq!(m, want);
        }
    }

    #[test]
    fn requests_and_cancels_are_recognised() {
        let ssl = [0, 0, 0, 8, 4, 210, 22, 47];
        assert_eq!(read_startup(&ssl).unwrap(), Some((Startup::SslRequest, 8)));
        let gss = [0, 0, 0, 8, 4, 210, 22, 48];
        assert_eq!(
            read_startup(&gss).unwrap(),
            Some((Startup::GssEncRequest, 8))
        );
        let mut cancel = vec![0, 0, 0, 16, 4, 210, 22, 46];
        cancel.extend_from_slice(&7u32.to_be_bytes());
        cancel.extend_from_slice(&0xdead_beefu32.to_be_bytes());
        assert_eq!(
            read_startup(&cancel).unwrap(),
            Some((
                Startup::Cancel {
                    pid: 7,
                    secret: 0xdead_beef
                },
                16
            ))
        );
    }

    #[test]
    fn incomplete_packets_wait_and_malformed_ones_are_refused() {
        let bytes = startup(3 << 16, &[("user", "app")]);
        for cut in 0..bytes.len() {
            assert_eq!(read_startup(&bytes[..cut]).unwrap(), None, "cut at {cut}");
        }
        assert_eq!(read_startup(&[0, 0, 0, 4]), Err(WireError::Length(4)));
        assert_eq!(read_startup(&[0, 1, 0, 0]), Err(WireError::Length(65_536)));
        let v2 = startup(2 << 16, &[("user", "app")]);
        assert_eq!(
            read_startup(&v2),
            Err(WireError::Version { major: 2, minor: 0 })
        );
        for no_user in [
            &[("database", "x")][..],
            &[("user", "")],
            &[("user", "app"), ("user", "")],
        ] {
            assert_eq!(
                read_startup(&startup(3 << 16, no_user)),
                Err(WireError::NoUser),
                "{no_user:?}"
            );
        }
        let mut unterminated = startup(3 << 16, &[("user", "app")]);
        let n = unterminated.len();
        unterminated.truncate(n - 2); // drop the value's NUL and the list's end
        let len = unterminated.len() as u32;
        unterminated[..4].copy_from_slice(&len.to_be_bytes());
        assert!(matches!(
            read_startup(&unterminated),
            Err(WireError::Layout(_))
        ));
        // Not UTF-8: in a value, or in bytes after the list (reported as such).
        let mut latin1 = startup(
            3 << 16,
            &[("user", "app"), ("application_name", "caf\u{e9}")],
        );
        let at = latin1.len() - 4;
        latin1[at] = 0xe9;
        latin1.remove(at + 1);
        let len = latin1.len() as u32;
        latin1[..4].copy_from_slice(&len.to_be_bytes());
        assert_eq!(
            read_startup(&latin1),
            Err(WireError::Layout("string not UTF-8"))
        );
        let mut after = startup(3 << 16, &[("user", "app")]);
        after.push(0xff);
        let len = after.len() as u32;
        after[..4].copy_from_slice(&len.to_be_bytes());
        assert_eq!(
            read_startup(&after),
            Err(WireError::Layout("bytes after the parameter list"))
        );
        let short_cancel = [0, 0, 0, 12, 4, 210, 22, 46, 0, 0, 0, 1];
        assert!(matches!(
            read_startup(&short_cancel),
            Err(WireError::Layout(_))
        ));
    }
}
