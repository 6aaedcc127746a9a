//! The destination guard: where a client may make trove connect.
//!
//! A forward proxy connects wherever its clients name, so without a guard every client the
//! ACL admits reaches what *trove's host* reaches: services bound to loopback, the cloud
//! metadata service at 169.254.169.254, trove's own admin port (server-side request
//! forgery). The guard keeps a client to the reach it had without the proxy:
//!
//! - A **local** client (its address is in `[access] local_clients`, loopback by default:
//!   a process on this host) may reach what this host reaches, except trove's own
//!   listeners (a loop, or a way around `[admin] allow`), multicast and broadcast.
//! - A **remote** client may not reach loopback, unspecified (`0.0.0.0` and `::` connect to
//!   this host) or link-local destinations, nor private ones with
//!   `[access] deny_private_destinations`, unless `[access] allow_destinations` lists them.
//!
//! Addresses are judged by what they are, never by how they are spelled: a host is turned
//! into candidate addresses once ([`DestinationPolicy::resolve`]: IP literals in every
//! spelling `inet_aton` accepts, such as `127.1`, `2130706433`, `0x7f.1` or
//! `017700000001`, without asking DNS; other names through trove's caching resolver,
//! `crate::resolver`), every candidate is normalised ([`canonical`]: IPv4-mapped,
//! IPv4-compatible and NAT64 IPv6 addresses are judged as the IPv4 address they carry) and
//! checked, and the caller connects to exactly those checked addresses ([`connect`]) — so a
//! name can't resolve to a public address for the check and to a private one for the
//! connect (DNS rebinding). The resolver's cache changes nothing to that: it hands out one
//! immutable list per answer ([`Addrs`] shares it), which is checked for the client each
//! time it is used and is the very list connected to; a name's next answer, once the cached
//! one expires, is checked anew. If any candidate is refused the whole name is: a name that
//! mixes a public address with a loopback one is a rebinding attempt more often than a
//! mistake.
//!
//! Upstreams named in the operator's `[[origin]]` routes are configuration, not client
//! input, and are never checked (see `upstream::Chooser`); they are resolved through the
//! same cache ([`candidates`]).
//!
//! Only the standard library is used for the checks: they are a few comparisons on
//! `std::net` types, which need no crate.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

use ipnet::IpNet;
use tokio::net::TcpStream;

use crate::acl::{Acl, Exception};
use crate::resolver::Resolver;

/// Whether a client counts as local to trove's host (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ClientClass {
    /// In `[access] local_clients`: may reach what this host reaches.
    Local,
    /// Everyone else: kept from this host's private reach.
    Remote,
}

impl ClientClass {
    pub fn as_str(self) -> &'static str {
        match self {
            ClientClass::Local => "local",
            ClientClass::Remote => "remote",
        }
    }
}

/// Whom a request's connections are made for, as the guard needs to know it: the client's
/// class, and the addresses a client-chosen name was already resolved to and checked
/// against for that class (connections then go to exactly those; `None`: resolve and check
/// when connecting).
#[derive(Debug, Clone)]
pub struct Reach {
    pub class: ClientClass,
    pub checked: Option<Addrs>,
}

/// The addresses a host stands for at one port, in the order to try them: an IP literal, or
/// a name's answer as the resolver's cache holds it (shared, never copied).
#[derive(Debug, Clone)]
pub struct Addrs {
    ips: Arc<[IpAddr]>,
    port: u16,
}

impl Addrs {
    pub fn new(ips: Arc<[IpAddr]>, port: u16) -> Addrs {
        Addrs { ips, port }
    }

    /// The socket addresses, in order.
    pub fn iter(&self) -> impl Iterator<Item = SocketAddr> + '_ {
        self.ips.iter().map(|ip| SocketAddr::new(*ip, self.port))
    }
}

/// Why a destination was refused; the `reason` label of
/// `trove_destinations_refused_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Refusal {
    /// One of trove's own listeners (proxy or admin), by any address that reaches it.
    OwnListener,
    /// 224.0.0.0/4, ff00::/8.
    Multicast,
    /// 255.255.255.255.
    Broadcast,
    /// 127.0.0.0/8, ::1.
    Loopback,
    /// 0.0.0.0/8, :: (connecting to them reaches this host).
    Unspecified,
    /// 169.254.0.0/16 (cloud metadata services live here), fe80::/10.
    LinkLocal,
    /// 10/8, 172.16/12, 192.168/16, 100.64/10, fc00::/7, fec0::/10, with
    /// `deny_private_destinations`.
    Private,
}

impl Refusal {
    pub const ALL: [Refusal; 7] = [
        Refusal::OwnListener,
        Refusal::Multicast,
        Refusal::Broadcast,
        Refusal::Loopback,
        Refusal::Unspecified,
        Refusal::LinkLocal,
        Refusal::Private,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Refusal::OwnListener => "own-listener",
            Refusal::Multicast => "multicast",
            Refusal::Broadcast => "broadcast",
            Refusal::Loopback => "loopback",
            Refusal::Unspecified => "unspecified",
            Refusal::LinkLocal => "link-local",
            Refusal::Private => "private",
        }
    }

    /// Position in [`Refusal::ALL`], for counters.
    pub fn index(self) -> usize {
        self as usize
    }

    /// The sentence a refused client reads.
    pub fn explain(self) -> &'static str {
        match self {
            Refusal::OwnListener => "the destination is one of this proxy's own listeners",
            Refusal::Multicast => "the destination is a multicast address",
            Refusal::Broadcast => "the destination is a broadcast address",
            Refusal::Loopback => {
                "the destination is a loopback address, which only local clients may reach \
                 ([access] local_clients, allow_destinations)"
            }
            Refusal::Unspecified => {
                "the destination is an unspecified address (it reaches the proxy's own host), \
                 which only local clients may reach ([access] local_clients, allow_destinations)"
            }
            Refusal::LinkLocal => {
                "the destination is a link-local address, which only local clients may reach \
                 ([access] local_clients, allow_destinations)"
            }
            Refusal::Private => {
                "the destination is a private address ([access] deny_private_destinations, \
                 allow_destinations)"
            }
        }
    }
}

/// Why a host could not be turned into addresses a client may reach.
#[derive(Debug)]
pub enum Blocked {
    /// A candidate address is refused by the policy.
    Refused(Refusal),
    /// The name did not resolve; not a refusal, and answered as a failure to reach the
    /// origin, as before the guard existed.
    Resolve(io::Error),
}

/// What kind of address an IP is, as far as the policy cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Multicast,
    Broadcast,
    Loopback,
    Unspecified,
    LinkLocal,
    Private,
    Other,
}

/// `ip` as the address it stands for: an IPv6 address that carries an IPv4 address
/// (IPv4-mapped `::ffff:a.b.c.d`, which a dual-stack socket connects to as IPv4;
/// deprecated IPv4-compatible `::a.b.c.d`; NAT64's well-known prefix `64:ff9b::/96`; SIIT's
/// IPv4-translated `::ffff:0:a.b.c.d`, RFC 2765; 6to4's `2002:aabb:ccdd::/48`, RFC 3056,
/// whose relay delivers to `aa.bb.cc.dd`) is the IPv4 address. `::` and `::1` stay
/// themselves.
pub fn canonical(ip: IpAddr) -> IpAddr {
    let IpAddr::V6(v6) = ip else {
        return ip;
    };
    if let Some(v4) = v6.to_ipv4_mapped() {
        return IpAddr::V4(v4);
    }
    let s = v6.segments();
    let tail = Ipv4Addr::new((s[6] >> 8) as u8, s[6] as u8, (s[7] >> 8) as u8, s[7] as u8);
    let compatible = s[..6] == [0; 6] && v6 != Ipv6Addr::UNSPECIFIED && v6 != Ipv6Addr::LOCALHOST;
    let nat64 = s[..6] == [0x64, 0xff9b, 0, 0, 0, 0];
    let translated = s[..6] == [0, 0, 0, 0, 0xffff, 0];
    if compatible || nat64 || translated {
        return IpAddr::V4(tail);
    }
    if s[0] == 0x2002 {
        let embedded = Ipv4Addr::new((s[1] >> 8) as u8, s[1] as u8, (s[2] >> 8) as u8, s[2] as u8);
        return IpAddr::V4(embedded);
    }
    ip
}

fn kind(ip: IpAddr) -> Kind {
    match canonical(ip) {
        IpAddr::V4(v4) => {
            let o = v4.octets();
            if v4.is_multicast() {
                Kind::Multicast
            } else if v4.is_broadcast() {
                Kind::Broadcast
            } else if v4.is_loopback() {
                Kind::Loopback
            } else if o[0] == 0 {
                // 0.0.0.0/8, "this network": 0.0.0.0 connects to this host.
                Kind::Unspecified
            } else if v4.is_link_local() {
                Kind::LinkLocal
            } else if v4.is_private() || (o[0] == 100 && (o[1] & 0xc0) == 64) {
                Kind::Private
            } else {
                Kind::Other
            }
        }
        IpAddr::V6(v6) => {
            let first = v6.segments()[0];
            if v6.is_multicast() {
                Kind::Multicast
            } else if v6.is_loopback() {
                Kind::Loopback
            } else if v6.is_unspecified() {
                Kind::Unspecified
            } else if first & 0xffc0 == 0xfe80 {
                Kind::LinkLocal
            } else if first & 0xfe00 == 0xfc00 || first & 0xffc0 == 0xfec0 {
                // Unique local fc00::/7, and the deprecated site-local fec0::/10.
                Kind::Private
            } else {
                Kind::Other
            }
        }
    }
}

pub use trove_http::target::parse_ipv4_literal;

/// An IP literal (IPv6 with or without brackets, or IPv4 in any `inet_aton` form).
pub fn parse_literal(host: &str) -> Option<IpAddr> {
    let bare = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    if let Ok(v6) = bare.parse::<Ipv6Addr>() {
        return Some(IpAddr::V6(v6));
    }
    parse_ipv4_literal(bare).map(IpAddr::V4)
}

/// The guard's policy, built once from `[access]` and the addresses trove listens on.
#[derive(Debug, Clone)]
pub struct DestinationPolicy {
    local_clients: Acl,
    exceptions: Vec<Exception>,
    deny_private: bool,
    /// Every address trove accepts connections on: the proxy's listeners and the admin
    /// listener, as bound (a wildcard address means every address of this host).
    own: Vec<SocketAddr>,
}

impl Default for DestinationPolicy {
    /// Loopback clients are local; no exceptions; no listener of trove's own known.
    fn default() -> Self {
        DestinationPolicy {
            local_clients: Acl::new(&[
                "127.0.0.0/8".parse().expect("static"),
                "::1/128".parse().expect("static"),
            ]),
            exceptions: Vec::new(),
            deny_private: false,
            own: Vec::new(),
        }
    }
}

impl DestinationPolicy {
    /// `exceptions` were checked with the settings; one that doesn't parse is an error.
    pub fn new(
        local_clients: &[IpNet],
        exceptions: &[String],
        deny_private: bool,
        own: Vec<SocketAddr>,
    ) -> Result<DestinationPolicy, String> {
        Ok(DestinationPolicy {
            local_clients: Acl::new(local_clients),
            exceptions: exceptions
                .iter()
                .map(|e| Exception::parse(e))
                .collect::<Result<_, _>>()?,
            deny_private,
            own,
        })
    }

    /// Whether the client at `ip` is local.
    pub fn class(&self, ip: IpAddr) -> ClientClass {
        if self.local_clients.allows(ip) {
            ClientClass::Local
        } else {
            ClientClass::Remote
        }
    }

    /// Whether a client of `class` may make trove connect to `addr`.
    pub fn check(&self, addr: SocketAddr, class: ClientClass) -> Result<(), Refusal> {
        let ip = canonical(addr.ip());
        let k = kind(ip);
        match k {
            Kind::Multicast => return Err(Refusal::Multicast),
            Kind::Broadcast => return Err(Refusal::Broadcast),
            _ => {}
        }
        if self.is_own(addr, ip, k) {
            return Err(Refusal::OwnListener);
        }
        if class == ClientClass::Local {
            return Ok(());
        }
        let refusal = match k {
            Kind::Loopback => Refusal::Loopback,
            Kind::Unspecified => Refusal::Unspecified,
            Kind::LinkLocal => Refusal::LinkLocal,
            Kind::Private if self.deny_private => Refusal::Private,
            _ => return Ok(()),
        };
        if self.exceptions.iter().any(|e| e.covers(ip, addr.port())) {
            return Ok(());
        }
        Err(refusal)
    }

    /// True when a connection to `addr` (`ip` is its canonical address, of kind `k`) would
    /// reach one of trove's own listeners.
    fn is_own(&self, addr: SocketAddr, ip: IpAddr, k: Kind) -> bool {
        self.own.iter().any(|o| {
            if o.port() != addr.port() {
                return false;
            }
            let own_ip = canonical(o.ip());
            if own_ip == ip {
                return true;
            }
            // Connecting to 0.0.0.0 or :: reaches this host's loopback address.
            if k == Kind::Unspecified && (own_ip.is_loopback() || own_ip.is_unspecified()) {
                return true;
            }
            // A wildcard listener accepts on every address of this host.
            own_ip.is_unspecified()
                && (k == Kind::Loopback || k == Kind::Unspecified || is_local_address(addr, ip))
        })
    }

    /// Whether a client of `class` may make trove connect to every one of `addrs`.
    pub fn check_all(&self, addrs: &Addrs, class: ClientClass) -> Result<(), Refusal> {
        addrs.iter().try_for_each(|a| self.check(a, class))
    }

    /// The addresses `host` stands for at `port` (through `resolver`'s cache), each
    /// checked for a client of `class`: connect to exactly these ([`connect`]). Callers
    /// bound the time.
    pub async fn resolve(
        &self,
        resolver: &Resolver,
        host: &str,
        port: u16,
        class: ClientClass,
    ) -> Result<Addrs, Blocked> {
        let addrs = candidates(resolver, host, port)
            .await
            .map_err(Blocked::Resolve)?;
        self.check_all(&addrs, class).map_err(Blocked::Refused)?;
        Ok(addrs)
    }
}

/// True when `ip` is an address of one of this host's interfaces. Asked of the kernel by
/// binding a socket to it (bind succeeds only for a local address), so the answer is
/// current even when interfaces come and go, and needs no interface-listing crate. With
/// `net.ipv4.ip_nonlocal_bind` set every address looks local: the guard then refuses more,
/// never less.
fn is_local_address(addr: SocketAddr, ip: IpAddr) -> bool {
    let probe = match (ip, addr) {
        (IpAddr::V6(v6), SocketAddr::V6(a)) => {
            SocketAddr::V6(std::net::SocketAddrV6::new(v6, 0, 0, a.scope_id()))
        }
        (ip, _) => SocketAddr::new(ip, 0),
    };
    std::net::UdpSocket::bind(probe).is_ok()
}

/// The candidate addresses for `host` (brackets around IPv6 allowed) at `port`: an IP
/// literal is taken as it is, a name is asked of `resolver` (its cache, or one lookup). A
/// name that doesn't resolve is an error of kind `TimedOut` when the name servers did not
/// answer in time, else `NotFound` or `Other` (`resolver::Failure::to_io`).
pub async fn candidates(resolver: &Resolver, host: &str, port: u16) -> io::Result<Addrs> {
    if let Some(ip) = parse_literal(host) {
        return Ok(Addrs::new(Arc::new([ip]), port));
    }
    match resolver.lookup(host).await {
        Ok(ips) => Ok(Addrs::new(ips, port)),
        Err(why) => Err(why.to_io(host)),
    }
}

/// Connects to the first of `addrs` that accepts, in order (as `TcpStream::connect` does
/// for a name); callers bound the time.
pub async fn connect(addrs: &Addrs) -> io::Result<TcpStream> {
    let mut last = io::Error::new(io::ErrorKind::InvalidInput, "no address to connect to");
    for a in addrs.iter() {
        match TcpStream::connect(a).await {
            Ok(s) => return Ok(s),
            Err(e) => last = e,
        }
    }
    Err(last)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn at(s: &str, port: u16) -> SocketAddr {
        SocketAddr::new(ip(s), port)
    }

    #[test]
    fn inet_aton_spellings_are_the_address_they_spell() {
        let lo = Ipv4Addr::new(127, 0, 0, 1);
        for s in [
            "127.0.0.1",
            "127.1",
            "127.0.1",
            "2130706433",
            "0x7f.1",
            "0X7F.0.0.1",
            "0x7f000001",
            "017700000001",
            "0177.0.0.01",
        ] {
            assert_eq!(parse_ipv4_literal(s), Some(lo), "{s}");
        }
        assert_eq!(parse_ipv4_literal("0"), Some(Ipv4Addr::UNSPECIFIED));
        assert_eq!(
            parse_ipv4_literal("169.254.43518"),
            Some(Ipv4Addr::new(169, 254, 169, 254))
        );
        for s in [
            "",
            "localhost",
            "1.2.3.4.5",
            "256.0.0.1",
            "1.2.3.256",
            "1.2.65536",
            "4294967296",
            "08",
            "0x",
            "1..2",
            "+1",
            "1.-2",
            "127.0.0.1.",
            "example.com",
        ] {
            assert_eq!(parse_ipv4_literal(s), None, "{s}");
        }
    }

    #[test]
    fn ipv6_forms_carrying_ipv4_are_judged_as_ipv4() {
        assert_eq!(canonical(ip("::ffff:127.0.0.1")), ip("127.0.0.1"));
        assert_eq!(canonical(ip("::127.0.0.1")), ip("127.0.0.1"));
        assert_eq!(canonical(ip("64:ff9b::a9fe:a9fe")), ip("169.254.169.254"));
        assert_eq!(canonical(ip("::ffff:0:7f00:1")), ip("127.0.0.1"));
        assert_eq!(canonical(ip("2002:7f00:1::")), ip("127.0.0.1"));
        assert_eq!(canonical(ip("2002:a9fe:a9fe:1::5")), ip("169.254.169.254"));
        assert_eq!(canonical(ip("::1")), ip("::1"));
        assert_eq!(canonical(ip("::")), ip("::"));
        assert_eq!(canonical(ip("2001:db8::1")), ip("2001:db8::1"));
    }

    #[test]
    fn remote_clients_are_kept_from_this_hosts_private_reach() {
        let p = DestinationPolicy::default();
        let remote = ClientClass::Remote;
        for (a, why) in [
            ("127.0.0.1", Refusal::Loopback),
            ("127.255.0.9", Refusal::Loopback),
            ("::1", Refusal::Loopback),
            ("::ffff:127.0.0.1", Refusal::Loopback),
            ("::127.0.0.1", Refusal::Loopback),
            ("0.0.0.0", Refusal::Unspecified),
            ("0.1.2.3", Refusal::Unspecified),
            ("::", Refusal::Unspecified),
            ("169.254.169.254", Refusal::LinkLocal),
            ("fe80::1", Refusal::LinkLocal),
            ("::ffff:169.254.169.254", Refusal::LinkLocal),
            ("224.0.0.1", Refusal::Multicast),
            ("ff02::1", Refusal::Multicast),
            ("255.255.255.255", Refusal::Broadcast),
        ] {
            assert_eq!(p.check(at(a, 80), remote), Err(why), "{a}");
        }
        for a in [
            "93.184.215.14",
            "10.0.0.1",
            "192.168.1.1",
            "fd00::1",
            "2606::1",
        ] {
            assert_eq!(p.check(at(a, 80), remote), Ok(()), "{a}");
        }
        // A local client reaches what its host reaches, but never multicast or broadcast.
        let local = ClientClass::Local;
        for a in ["127.0.0.1", "::1", "0.0.0.0", "169.254.169.254", "10.0.0.1"] {
            assert_eq!(p.check(at(a, 80), local), Ok(()), "{a}");
        }
        assert_eq!(p.check(at("224.0.0.1", 80), local), Err(Refusal::Multicast));
    }

    #[test]
    fn private_ranges_are_refused_on_request() {
        let p = DestinationPolicy::new(&[], &[], true, Vec::new()).unwrap();
        for a in [
            "10.1.1.1",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.0.1",
            "100.64.0.1",
            "100.127.255.255",
            "fd12::1",
            "fc00::1",
            "fec0::1",
            "::ffff:10.0.0.1",
        ] {
            assert_eq!(
                p.check(at(a, 80), ClientClass::Remote),
                Err(Refusal::Private),
                "{a}"
            );
        }
        for a in ["172.32.0.1", "100.128.0.1", "192.169.0.1", "11.0.0.1"] {
            assert_eq!(p.check(at(a, 80), ClientClass::Remote), Ok(()), "{a}");
        }
    }

    #[test]
    fn exceptions_allow_networks_and_ports() {
        let p = DestinationPolicy::new(
            &[],
            &[
                "127.0.0.1:8080".into(),
                "169.254.0.0/16:9000-9001".into(),
                "[::1]:8081".into(),
                "10.0.0.0/8".into(),
                "::ffff:127.0.0.2".into(),
            ],
            true,
            Vec::new(),
        )
        .unwrap();
        let r = ClientClass::Remote;
        assert_eq!(p.check(at("127.0.0.1", 8080), r), Ok(()));
        assert_eq!(p.check(at("::ffff:127.0.0.1", 8080), r), Ok(()));
        assert_eq!(p.check(at("127.0.0.1", 8081), r), Err(Refusal::Loopback));
        assert_eq!(p.check(at("169.254.1.1", 9001), r), Ok(()));
        assert_eq!(p.check(at("169.254.1.1", 80), r), Err(Refusal::LinkLocal));
        assert_eq!(p.check(at("::1", 8081), r), Ok(()));
        assert_eq!(p.check(at("10.9.9.9", 1), r), Ok(()));
        assert_eq!(p.check(at("192.168.0.1", 1), r), Err(Refusal::Private));
        assert_eq!(p.check(at("127.0.0.2", 5), r), Ok(()));
        for bad in [
            "",
            "nope",
            "10.0.0.0/33",
            "127.0.0.1:0",
            "[::1",
            "[::1]8080",
            "1.2.3.4:x",
        ] {
            assert!(Exception::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn own_listeners_are_refused_to_everyone_by_any_address_that_reaches_them() {
        let own = vec![at("127.0.0.1", 3128), at("0.0.0.0", 9090)];
        let p = DestinationPolicy::new(&[], &["127.0.0.0/8".into()], false, own).unwrap();
        for class in [ClientClass::Local, ClientClass::Remote] {
            for a in [
                at("127.0.0.1", 3128),
                at("::ffff:127.0.0.1", 3128),
                at("0.0.0.0", 3128),
                at("127.0.0.1", 9090),
                at("127.3.2.1", 9090),
                at("::1", 9090),
                at("0.0.0.0", 9090),
            ] {
                assert_eq!(p.check(a, class), Err(Refusal::OwnListener), "{a}");
            }
            // Another loopback address on the proxy's port is not the proxy.
            assert_eq!(p.check(at("127.0.0.2", 3128), class), Ok(()));
        }
    }

    #[tokio::test]
    async fn names_resolve_once_and_every_candidate_is_checked() {
        let p = DestinationPolicy::default();
        let r = Resolver::system(&Default::default(), std::time::Duration::from_secs(5));
        let addrs = p
            .resolve(&r, "localhost", 80, ClientClass::Local)
            .await
            .unwrap();
        assert!(addrs.iter().all(|a| a.ip().is_loopback()), "{addrs:?}");
        assert!(matches!(
            p.resolve(&r, "localhost", 80, ClientClass::Remote).await,
            Err(Blocked::Refused(Refusal::Loopback))
        ));
        assert!(matches!(
            p.resolve(&r, "[::ffff:7f00:1]", 80, ClientClass::Remote)
                .await,
            Err(Blocked::Refused(Refusal::Loopback))
        ));
        assert!(matches!(
            p.resolve(&r, "name.invalid", 80, ClientClass::Remote).await,
            Err(Blocked::Resolve(_))
        ));
    }

    /// A name that answers a public address, then (its TTL over) a loopback one: the
    /// cached answer is what was checked and what is handed out; the next answer is
    /// checked anew and refused.
    #[tokio::test(start_paused = true)]
    async fn a_name_s_next_answer_is_checked_anew() {
        use crate::resolver::{Answer, Found, Source};
        use std::future::Future;
        use std::pin::Pin;
        use std::sync::atomic::{AtomicUsize, Ordering};
        use std::time::Duration;

        /// Answers 93.184.215.14 first, 127.0.0.1 after, each with a 60 s TTL.
        struct Rebinding(AtomicUsize);
        impl Source for Rebinding {
            fn lookup(&self, _: &str) -> Pin<Box<dyn Future<Output = Found> + Send>> {
                let n = self.0.fetch_add(1, Ordering::SeqCst);
                let ip = if n == 0 { "93.184.215.14" } else { "127.0.0.1" };
                Box::pin(std::future::ready(Ok(Answer {
                    ips: vec![ip.parse().unwrap()],
                    ttl: Duration::from_secs(60),
                })))
            }
        }
        let p = DestinationPolicy::default();
        let r = Resolver::with_source(
            &Default::default(),
            Duration::from_secs(5),
            Arc::new(Rebinding(AtomicUsize::new(0))),
        );
        let remote = ClientClass::Remote;
        let first = p.resolve(&r, "rebind.test", 80, remote).await.unwrap();
        let again = p.resolve(&r, "rebind.test", 80, remote).await.unwrap();
        assert_eq!(
            first.iter().collect::<Vec<_>>(),
            vec![at("93.184.215.14", 80)]
        );
        assert!(Arc::ptr_eq(&first.ips, &again.ips), "one answer, shared");
        tokio::time::advance(Duration::from_secs(61)).await;
        assert!(matches!(
            p.resolve(&r, "rebind.test", 80, remote).await,
            Err(Blocked::Refused(Refusal::Loopback))
        ));
        // What a request checked earlier is still exactly what it connects to.
        assert_eq!(
            first.iter().collect::<Vec<_>>(),
            vec![at("93.184.215.14", 80)]
        );
    }
}
