//! Turns recorded connections into seed inputs for each target, in the input formats the
//! harnesses in `sluice_fuzzing` read.

use super::relay::Recorded;
use std::collections::{BTreeMap, HashMap};

const CLIENT_PROTOCOL_41: u32 = 1 << 9;
const CLIENT_SESSION_TRACK: u32 = 1 << 23;
const CLIENT_DEPRECATE_EOF: u32 = 1 << 24;

/// Largest seed kept: a seed is a starting point, not a load test.
const MAX_SEED: usize = 16 * 1024;
/// Seeds kept per target and per shape (see [`Seeds::add`]).
const PER_SHAPE: usize = 2;

/// One physical packet: sequence id and payload.
struct Pkt<'a> {
    seq: u8,
    bytes: &'a [u8],
}

impl Pkt<'_> {
    fn payload(&self) -> &[u8] {
        &self.bytes[4..]
    }
}

/// Splits a recorded direction into physical packets (a cut-off tail is dropped).
fn packets(mut s: &[u8]) -> Vec<Pkt<'_>> {
    let mut out = Vec::new();
    while s.len() >= 4 {
        let len = usize::from(s[0]) | usize::from(s[1]) << 8 | usize::from(s[2]) << 16;
        if s.len() < 4 + len {
            break;
        }
        out.push(Pkt {
            seq: s[3],
            bytes: &s[..4 + len],
        });
        s = &s[4 + len..];
    }
    out
}

/// Seeds per target, grouped by shape so a long benchmark does not drown the rest.
#[derive(Default)]
pub struct Seeds {
    by_target: BTreeMap<&'static str, HashMap<String, Vec<Vec<u8>>>>,
}

impl Seeds {
    /// Adds `data` for `target` unless `shape` already has enough examples.
    fn add(&mut self, target: &'static str, shape: String, mut data: Vec<u8>) {
        data.truncate(MAX_SEED);
        let shapes = self.by_target.entry(target).or_default();
        let list = shapes.entry(shape).or_default();
        if list.len() < PER_SHAPE && !list.contains(&data) {
            list.push(data);
        }
    }

    /// The seeds of every target, in a stable order.
    pub fn files(&self) -> Vec<(&'static str, Vec<u8>)> {
        let mut out = Vec::new();
        for (target, shapes) in &self.by_target {
            let mut all: Vec<&Vec<u8>> = shapes.values().flatten().collect();
            all.sort();
            out.extend(all.into_iter().map(|d| (*target, d.clone())));
        }
        out
    }

    /// Adds the seeds found in one connection.
    pub fn connection(&mut self, rec: &Recorded) {
        let client = packets(&rec.client);
        let server = packets(&rec.server);
        let (Some(greeting), Some(response)) = (server.first(), client.first()) else {
            return;
        };
        self.add("handshake", "greeting".into(), greeting.payload().to_vec());
        let ccaps = response
            .payload()
            .get(..4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .unwrap_or(0);
        if ccaps & CLIENT_PROTOCOL_41 == 0 || response.payload().len() == 32 {
            return; // pre-4.1 or TLS: nothing more to read in clear
        }
        self.add(
            "handshake",
            format!("response-{ccaps:x}"),
            response.payload().to_vec(),
        );
        // The server's answers during authentication end with its first OK or ERR.
        let auth_end = server
            .iter()
            .skip(1)
            .position(|p| matches!(p.payload().first(), Some(0x00 | 0xff)))
            .map_or(server.len(), |i| i + 2);
        for p in &server[1..auth_end.min(server.len())] {
            if p.payload().first() == Some(&0xfe) {
                self.add("handshake", "auth-switch".into(), p.payload().to_vec());
            }
        }
        let flags = |base: u8| {
            let mut f = base;
            if ccaps & CLIENT_DEPRECATE_EOF != 0 {
                f |= 8;
            }
            if ccaps & CLIENT_SESSION_TRACK != 0 {
                f |= 16;
            }
            f
        };
        // Whole streams, for the packet codec: the start of each direction.
        self.add("packet", "client".into(), packet_seed(&rec.client));
        self.add("packet", "server".into(), packet_seed(&rec.server));

        let commands: Vec<&Pkt<'_>> = client.iter().filter(|p| p.seq == 0).collect();
        let responses = responses(&server[auth_end.min(server.len())..]);
        let mut responses = responses.into_iter();
        let mut params_of: HashMap<u32, u16> = HashMap::new();
        let mut pending_prepare = false;
        for cmd in commands {
            let payload = cmd.payload();
            let Some(&com) = payload.first() else {
                continue;
            };
            match com {
                0x03 | 0x16 => {
                    let shape = sluice_sqlscan::digest::digest(&payload[1..], false).id;
                    let mut seed = vec![0u8];
                    seed.extend_from_slice(&payload[1..]);
                    self.add("sqlscan", format!("{shape:x}"), seed);
                }
                0x17 | 0x18 => {
                    let id = payload
                        .get(1..5)
                        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]));
                    let params = id.and_then(|i| params_of.get(&i).copied()).unwrap_or(0);
                    let mut seed = params.to_le_bytes().to_vec();
                    seed.extend_from_slice(payload);
                    let shape = format!("{com}-{params}-{}", payload.len() / 64);
                    self.add("params", shape, seed);
                }
                0x11 => self.add("handshake", "change-user".into(), payload.to_vec()),
                _ => {}
            }
            // Commands without a response.
            if matches!(com, 0x01 | 0x18 | 0x19) {
                continue;
            }
            let Some(resp) = responses.next() else {
                break;
            };
            let expect = match com {
                0x03 => 0,
                0x17 => 1,
                0x1c => 2,
                0x04 => 3,
                0x09 => 5,
                0x16 => 6,
                _ => 4,
            };
            if com == 0x16 {
                pending_prepare = true;
            }
            if pending_prepare && resp.first().map(|p| p.payload().first()) == Some(Some(&0x00)) {
                let p = resp[0].payload();
                if p.len() >= 9 {
                    let id = u32::from_le_bytes([p[1], p[2], p[3], p[4]]);
                    params_of.insert(id, u16::from_le_bytes([p[7], p[8]]));
                }
            }
            pending_prepare = false;
            let bytes: Vec<u8> = resp.iter().flat_map(|p| p.bytes.iter().copied()).collect();
            let first = resp.first().and_then(|p| p.payload().first().copied());
            let shape = format!("{expect}-{first:?}-{}", resp.len().min(20));
            // The response alone through the packet codec too, with the 1 GiB and 4 KiB limits.
            for limit in [7u8, 3] {
                let mut s = vec![limit, 5, 0];
                s.extend_from_slice(&bytes);
                self.add("packet", format!("{shape}-{limit}"), s);
            }
            for (f, seed) in [(flags(expect), 0u8), (flags(expect) | 32, 7)] {
                let mut s = vec![f, seed];
                s.extend_from_slice(&bytes);
                self.add("scanner", format!("{shape}-{f}"), s);
            }
        }
    }
}

/// The server's packets after authentication, grouped into responses: a response starts at
/// sequence id 1 (its command had 0), unless the ids merely wrapped around.
fn responses<'a>(server: &'a [Pkt<'a>]) -> Vec<&'a [Pkt<'a>]> {
    let mut out = Vec::new();
    let mut start = 0;
    for i in 1..server.len() {
        if server[i].seq == 1 && server[i - 1].seq != 0 {
            out.push(&server[start..i]);
            start = i;
        }
    }
    if start < server.len() {
        out.push(&server[start..]);
    }
    out
}

/// `[limit: 1 GiB][whole][no big fragments]` and the first packets of a stream.
fn packet_seed(stream: &[u8]) -> Vec<u8> {
    let mut s = vec![7u8, 0, 0];
    s.extend_from_slice(&stream[..stream.len().min(4096)]);
    s
}
