//! Who the client is: the one place that turns a request into a client address.
//!
//! Everything counted per client — the request rate, the login-code quota, the code caps per
//! phone and address, anonymous shop visitors — reads [`ClientIp`], which the request pipeline
//! puts into each request. Without a proxy the client is the TCP peer. Behind reverse proxies
//! (the original was served by nginx) every peer is a proxy, and each proxy appends the address
//! it saw to `X-Forwarded-For`: the client is the rightmost entry that is not one of
//! `HMDP_TRUSTED_PROXIES`. Entries further left were written by the client and prove nothing, and
//! the header of a peer that is not a trusted proxy is ignored altogether: nobody picks their own
//! address. Each entry is read from the raw bytes on its own and skipped when it is not an
//! address, so garbage the client writes on the left (a byte that is not ASCII, say) cannot
//! spoil the entry its proxy appended and make the client pass for the proxy.
//!
//! Limits key a client by [`ClientIp::key`]: an IPv4 address, or the /64 network of an IPv6 one.
//! A subscriber gets a whole /64 (2^64 addresses), so per-address limits on full IPv6 addresses
//! would stop nobody.

use std::net::{IpAddr, Ipv6Addr, SocketAddr};

use axum::{
    extract::FromRequestParts,
    http::{HeaderMap, request::Parts},
};

use crate::config::TrustedProxies;

/// The client's address, as resolved by the request pipeline (`super::pipeline`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ClientIp(IpAddr);

impl ClientIp {
    /// The client of a request that came from `peer` with `headers` (see the module docs).
    pub(crate) fn resolve(peer: IpAddr, headers: &HeaderMap, trusted: &TrustedProxies) -> Self {
        let mut client = peer.to_canonical();
        if !trusted.contains(client) {
            return Self(client);
        }
        // Right to left: each entry was appended by the hop to its right, which is trusted.
        // Several header lines are one list, in order; each entry is read from the raw bytes
        // on its own, so a byte the client wrote elsewhere in the header spoils nothing else.
        let entries = headers
            .get_all("x-forwarded-for")
            .iter()
            .rev()
            .flat_map(|value| value.as_bytes().rsplit(|&b| b == b','));
        for ip in entries.filter_map(parse_entry) {
            client = ip.to_canonical();
            if !trusted.contains(client) {
                return Self(client);
            }
        }
        // Every hop was trusted (a request from inside), or no entry was an address: the
        // leftmost address that can be believed.
        Self(client)
    }

    /// The address itself.
    #[cfg(test)]
    pub(crate) fn addr(self) -> IpAddr {
        self.0
    }

    /// What limits count by: the address, or its /64 for IPv6.
    pub(crate) fn key(self) -> IpAddr {
        limit_key(self.0)
    }
}

/// An IPv4 address as it is, an IPv6 one as its /64 network (IPv4-mapped IPv6 as IPv4).
pub(crate) fn limit_key(ip: IpAddr) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V6(v6) => IpAddr::V6(Ipv6Addr::from(u128::from(v6) & (u128::MAX << 64))),
        v4 => v4,
    }
}

/// One `X-Forwarded-For` entry: an address, possibly with a port (`1.2.3.4:5678`,
/// `[2001:db8::1]:443`) or in brackets, as some proxies write it. Anything else (`unknown`,
/// bytes that are not ASCII) is no address.
fn parse_entry(entry: &[u8]) -> Option<IpAddr> {
    let entry = std::str::from_utf8(entry.trim_ascii()).ok()?;
    entry
        .parse::<IpAddr>()
        .ok()
        .or_else(|| entry.parse::<SocketAddr>().ok().map(|s| s.ip()))
        .or_else(|| {
            entry
                .strip_prefix('[')?
                .strip_suffix(']')?
                .parse::<Ipv6Addr>()
                .ok()
                .map(IpAddr::V6)
        })
}

/// For handlers: the resolved client, or the unspecified address for a request that came
/// without a peer address (only in-process tests of the router do).
impl<S: Send + Sync> FromRequestParts<S> for ClientIp {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        Ok(parts
            .extensions
            .get::<ClientIp>()
            .copied()
            .unwrap_or(ClientIp(IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolve(peer: &str, xff: &[&str], trusted: &str) -> String {
        let mut headers = HeaderMap::new();
        for value in xff {
            headers.append("x-forwarded-for", value.parse().unwrap());
        }
        ClientIp::resolve(peer.parse().unwrap(), &headers, &trusted.parse().unwrap())
            .addr()
            .to_string()
    }

    #[test]
    fn an_untrusted_peer_is_the_client_whatever_it_says() {
        assert_eq!(resolve("192.0.2.1", &["198.51.100.7"], ""), "192.0.2.1");
        assert_eq!(
            resolve("192.0.2.1", &["198.51.100.7"], "10.0.0.0/8"),
            "192.0.2.1"
        );
        assert_eq!(resolve("::ffff:192.0.2.1", &[], ""), "192.0.2.1");
    }

    #[test]
    fn behind_trusted_proxies_the_client_is_the_rightmost_untrusted_entry() {
        let trusted = "127.0.0.1/32, 10.0.0.0/8";
        // nginx in front: `$proxy_add_x_forwarded_for` appends what it saw.
        assert_eq!(
            resolve("127.0.0.1", &["203.0.113.9"], trusted),
            "203.0.113.9"
        );
        // Whatever the client wrote on the left is not believed.
        assert_eq!(
            resolve("127.0.0.1", &["1.1.1.1, 203.0.113.9"], trusted),
            "203.0.113.9"
        );
        // Two proxies: the inner one's entry is skipped; the header may come in several lines.
        assert_eq!(
            resolve("127.0.0.1", &["1.1.1.1", "203.0.113.9, 10.0.0.5"], trusted),
            "203.0.113.9"
        );
        // Ports and brackets, as some proxies write them.
        assert_eq!(
            resolve("127.0.0.1", &["203.0.113.9:4711"], trusted),
            "203.0.113.9"
        );
        assert_eq!(
            resolve("127.0.0.1", &["[2001:db8::7]:443"], trusted),
            "2001:db8::7"
        );
        assert_eq!(
            resolve("127.0.0.1", &["[2001:db8::7]"], trusted),
            "2001:db8::7"
        );
        // No header, or only trusted hops: the leftmost trusted address.
        assert_eq!(resolve("127.0.0.1", &[], trusted), "127.0.0.1");
        assert_eq!(resolve("127.0.0.1", &["10.0.0.5"], trusted), "10.0.0.5");
        // An entry that is no address is skipped; with no address at all, the peer is the client.
        assert_eq!(
            resolve("127.0.0.1", &["203.0.113.9, unknown, 10.0.0.5"], trusted),
            "203.0.113.9"
        );
        assert_eq!(resolve("127.0.0.1", &["nonsense"], trusted), "127.0.0.1");
    }

    fn resolve_bytes(xff: &[&[u8]], trusted: &str) -> String {
        let mut headers = HeaderMap::new();
        for value in xff {
            headers.append(
                "x-forwarded-for",
                axum::http::HeaderValue::from_bytes(value).unwrap(),
            );
        }
        let peer = "127.0.0.1".parse().unwrap();
        ClientIp::resolve(peer, &headers, &trusted.parse().unwrap())
            .addr()
            .to_string()
    }

    #[test]
    fn bytes_the_client_wrote_never_make_it_its_proxy() {
        let trusted = "127.0.0.1/32, 10.0.0.0/8";
        // nginx appended the client's address to a value the client sent with a byte >= 0x80.
        assert_eq!(
            resolve_bytes(&[b"\xff\xfe, 203.0.113.9"], trusted),
            "203.0.113.9"
        );
        assert_eq!(
            resolve_bytes(&[b"1.1.1.1 \x80, 203.0.113.9, 10.0.0.5"], trusted),
            "203.0.113.9"
        );
        // Several header lines are one list, joined in order; a bad line spoils only itself.
        assert_eq!(
            resolve_bytes(&[b"\xe4\xb8\xad", b"203.0.113.9"], trusted),
            "203.0.113.9"
        );
        assert_eq!(
            resolve_bytes(
                &[b"198.51.100.1", b"203.0.113.9, \xff", b"10.0.0.5"],
                trusted
            ),
            "203.0.113.9"
        );
        // A non-ASCII byte inside an entry makes that entry no address, never a neighbour.
        assert_eq!(
            resolve_bytes(&[b"198.51.100.1, 203.0.113.9\xff"], trusted),
            "198.51.100.1"
        );
        // Only garbage: the peer.
        assert_eq!(resolve_bytes(&[b"\xff"], trusted), "127.0.0.1");
    }

    #[test]
    fn ipv6_clients_are_keyed_by_their_64() {
        let key = |ip: &str| limit_key(ip.parse().unwrap()).to_string();
        assert_eq!(key("2001:db8:1:2:aaaa:bbbb:cccc:dddd"), "2001:db8:1:2::");
        assert_eq!(
            key("2001:db8:1:2::1"),
            key("2001:db8:1:2:ffff:ffff:ffff:ffff")
        );
        assert_ne!(key("2001:db8:1:2::1"), key("2001:db8:1:3::1"));
        // IPv4 stays whole, also when it arrives IPv4-mapped on an IPv6 socket.
        assert_eq!(key("192.0.2.1"), "192.0.2.1");
        assert_ne!(key("192.0.2.1"), key("192.0.2.2"));
        assert_eq!(key("::ffff:192.0.2.1"), "192.0.2.1");
        let client = ClientIp("2001:db8:1:2::1".parse().unwrap());
        assert_eq!(client.key().to_string(), "2001:db8:1:2::");
        assert_eq!(client.addr().to_string(), "2001:db8:1:2::1");
    }
}
