//! NotificationResponse through sluice: who sent it, as the client knows itself.

use super::pg::raw::{Msg, Raw};
use super::pg::start;

/// The sender's process id in NotificationResponses among `msgs`.
fn senders(msgs: &[Msg]) -> Vec<u32> {
    msgs.iter()
        .filter(|m| m.tag == b'A')
        .map(|m| u32::from_be_bytes(m.body[..4].try_into().unwrap()))
        .collect()
}

/// A session's own `NOTIFY` names it by the process id of its BackendKeyData (sluice's session
/// id), as directly (where that is its server process): clients that skip their own
/// notifications that way (libpq's `be_pid == PQbackendPID()`) skip it. Another client's
/// does not name it, delivered with a statement's answer or while the listener is idle.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sessions_own_notification_names_it_by_its_backend_key() {
    let env = start(0, "").await;
    let mut a = Raw::connect(env.port, "app", "app", "postgres").await;
    let mut b = Raw::connect(env.port, "app", "app", "postgres").await;
    a.try_simple("LISTEN nt_chan").await.unwrap();
    let own = a.simple_all("NOTIFY nt_chan, 'self'").await;
    assert_eq!(senders(&own), [a.key.0], "{own:?}");
    b.try_simple("NOTIFY nt_chan, 'other'").await.unwrap();
    // Delivered while the listener is idle, or with its next answer, or after it.
    let mut later = a.simple_all("SELECT 1").await;
    while senders(&later).is_empty() {
        later.push(a.next().await);
    }
    let from_b = senders(&later);
    assert_eq!(from_b.len(), 1, "{later:?}");
    assert_ne!(from_b[0], a.key.0);
    assert_ne!(
        from_b[0], b.key.0,
        "b's NOTIFY ran on a server process, not b's key"
    );
}
