//! `[cluster] admin_addresses`: the admin API addresses the CLI may send
//! the admin token to in cluster mode (docs/architecture.md, "Who the CLI
//! sends the token to"). An entry is an address (`10.0.0.5:9464`), a
//! network (`10.0.0.0/24:9464`, `[fd00::/64]:9464`), and a port or `*`
//! for any port.

use serde::Deserialize;
use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::str::FromStr;

/// One entry of `[cluster] admin_addresses`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(try_from = "String")]
pub struct AdminAddress {
    /// The network's address (its host bits zero).
    ip: IpAddr,
    /// The network's prefix length (32 or 128: one address).
    prefix: u8,
    /// The port; any when `None` (`*`).
    port: Option<u16>,
}

/// Why an entry of `admin_addresses` is no address.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "`{0}` is no admin address: write `IP:port` (`10.0.0.5:9464`, `[fd00::5]:9464`), a network `IP/bits:port` (`10.0.0.0/24:9464`), with `*` for any port"
)]
pub struct NotAnAdminAddress(String);

impl AdminAddress {
    /// Exactly `addr`.
    pub fn exactly(addr: SocketAddr) -> Self {
        Self::network(addr.ip(), full_prefix(addr.ip()), Some(addr.port()))
    }

    /// `ip` at any port.
    pub fn any_port(ip: IpAddr) -> Self {
        Self::network(ip, full_prefix(ip), None)
    }

    fn network(ip: IpAddr, prefix: u8, port: Option<u16>) -> Self {
        Self {
            ip: masked(ip, prefix),
            prefix,
            port,
        }
    }

    /// Whether `addr` is one this entry names.
    pub fn allows(&self, addr: SocketAddr) -> bool {
        let ip = canonical(addr.ip());
        let same_family = ip.is_ipv4() == self.ip.is_ipv4();
        same_family && masked(ip, self.prefix) == self.ip && self.port.is_none_or(|p| p == addr.port())
    }
}

impl FromStr for AdminAddress {
    type Err = NotAnAdminAddress;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let wrong = || NotAnAdminAddress(text.to_owned());
        let (host, port) = text.trim().rsplit_once(':').ok_or_else(wrong)?;
        let port = match port {
            "*" => None,
            p => Some(p.parse::<u16>().ok().filter(|&p| p > 0).ok_or_else(wrong)?),
        };
        let host = match host.strip_prefix('[') {
            Some(rest) => rest.strip_suffix(']').ok_or_else(wrong)?,
            None if host.contains(':') => return Err(wrong()),
            None => host,
        };
        let (ip, prefix) = match host.split_once('/') {
            Some((ip, bits)) => (ip, Some(bits.parse::<u8>().map_err(|_| wrong())?)),
            None => (host, None),
        };
        let written = ip.parse::<IpAddr>().map_err(|_| wrong())?;
        let prefix = prefix.unwrap_or_else(|| full_prefix(written));
        if prefix > full_prefix(written) || (text.contains('[') != written.is_ipv6()) {
            return Err(wrong());
        }
        // An IPv4 network written as IPv6 (`[::ffff:10.0.0.0/120]`) is the
        // IPv4 one, as the addresses it is matched with are.
        let ip = canonical(written);
        let prefix = match ip == written {
            true => prefix,
            false => prefix.checked_sub(96).ok_or_else(wrong)?,
        };
        Ok(Self::network(ip, prefix, port))
    }
}

impl TryFrom<String> for AdminAddress {
    type Error = NotAnAdminAddress;

    fn try_from(text: String) -> Result<Self, Self::Error> {
        text.parse()
    }
}

impl fmt::Display for AdminAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let bits = match self.prefix == full_prefix(self.ip) {
            true => String::new(),
            false => format!("/{}", self.prefix),
        };
        let port = self.port.map_or_else(|| "*".to_owned(), |p| p.to_string());
        match self.ip {
            IpAddr::V4(ip) => write!(f, "{ip}{bits}:{port}"),
            IpAddr::V6(ip) => write!(f, "[{ip}{bits}]:{port}"),
        }
    }
}

fn full_prefix(ip: IpAddr) -> u8 {
    if ip.is_ipv4() { 32 } else { 128 }
}

/// An IPv4 address written as IPv6 (`::ffff:10.0.0.5`) as the IPv4 one.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// `ip` with all but its first `prefix` bits zero.
fn masked(ip: IpAddr, prefix: u8) -> IpAddr {
    match ip {
        IpAddr::V4(v4) => {
            let mask = u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0);
            IpAddr::V4((u32::from(v4) & mask).into())
        }
        IpAddr::V6(v6) => {
            let mask = u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0);
            IpAddr::V6((u128::from(v6) & mask).into())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn addresses_networks_and_any_port_match_what_they_name() {
        let one: AdminAddress = "10.0.0.5:9464".parse().unwrap();
        assert!(one.allows(at("10.0.0.5:9464")));
        assert!(!one.allows(at("10.0.0.5:9465")) && !one.allows(at("10.0.0.6:9464")));
        let net: AdminAddress = "10.0.1.0/24:*".parse().unwrap();
        assert!(net.allows(at("10.0.1.200:1")) && !net.allows(at("10.0.2.1:1")));
        assert!(net.allows(at("[::ffff:10.0.1.7]:9")), "IPv4 written as IPv6");
        let mapped: AdminAddress = "[::ffff:10.0.1.0/120]:9".parse().unwrap();
        assert_eq!(mapped.to_string(), "10.0.1.0/24:9");
        let v6: AdminAddress = "[fd00::/64]:9464".parse().unwrap();
        assert!(v6.allows(at("[fd00::1:2]:9464")) && !v6.allows(at("[fd01::1]:9464")));
        assert!(!v6.allows(at("10.0.0.5:9464")));
        assert!(AdminAddress::any_port("127.0.0.1".parse().unwrap()).allows(at("127.0.0.1:40000")));
        assert!(!AdminAddress::exactly(at("127.0.0.1:1")).allows(at("127.0.0.2:1")));
        let all: AdminAddress = "0.0.0.0/0:*".parse().unwrap();
        assert!(all.allows(at("192.168.1.1:80")));
        for (text, shown) in [
            ("10.0.1.9/24:*", "10.0.1.0/24:*"),
            ("[fd00::5]:9464", "[fd00::5]:9464"),
            ("10.0.0.5:9464", "10.0.0.5:9464"),
        ] {
            assert_eq!(text.parse::<AdminAddress>().unwrap().to_string(), shown);
        }
    }

    #[test]
    fn what_is_no_address_is_refused() {
        for text in [
            "",
            "10.0.0.5",
            "10.0.0.5:0",
            "10.0.0.5:99999",
            "host.example:9464",
            "10.0.0.0/33:1",
            "fd00::5:9464",
            "[10.0.0.5]:1",
            "[fd00::5:9464",
            "10.0.0.5/x:1",
        ] {
            let e = text.parse::<AdminAddress>().unwrap_err();
            assert!(e.to_string().contains(&format!("`{text}`")), "{e}");
        }
    }
}
