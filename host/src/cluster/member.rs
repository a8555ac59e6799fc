//! One process's membership of the pipeline's consumer group: a consumer
//! subscribed to the pipeline's topics, whose partitions the group's
//! cooperative-sticky assignment (librdkafka's, run by the group's leader)
//! splits among the processes. No coordinator of mailer's own: a process
//! that joins or leaves moves only the partitions it must.
//!
//! The member tells its [`RebalanceListener`] what moves: a partition
//! leaving is announced *before* it goes (inside the consumer's poll, so
//! the listener can commit what was read from it first), a partition
//! arriving after it came. Partitions lost with the session (the member was
//! away too long) are announced as lost: another member may own them
//! already, and nothing read from them may be committed.

use crate::manifest::Rebalancing;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext, ConsumerGroupMetadata, Rebalance};
use rdkafka::error::KafkaError;
use rdkafka::{ClientContext, Offset, TopicPartitionList};
use std::net::SocketAddr;
use std::time::Duration;

/// A topic's partition.
pub type TopicPartition = (String, i32);

/// Why a member cannot join or ask the group.
#[derive(Debug, thiserror::Error)]
pub enum MemberError {
    /// The client cannot be made or the subscription fails.
    #[error("joining consumer group `{group}`: {source}")]
    Join {
        /// The group.
        group: String,
        /// What the client said.
        source: KafkaError,
    },
    /// The group cannot be described.
    #[error("describing consumer group `{group}`: {source}")]
    Describe {
        /// The group.
        group: String,
        /// What the client said.
        source: KafkaError,
    },
}

/// Where a member is in what it holds: what committing needs.
pub struct GroupPosition {
    /// The next offset of each partition it read from (those it has not
    /// read from yet are left out).
    pub offsets: TopicPartitionList,
    /// The group's metadata now (its generation and member id fence a
    /// zombie's transactional offset commits), while the member is in the
    /// group: none once librdkafka has reset either (see [`membership`]).
    pub metadata: Option<ConsumerGroupMetadata>,
}

/// Where `consumer` is.
pub fn position_of<C: ConsumerContext>(consumer: &BaseConsumer<C>) -> GroupPosition {
    let mut offsets = TopicPartitionList::new();
    let held = consumer.position().unwrap_or_else(|_| TopicPartitionList::new());
    for e in held.elements() {
        if let Offset::Offset(o) = e.offset() {
            // From the consumer's own list: adding cannot fail.
            let _ = offsets.add_partition_offset(e.topic(), e.partition(), Offset::Offset(o));
        }
    }
    GroupPosition {
        offsets,
        metadata: metadata_in_group(consumer),
    }
}

/// The group's metadata of `consumer`, while it is in the group. The
/// metadata is a copy of the membership when taken: read around it, the
/// same membership both times is the one it holds (a reset member id or
/// generation never comes back; one that moved on meanwhile, in a
/// rebalance, is read again).
fn metadata_in_group<C: ConsumerContext>(consumer: &BaseConsumer<C>) -> Option<ConsumerGroupMetadata> {
    for _ in 0..3 {
        let before = membership(consumer)?;
        let metadata = consumer.group_metadata();
        if membership(consumer).as_ref() == Some(&before) {
            return metadata;
        }
    }
    None
}

/// The generation and member id `consumer` holds in the group, while it
/// holds both: librdkafka resets the member id to "" when the session
/// timed out or the group forgot the member, the generation to -1 when the
/// group refused it, each before the member hears that its partitions are
/// lost. A transactional offset commit with both reset is one the group
/// coordinator does not check against the group at all (Kafka accepts it
/// from a producer that is no consumer), so a zombie's would be taken.
fn membership<C: ConsumerContext>(consumer: &BaseConsumer<C>) -> Option<(i32, String)> {
    use rdkafka::bindings as rd;
    // SAFETY: the handle lives as long as `consumer`; the metadata
    // librdkafka returns is a copy, ours to read and destroy, and its
    // member id a NUL-terminated string it owns.
    unsafe {
        let metadata = rd::rd_kafka_consumer_group_metadata(consumer.client().native_ptr());
        if metadata.is_null() {
            return None;
        }
        let generation = rd::rd_kafka_consumer_group_metadata_generation_id(metadata);
        let member = rd::rd_kafka_consumer_group_metadata_member_id(metadata);
        let member = match member.is_null() {
            true => String::new(),
            false => std::ffi::CStr::from_ptr(member).to_string_lossy().into_owned(),
        };
        rd::rd_kafka_consumer_group_metadata_destroy(metadata);
        (generation >= 0 && !member.is_empty()).then_some((generation, member))
    }
}

/// What a member does when the group moves partitions to or from it.
pub trait RebalanceListener: Send + Sync + 'static {
    /// `partitions` are about to leave this member: what was read from them
    /// is to be committed now, through `consumer` (they go when this
    /// returns).
    fn revoking(&self, partitions: &[TopicPartition], consumer: &BaseConsumer<MemberContext<Self>>)
    where
        Self: Sized;
    /// `partitions` were lost with the member's session: others may own
    /// them already, so nothing read from them may be committed.
    fn lost(&self, partitions: &[TopicPartition]);
    /// `partitions` are this member's now (`consumer` reads them from
    /// when this returns).
    fn assigned(&self, partitions: &[TopicPartition], consumer: &BaseConsumer<MemberContext<Self>>)
    where
        Self: Sized;
}

/// The `client.id` of member `member` of `pipeline`'s cluster:
/// `mailer-<pipeline>-<member>`, then `@<address>` when the process serves
/// its admin API there (`mailer cluster status` reads it back).
pub fn client_id(pipeline: &str, member: &str, admin: Option<SocketAddr>) -> String {
    match admin {
        Some(addr) => format!("mailer-{pipeline}-{member}@{addr}"),
        None => format!("mailer-{pipeline}-{member}"),
    }
}

/// The admin address in a member's `client.id` ([`client_id`]), if any; an
/// unspecified address (`0.0.0.0`) is the host the broker saw. Whoever
/// joins the group chooses their `client.id`: the address is a claim, which
/// the CLI trusts only when the manifest lists it (`crate::admin::AdminPeers`).
pub fn admin_of(client_id: &str, host: &str) -> Option<SocketAddr> {
    let (_, addr) = client_id.rsplit_once('@')?;
    let addr: SocketAddr = addr.parse().ok()?;
    if !addr.ip().is_unspecified() {
        return Some(addr);
    }
    let seen = host.trim_start_matches('/').parse().ok()?;
    Some(SocketAddr::new(seen, addr.port()))
}

/// A member of the group as the group describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberInfo {
    /// The member id the group gave it.
    pub member_id: String,
    /// Its `client.id` (mailer puts the process's admin address there).
    pub client_id: String,
    /// Its host, as the broker saw it.
    pub host: String,
}

/// The consumer context passing rebalances to the listener.
pub struct MemberContext<L> {
    listener: L,
}

impl<L: RebalanceListener> ClientContext for MemberContext<L> {}

impl<L: RebalanceListener> ConsumerContext for MemberContext<L> {
    fn pre_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Revoke(tpl) = rebalance {
            let partitions = partitions_of(tpl);
            if consumer.assignment_lost() {
                self.listener.lost(&partitions);
            } else {
                self.listener.revoking(&partitions, consumer);
            }
        }
    }

    fn post_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        match rebalance {
            Rebalance::Assign(tpl) => self.listener.assigned(&partitions_of(tpl), consumer),
            Rebalance::Revoke(_) => {}
            Rebalance::Error(e) => {
                tracing::warn!(error = %e, "the group's rebalance failed; it will be retried")
            }
        }
    }
}

fn partitions_of(tpl: &TopicPartitionList) -> Vec<TopicPartition> {
    tpl.elements()
        .iter()
        .map(|e| (e.topic().to_owned(), e.partition()))
        .collect()
}

/// One process's member of the group.
pub struct GroupMember<L: RebalanceListener> {
    consumer: BaseConsumer<MemberContext<L>>,
    group: String,
    topics: Vec<String>,
}

/// How a member joins.
pub struct Membership<'a> {
    /// The group.
    pub group: &'a str,
    /// Static membership: a restart within the session timeout keeps the
    /// member's partitions (`group.instance.id`).
    pub instance_id: Option<&'a str>,
    /// The member's `client.id`, shown by the group's description.
    pub client_id: &'a str,
    /// The topics it reads.
    pub topics: &'a [String],
    /// How partitions move.
    pub rebalancing: Rebalancing,
}

impl<L: RebalanceListener> GroupMember<L> {
    /// Joins `membership.group` with `config` (the brokers, security) and
    /// subscribes; partitions arrive through `listener` as polls go on.
    /// Offsets are committed by the caller only (in its transactions), and
    /// only committed records are read.
    pub fn join(
        mut config: ClientConfig,
        membership: &Membership<'_>,
        listener: L,
    ) -> Result<Self, MemberError> {
        let group = membership.group.to_owned();
        let failed = |source| MemberError::Join {
            group: group.clone(),
            source,
        };
        config
            .set("group.id", &group)
            .set("client.id", membership.client_id)
            .set("partition.assignment.strategy", membership.rebalancing.strategy())
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false")
            .set("isolation.level", "read_committed")
            .set("auto.offset.reset", "earliest");
        if let Some(id) = membership.instance_id {
            config.set("group.instance.id", id);
        }
        let consumer: BaseConsumer<MemberContext<L>> = config
            .create_with_context(MemberContext { listener })
            .map_err(failed)?;
        let member = Self {
            consumer,
            group,
            topics: membership.topics.to_vec(),
        };
        member.subscribe()?;
        Ok(member)
    }

    fn subscribe(&self) -> Result<(), MemberError> {
        let topics: Vec<&str> = self.topics.iter().map(String::as_str).collect();
        self.consumer
            .subscribe(&topics)
            .map_err(|source| MemberError::Join {
                group: self.group.clone(),
                source,
            })
    }

    /// Leaves the group and joins it again, as a member with nothing: what
    /// it held is revoked (through the listener) and the group gives it
    /// partitions anew, each read from its committed offset. For a member
    /// the group moved on without, whose positions are past what it may
    /// commit.
    pub fn rejoin(&self) -> Result<(), MemberError> {
        self.consumer.unsubscribe();
        self.subscribe()
    }

    /// The consumer: polled by the member's thread (rebalances run inside
    /// its polls).
    pub fn consumer(&self) -> &BaseConsumer<MemberContext<L>> {
        &self.consumer
    }

    /// The partitions this member holds now.
    pub fn assignment(&self) -> Vec<TopicPartition> {
        self.consumer
            .assignment()
            .map(|tpl| partitions_of(&tpl))
            .unwrap_or_default()
    }

    /// The group's members, as the group's coordinator describes them.
    pub fn members(&self, timeout: Duration) -> Result<Vec<MemberInfo>, MemberError> {
        let list = self
            .consumer
            .fetch_group_list(Some(&self.group), timeout)
            .map_err(|source| MemberError::Describe {
                group: self.group.clone(),
                source,
            })?;
        Ok(list
            .groups()
            .iter()
            .filter(|g| g.name() == self.group)
            .flat_map(|g| g.members())
            .map(|m| MemberInfo {
                member_id: m.id().to_owned(),
                client_id: m.client_id().to_owned(),
                host: m.client_host().to_owned(),
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_admin_address_reads_back_from_the_client_id() {
        let at = |s: &str| -> SocketAddr { s.parse().unwrap() };
        let id = client_id("wc", "a", Some(at("127.0.0.1:7001")));
        assert_eq!(id, "mailer-wc-a@127.0.0.1:7001");
        assert_eq!(admin_of(&id, "/10.0.0.9"), Some(at("127.0.0.1:7001")));
        let anywhere = client_id("wc", "b", Some(at("0.0.0.0:7002")));
        assert_eq!(admin_of(&anywhere, "/10.0.0.9"), Some(at("10.0.0.9:7002")));
        assert_eq!(admin_of(&client_id("wc", "c", None), "/10.0.0.9"), None);
        assert_eq!(admin_of("mailer-wc-d@not-an-address", "/10.0.0.9"), None);
    }
}
