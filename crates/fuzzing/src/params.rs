//! Target `params`: the binary-protocol commands the proxy rewrites. Input: `[parameter count:
//! u16 LE][COM_STMT_EXECUTE or COM_STMT_SEND_LONG_DATA payload...]`.
//!
//! The proxy never decodes parameter values; it reads the statement id, finds the
//! new-params-bound flag and the types, and writes the payload again with the backend's
//! statement id and, for a connection that has not seen them, the types. Checked: the layout
//! matches the protocol, the rewrite changes exactly those bytes, and the rewritten payload
//! reads back with the inserted types.

use sluice_mysql::frontend::stmt::params::{
    execute_for_backend, stmt_id, with_backend_id, ExecuteTypes,
};

const BACKEND_ID: u32 = 0xdead_beef;

/// The harness body.
pub fn run(data: &[u8]) {
    let [lo, hi, payload @ ..] = data else {
        return;
    };
    let params = u16::from_le_bytes([*lo, *hi]);
    let Some(_) = stmt_id(payload) else {
        // Too short for a statement id: the session answers "malformed packet".
        assert!(payload.len() < 5);
        return;
    };
    // COM_STMT_SEND_LONG_DATA and the other COM_STMT_* commands: only the id changes.
    let renamed = with_backend_id(payload, BACKEND_ID);
    assert_eq!(stmt_id(&renamed), Some(BACKEND_ID));
    assert!(
        renamed.len() == payload.len() && renamed[5..] == payload[5..] && renamed[0] == payload[0]
    );

    let layout = ExecuteTypes::read(payload, params);
    let n = usize::from(params);
    assert_eq!(layout.flag_at, 10 + n.div_ceil(8));
    assert_eq!(
        layout.bound_here,
        n > 0 && payload.get(layout.flag_at) == Some(&1)
    );
    if let Some(t) = layout.types {
        assert!(layout.bound_here);
        assert!(t.len() == 2 * n && t == &payload[layout.flag_at + 1..layout.flag_at + 1 + 2 * n]);
    }
    let plain = execute_for_backend(payload, &layout, None, BACKEND_ID);
    assert_eq!(plain, renamed);

    let stored: Vec<u8> = (0..2 * n).map(|i| i as u8).collect();
    let out = execute_for_backend(payload, &layout, Some(&stored), BACKEND_ID);
    assert_eq!(stmt_id(&out), Some(BACKEND_ID));
    if !layout.has_flag(payload) {
        assert_eq!(out, renamed, "a short execute passes unchanged");
        return;
    }
    let at = layout.flag_at;
    assert_eq!(out.len(), payload.len() + stored.len());
    assert!(out[0] == payload[0] && out[5..at] == payload[5..at]);
    assert!(out[at] == 1 && out[at + 1..at + 1 + 2 * n] == stored[..]);
    assert!(out[at + 1 + 2 * n..] == payload[at + 1..]);
    let again = ExecuteTypes::read(&out, params);
    assert_eq!(again.flag_at, at);
    if n > 0 {
        assert_eq!(again.types, Some(&stored[..]), "inserted types read back");
    }
}
