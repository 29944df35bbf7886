//! A minimal blocking HTTP/1.1 client for the admin API (one request per connection).
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::SocketAddr;

/// Sends `METHOD path` (with a bearer token if given); returns (status code, body).
pub fn request(addr: SocketAddr, method: &str, path: &str, token: Option<&str>) -> (u16, String) {
    let mut s = std::net::TcpStream::connect(addr).expect("admin listener");
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: sluice\r\n{auth}Content-Length: 0\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut r = String::new();
    s.read_to_string(&mut r).unwrap();
    let (head, body) = r.split_once("\r\n\r\n").expect("an HTTP response");
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no status in {head:?}"));
    (status, body.to_string())
}

/// `GET path`, asserting 200; the body parsed as JSON.
pub fn get_json(addr: SocketAddr, path: &str) -> serde_json::Value {
    let (status, body) = request(addr, "GET", path, None);
    assert_eq!(status, 200, "GET {path}: {body}");
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("GET {path}: {e}: {body}"))
}
