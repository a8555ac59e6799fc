//! Whom the CLI sends the admin token to in cluster mode. The members'
//! admin addresses come from their `client.id`s in the group's
//! description, and anyone who may join the consumer group chooses their
//! own: the CLI asks only addresses the manifest lists — `[admin] listen`
//! (its IP at its port, any port when it is 0) and `[cluster]
//! admin_addresses` — and skips any other with a warning naming it
//! (docs/architecture.md, "Who the CLI sends the token to").

use super::{AdminClient, ClientError, ClientTls};
use crate::manifest::AdminAddress;
use crate::plan::Plan;
use std::net::SocketAddr;

/// The admin APIs of a cluster's members the CLI may ask, and how.
pub struct AdminPeers {
    token: String,
    listed: Vec<AdminAddress>,
    tls: Option<ClientTls>,
}

impl AdminPeers {
    /// The members' admin APIs as `plan`'s manifest lists them.
    pub fn of(plan: &Plan) -> Result<Self, ClientError> {
        let admin = plan.admin.as_ref().ok_or(ClientError::NoAdmin)?;
        let tls = admin
            .tls
            .as_ref()
            .map(|t| ClientTls::trusting(&t.ca))
            .transpose()
            .map_err(ClientError::Tls)?;
        let more = plan
            .cluster
            .iter()
            .flat_map(|c| c.admin_addresses.iter().copied());
        Ok(Self {
            token: admin.token.clone(),
            listed: listed_by(admin.listen).into_iter().chain(more).collect(),
            tls,
        })
    }

    /// Whether the manifest lists `addr`.
    pub fn lists(&self, addr: SocketAddr) -> bool {
        self.listed.iter().any(|a| a.allows(addr))
    }

    /// The client of member `member`'s admin API at `addr`; an address the
    /// manifest does not list, or one plain HTTP may not reach, is refused
    /// (and logged as a warning naming it) before anything is sent there.
    pub fn client(&self, member: &str, addr: SocketAddr) -> Result<AdminClient, ClientError> {
        let client = match self.lists(addr) {
            true => AdminClient::at(addr, self.token.clone(), self.tls.as_ref()),
            false => Err(ClientError::NotListed { addr }),
        };
        client.inspect_err(|e| tracing::warn!(member, %addr, "process not asked: {e}"))
    }
}

/// What `[admin] listen` lists: its address, at any port when its port is
/// 0 (each process of one machine takes a free one); nothing when it is
/// unspecified (`0.0.0.0`: each machine's own address, which
/// `admin_addresses` must name).
fn listed_by(listen: SocketAddr) -> Option<AdminAddress> {
    match (listen.ip().is_unspecified(), listen.port()) {
        (true, _) => None,
        (false, 0) => Some(AdminAddress::any_port(listen.ip())),
        (false, _) => Some(AdminAddress::exactly(listen)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    fn peers(listen: &str, more: &[&str]) -> AdminPeers {
        AdminPeers {
            token: "t".repeat(16),
            listed: listed_by(at(listen))
                .into_iter()
                .chain(more.iter().map(|a| a.parse().unwrap()))
                .collect(),
            tls: None,
        }
    }

    #[test]
    fn only_what_the_manifest_lists_is_asked() {
        let one_machine = peers("127.0.0.1:0", &[]);
        assert!(one_machine.lists(at("127.0.0.1:40001")));
        assert!(!one_machine.lists(at("127.0.0.2:40001")));
        assert!(!one_machine.lists(at("10.0.0.5:9464")));
        let fixed = peers("127.0.0.1:9464", &[]);
        assert!(fixed.lists(at("127.0.0.1:9464")) && !fixed.lists(at("127.0.0.1:9465")));
        let machines = peers("0.0.0.0:9464", &["10.0.1.0/24:9464"]);
        assert!(machines.lists(at("10.0.1.7:9464")));
        assert!(!machines.lists(at("0.0.0.0:9464")) && !machines.lists(at("10.0.2.7:9464")));
    }

    #[test]
    fn an_unlisted_address_or_plain_http_beyond_loopback_is_refused_before_sending() {
        let machines = peers("0.0.0.0:9464", &["10.0.1.0/24:9464"]);
        let refused = machines.client("m", at("10.0.9.9:9464")).err().unwrap();
        assert!(matches!(refused, ClientError::NotListed { .. }), "{refused}");
        assert!(refused.to_string().contains("10.0.9.9:9464"), "{refused}");
        // Listed, but beyond loopback without TLS: the token would travel
        // in clear.
        let plain = machines.client("m", at("10.0.1.7:9464")).err().unwrap();
        assert!(matches!(plain, ClientError::PlainOverNetwork { .. }), "{plain}");
        assert!(!plain.to_string().contains(&"t".repeat(16)), "{plain}");
        assert!(peers("127.0.0.1:0", &[]).client("m", at("127.0.0.1:1")).is_ok());
    }
}
