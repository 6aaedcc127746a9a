//! Who may use the proxy: client addresses checked against allowed networks; ports; and the
//! destinations the forward proxy may reach despite its guard ([`Exception`]).

use std::net::IpAddr;

use ipnet::IpNet;

/// A list of allowed networks.
#[derive(Debug, Clone, Default)]
pub struct Acl {
    nets: Vec<IpNet>,
}

impl Acl {
    pub fn new(nets: &[IpNet]) -> Acl {
        Acl {
            nets: nets.to_vec(),
        }
    }

    /// True when `ip` is in one of the networks. IPv4-mapped IPv6 addresses are checked as
    /// IPv4, so `::ffff:127.0.0.1` counts as loopback.
    pub fn allows(&self, ip: IpAddr) -> bool {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(ip),
            v4 => v4,
        };
        self.nets.iter().any(|n| n.contains(&ip))
    }
}

/// A set of TCP ports, from numbers and `low-high` ranges.
#[derive(Debug, Clone, Default)]
pub struct PortSet {
    ranges: Vec<(u16, u16)>,
}

impl PortSet {
    pub fn parse(items: &[String]) -> Result<PortSet, String> {
        let mut ranges = Vec::new();
        for item in items {
            let bad = || format!("invalid port or range {item:?}");
            let (lo, hi) = match item.split_once('-') {
                Some((a, b)) => (
                    a.trim().parse::<u16>().map_err(|_| bad())?,
                    b.trim().parse::<u16>().map_err(|_| bad())?,
                ),
                None => {
                    let p = item.trim().parse::<u16>().map_err(|_| bad())?;
                    (p, p)
                }
            };
            if lo == 0 || lo > hi {
                return Err(bad());
            }
            ranges.push((lo, hi));
        }
        Ok(PortSet { ranges })
    }

    pub fn contains(&self, port: u16) -> bool {
        self.ranges
            .iter()
            .any(|(lo, hi)| (*lo..=*hi).contains(&port))
    }
}

/// A destination allowed despite the defaults: a network (or one address), optionally only
/// on some ports. Written `"10.1.2.0/24"`, `"127.0.0.1:8080"`, `"192.168.0.0/16:8000-8999"`,
/// `"fd00::/8"`, `"[fd00::/8]:443"` or `"[::1]:8080"`.
#[derive(Debug, Clone)]
pub struct Exception {
    net: IpNet,
    ports: Option<PortSet>,
}

impl Exception {
    pub fn parse(s: &str) -> Result<Exception, String> {
        let s = s.trim();
        let bad = |why: &str| format!("{s:?}: {why}");
        let (net, ports) = if let Some(rest) = s.strip_prefix('[') {
            let (inner, after) = rest.split_once(']').ok_or_else(|| bad("missing ']'"))?;
            match after {
                "" => (inner, None),
                _ => (
                    inner,
                    Some(
                        after
                            .strip_prefix(':')
                            .ok_or_else(|| bad("expected ':port' after ']'"))?,
                    ),
                ),
            }
        } else if s.matches(':').count() > 1 {
            (s, None) // IPv6 without brackets: no port
        } else {
            match s.rsplit_once(':') {
                Some((n, p)) => (n, Some(p)),
                None => (s, None),
            }
        };
        let net: IpNet = match net.parse::<IpNet>() {
            Ok(n) => n,
            Err(_) => net
                .parse::<IpAddr>()
                .map(IpNet::from)
                .map_err(|_| bad("not an IP address or network"))?,
        };
        let ports = match ports {
            Some(p) => Some(PortSet::parse(&[p.to_string()]).map_err(|e| bad(&e))?),
            None => None,
        };
        Ok(Exception {
            net: canonical_net(net),
            ports,
        })
    }

    pub(crate) fn covers(&self, ip: IpAddr, port: u16) -> bool {
        self.net.contains(&ip) && self.ports.as_ref().is_none_or(|p| p.contains(port))
    }
}

/// An IPv4-mapped network (`::ffff:127.0.0.1/128`) as the IPv4 network it is, since the
/// destination guard compares addresses in their canonical form.
fn canonical_net(net: IpNet) -> IpNet {
    if let IpNet::V6(v6) = net {
        if let (Some(v4), true) = (v6.network().to_ipv4_mapped(), v6.prefix_len() >= 96) {
            if let Ok(n) = ipnet::Ipv4Net::new(v4, v6.prefix_len() - 96) {
                return IpNet::V4(n);
            }
        }
    }
    net
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn port_sets_parse_numbers_and_ranges() {
        let p = PortSet::parse(&["80".into(), "1025-65535".into()]).unwrap();
        assert!(p.contains(80) && p.contains(8080) && !p.contains(25) && !p.contains(443));
        assert!(PortSet::parse(&["0".into()]).is_err());
        assert!(PortSet::parse(&["9-3".into()]).is_err());
        assert!(PortSet::parse(&["http".into()]).is_err());
    }

    #[test]
    fn loopback_only_by_default() {
        let acl = Acl::new(&["127.0.0.0/8".parse().unwrap(), "::1/128".parse().unwrap()]);
        assert!(acl.allows("127.0.0.1".parse().unwrap()));
        assert!(acl.allows("127.9.9.9".parse().unwrap()));
        assert!(acl.allows("::1".parse().unwrap()));
        assert!(acl.allows("::ffff:127.0.0.1".parse().unwrap()));
        assert!(!acl.allows("10.0.0.1".parse().unwrap()));
        assert!(!acl.allows("::2".parse().unwrap()));
    }
}
