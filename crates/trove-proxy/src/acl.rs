//! Who may use the proxy: client addresses checked against allowed networks.

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

#[cfg(test)]
mod tests {
    use super::*;

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
