//! The SSRF guard's notion of a private address.

use std::net::IpAddr;

/// Whether `ip` is private, loopback, link-local, unspecified, broadcast or
/// carrier-grade NAT (IPv4-mapped IPv6 addresses included): not fetched
/// unless `allowPrivate` is set.
pub fn is_private(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v) => {
            v.is_private()
                || v.is_loopback()
                || v.is_link_local()
                || v.is_unspecified()
                || v.is_broadcast()
                || v.octets()[0] == 100 && (64..128).contains(&v.octets()[1])
        }
        IpAddr::V6(v) => {
            v.is_loopback()
                || v.is_unspecified()
                || (v.segments()[0] & 0xfe00) == 0xfc00
                || (v.segments()[0] & 0xffc0) == 0xfe80
                || v.to_ipv4_mapped()
                    .is_some_and(|m| is_private(IpAddr::V4(m)))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn private_spellings() {
        for a in [
            "127.0.0.1",
            "10.1.2.3",
            "100.64.0.1",
            "::1",
            "fe80::1",
            "::ffff:192.168.0.1",
        ] {
            assert!(
                is_private(a.parse().unwrap_or_else(|e| panic!("{a}: {e}"))),
                "{a}"
            );
        }
        assert!(!is_private(
            "93.184.216.34".parse().unwrap_or_else(|e| panic!("{e}"))
        ));
    }
}
