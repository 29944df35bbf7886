//! Ports for test servers, clear of the ports the kernel gives outgoing connections.

/// A free TCP port on 127.0.0.1 for a server to listen on: bound and released, taken from
/// below the kernel's ephemeral range.
///
/// A port the kernel picks for `bind(0)` comes from the ephemeral range, the one it also
/// picks the source ports of outgoing connections from: between its release here and the
/// server's own bind, any client connection of any test may take it as its source port, and
/// the server fails with "Address already in use" (seen in CI: a MariaDB replica). Ports
/// below the range are never handed out that way. Within the process no port is handed out
/// twice, and each process starts at its own place in the window, so that test binaries
/// running side by side rarely try the same ports.
pub fn free_port() -> crate::Result<u16> {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    if let Some((low, span)) = port_window(ephemeral_range()) {
        let start = std::process::id().wrapping_mul(2_654_435_761) % span;
        for _ in 0..span {
            let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let port = low + (start.wrapping_add(n) % span);
            let Ok(port) = u16::try_from(port) else {
                continue;
            };
            if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
                return Ok(port);
            }
        }
    }
    // No room below (or above) the ephemeral range: the kernel's choice.
    let l = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(l.local_addr()?.port())
}

/// The kernel's ephemeral port range (Linux's default when it cannot be read).
fn ephemeral_range() -> (u32, u32) {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| {
            let mut it = s.split_whitespace().map(|v| v.parse::<u32>().ok());
            Some((it.next()??, it.next()??))
        })
        .unwrap_or((32_768, 60_999))
}

/// Where [`free_port`] looks, as (first port, count): from 10,000 up to the ephemeral range
/// (clear of the well-known and registered ports most services use), or else above it.
fn port_window((low, high): (u32, u32)) -> Option<(u32, u32)> {
    const FLOOR: u32 = 10_000;
    const MIN_SPAN: u32 = 2_000;
    if low >= FLOOR + MIN_SPAN {
        Some((FLOOR, low - FLOOR))
    } else if high + MIN_SPAN <= 65_535 {
        Some((high + 1, 65_535 - high))
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_come_from_outside_the_ephemeral_range_and_never_twice() {
        assert_eq!(port_window((32_768, 60_999)), Some((10_000, 22_768)));
        assert_eq!(port_window((1_024, 40_000)), Some((40_001, 25_535)));
        assert_eq!(port_window((1_024, 65_000)), None);
        let (low, high) = ephemeral_range();
        let ports: Vec<u16> = (0..200).map(|_| free_port().unwrap()).collect();
        if port_window((low, high)).is_some() {
            for p in &ports {
                let p = u32::from(*p);
                assert!(!(low..=high).contains(&p), "port {p} in {low}-{high}");
            }
        }
        let mut unique = ports.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), ports.len(), "a port handed out twice");
    }
}
