//! Telling a server's greeting from something else (an HTTP server, a TLS-only port, a
//! proxy's banner, line noise) from its first bytes, before waiting for a packet whose length
//! field is really text. Without this, garbage announcing a 5 MB "packet" is waited for until
//! the connect timeout and reported as a server that does not answer.

/// Largest greeting accepted (real ones are about 100 bytes).
const GREETING_MAX: usize = 64 * 1024;

/// Bytes of a greeting's head needed to judge it: the packet header and the first payload
/// byte.
pub(crate) const HEAD: usize = 5;

/// Why `head` (the first [`HEAD`] bytes a server sent) cannot start a greeting, if it cannot.
pub(crate) fn greeting_problem(head: &[u8]) -> Option<String> {
    let &[a, b, c, seq, first, ..] = head else {
        return Some(format!("only {} bytes", head.len()));
    };
    let len = u32::from_le_bytes([a, b, c, 0]) as usize;
    let why = if first != 10 && first != 0xff {
        format!("protocol version {first}")
    } else if seq != 0 {
        format!("sequence id {seq}")
    } else if len > GREETING_MAX {
        format!("a length of {len} bytes")
    } else {
        return None;
    };
    Some(format!(
        "expected a MySQL handshake packet (protocol version 10), got {why}; it starts with {}",
        preview(head)
    ))
}

/// Up to 16 bytes as text a person can read: printable ASCII as is, the rest as `\xNN`.
pub(crate) fn preview(bytes: &[u8]) -> String {
    let mut s = String::from("\"");
    for &b in bytes.iter().take(16) {
        if b.is_ascii_graphic() || b == b' ' {
            s.push(b as char);
        } else {
            s.push_str(&format!("\\x{b:02x}"));
        }
    }
    s.push('"');
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn greetings_pass_and_garbage_is_named() {
        assert_eq!(greeting_problem(&[90, 0, 0, 0, 10, b'1']), None);
        assert_eq!(greeting_problem(&[30, 0, 0, 0, 0xff]), None); // too many connections
        let http = greeting_problem(b"HTTP/1.1 400 Bad Request\r\n").unwrap();
        assert!(http.contains("protocol version 47"), "{http}");
        assert!(http.contains("\"HTTP/1.1 400 Bad"), "{http}");
        let seq = greeting_problem(&[90, 0, 0, 7, 10]).unwrap();
        assert!(seq.contains("sequence id 7"), "{seq}");
        let long = greeting_problem(&[0, 0, 2, 0, 10]).unwrap();
        assert!(long.contains("length of 131072"), "{long}");
        assert_eq!(preview(&[0x16, 3, 1, b'a']), "\"\\x16\\x03\\x01a\"");
    }
}
