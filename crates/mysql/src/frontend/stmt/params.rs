//! The few bytes of a COM_STMT_* payload the proxy reads and rewrites: the statement id, and
//! where COM_STMT_EXECUTE carries its parameter types. Parameter values are never decoded;
//! they pass to the server as the client sent them.
//!
//! COM_STMT_EXECUTE: `[0x17][stmt_id: 4][flags: 1][iterations: 4][NULL bitmap: (n + 7) / 8]
//! [new_params_bound: 1][types: 2n if bound][values]`.

use crate::wire::buf::Reader;

/// The statement id of a COM_STMT_* command (`None` if the payload is too short).
pub fn stmt_id(payload: &[u8]) -> Option<u32> {
    Reader::new(payload.get(1..)?).u32()
}

/// The command payload with the client's statement id replaced by the backend's. The payload
/// must carry a statement id ([`stmt_id`] returned `Some`).
pub fn with_backend_id(payload: &[u8], backend_id: u32) -> Vec<u8> {
    let mut out = payload.to_vec();
    out[1..5].copy_from_slice(&backend_id.to_le_bytes());
    out
}

/// Where a COM_STMT_EXECUTE for a statement with `params` parameters keeps its types.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExecuteTypes<'a> {
    /// Offset of the new-params-bound flag.
    pub flag_at: usize,
    /// The client sent the types with this execute (flag 1).
    pub bound_here: bool,
    /// The types it sent (2 bytes each), when the payload holds all of them.
    pub types: Option<&'a [u8]>,
}

impl<'a> ExecuteTypes<'a> {
    /// Reads the layout of `payload`; never fails (a short payload is the server's to reject).
    pub fn read(payload: &'a [u8], params: u16) -> ExecuteTypes<'a> {
        let params = params as usize;
        let flag_at = 10 + params.div_ceil(8);
        let bound_here = params > 0 && payload.get(flag_at) == Some(&1);
        let types = if bound_here {
            payload.get(flag_at + 1..flag_at + 1 + 2 * params)
        } else {
            None
        };
        ExecuteTypes {
            flag_at,
            bound_here,
            types,
        }
    }

    /// True if the payload reaches the flag, so types can be inserted after it.
    pub fn has_flag(&self, payload: &[u8]) -> bool {
        payload.len() > self.flag_at
    }
}

/// The execute to send to a backend statement `backend_id`: with `types` inserted (flag set
/// to 1) when given, for a connection that has not seen them. `types` is only honoured when
/// the payload reaches the flag.
pub fn execute_for_backend(
    payload: &[u8],
    layout: &ExecuteTypes<'_>,
    types: Option<&[u8]>,
    backend_id: u32,
) -> Vec<u8> {
    match types {
        Some(t) if layout.has_flag(payload) => {
            let at = layout.flag_at;
            let mut p = Vec::with_capacity(payload.len() + t.len());
            p.extend_from_slice(&payload[..at]);
            p.push(1);
            p.extend_from_slice(t);
            p.extend_from_slice(&payload[at + 1..]);
            with_backend_id(&p, backend_id)
        }
        _ => with_backend_id(payload, backend_id),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn types_are_found_and_inserted() {
        // Two parameters: bitmap of one byte, flag at 11, types at 12..16.
        let mut p = vec![0x17, 5, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 8, 0, 0xfd, 0];
        p.extend_from_slice(b"values");
        let layout = ExecuteTypes::read(&p, 2);
        assert_eq!(layout.flag_at, 11);
        assert!(layout.bound_here);
        assert_eq!(layout.types, Some(&[8, 0, 0xfd, 0][..]));

        let mut unbound = p[..11].to_vec();
        unbound.push(0);
        unbound.extend_from_slice(b"values");
        let layout = ExecuteTypes::read(&unbound, 2);
        assert!(!layout.bound_here);
        let out = execute_for_backend(&unbound, &layout, Some(&[8, 0, 0xfd, 0]), 9);
        assert_eq!(out[1..5], 9u32.to_le_bytes());
        assert_eq!(out[5..], p[5..]);
    }

    #[test]
    fn short_payloads_pass_unchanged() {
        let p = [0x17, 1, 0, 0, 0];
        let layout = ExecuteTypes::read(&p, 3);
        assert!(!layout.bound_here && !layout.has_flag(&p));
        assert_eq!(
            execute_for_backend(&p, &layout, Some(&[0; 6]), 2),
            [0x17, 2, 0, 0, 0]
        );
        assert_eq!(stmt_id(&p[..4]), None);
    }
}
