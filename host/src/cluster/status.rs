//! `mailer cluster status`: the group's members, the partitions (tasks)
//! each holds, and each partition's committed offset and lag, read from the
//! brokers (the group's description and committed offsets), so it works
//! from any machine that reaches them, whether or not a member runs there.

use super::error::ClusterError;
use super::member::{TopicPartition, admin_of};
use super::topics::{ClusterTopics, TopicRole, topic_name};
use crate::admin::{AdminPeers, ClientError};
use crate::connectors::kafka::watermarks;
use crate::metrics::TaskSnapshot;
use crate::plan::Plan;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{Offset, TopicPartitionList};
use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
use std::time::Duration;

const TIMEOUT: Duration = Duration::from_secs(10);

/// A member as the group describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberStatus {
    /// Its `client.id`: `mailer-<pipeline>-<instance>`.
    pub client_id: String,
    /// Its host, as the broker saw it.
    pub host: String,
    /// The partitions it holds.
    pub partitions: Vec<TopicPartition>,
    /// The admin API address its `client.id` advertises, if any (asked
    /// only when the manifest lists it).
    pub admin: Option<SocketAddr>,
    /// Its tasks as its admin API shows them (restore progress among
    /// them), or why they cannot be seen.
    pub tasks: Result<Vec<TaskSnapshot>, String>,
}

/// One partition the group reads: a source task or a keyed task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionStatus {
    /// The partition.
    pub partition: TopicPartition,
    /// The member holding it, if any.
    pub member: Option<String>,
    /// The group's committed offset, if it has one.
    pub committed: Option<i64>,
    /// The partition's end (high watermark).
    pub end: i64,
}

impl PartitionStatus {
    /// Records not committed yet (all of them without a committed offset).
    pub fn lag(&self) -> i64 {
        (self.end - self.committed.unwrap_or(0)).max(0)
    }
}

/// The cluster of a pipeline, now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterStatus {
    /// The group.
    pub group: String,
    /// Its members.
    pub members: Vec<MemberStatus>,
    /// Every partition of the source and repartition topics.
    pub partitions: Vec<PartitionStatus>,
}

/// The status of `plan`'s cluster (it has cluster settings).
pub fn status(plan: &Plan) -> Result<ClusterStatus, ClusterError> {
    let settings = plan.cluster.as_ref().expect("a cluster plan");
    let (consumer, topics) = observer(plan)?;
    let mut names: Vec<String> = settings.sources.iter().flat_map(|s| s.topics.clone()).collect();
    for (_, by) in settings.keyed_parts() {
        names.push(topic_name(&plan.name, by, TopicRole::Repartition)?);
    }
    let kafka =
        |what: &str| ClusterError::kafka(settings.brokers().bootstrap_servers.value(), what.to_owned());
    let mut members = members_of(plan, &consumer)?;
    let peers = AdminPeers::of(plan);
    for m in &mut members {
        m.tasks = tasks_of(&peers, m);
    }
    let holder: BTreeMap<&TopicPartition, &str> = members
        .iter()
        .flat_map(|m| m.partitions.iter().map(|p| (p, m.client_id.as_str())))
        .collect();
    let mut list = TopicPartitionList::new();
    for topic in &names {
        // A repartition topic not made yet: the cluster never ran.
        for p in topics.partitions(topic).unwrap_or_default() {
            list.add_partition(topic, p);
        }
    }
    let committed = consumer
        .committed_offsets(list.clone(), TIMEOUT)
        .map_err(kafka("reading the group's committed offsets"))?;
    let mut partitions = Vec::new();
    for e in committed.elements() {
        let at = (e.topic().to_owned(), e.partition());
        let (_, end) = watermarks(consumer.client(), e.topic(), e.partition(), TIMEOUT)
            .map_err(kafka("reading a partition's end"))?;
        partitions.push(PartitionStatus {
            member: holder.get(&at).map(|m| (*m).to_owned()),
            committed: match e.offset() {
                Offset::Offset(o) => Some(o),
                _ => None,
            },
            end,
            partition: at,
        });
    }
    Ok(ClusterStatus {
        group: settings.group.clone(),
        members,
        partitions,
    })
}

/// Each member of `plan`'s cluster now (its `client.id`) and the admin
/// API's address it advertises, when it does: where `mailer plugin`
/// commands go in cluster mode, through [`AdminPeers`] (anyone joining the
/// group advertises what they like).
pub fn member_admins(plan: &Plan) -> Result<Vec<(String, Option<SocketAddr>)>, ClusterError> {
    let (consumer, _) = observer(plan)?;
    let members = members_of(plan, &consumer)?;
    Ok(members.into_iter().map(|m| (m.client_id, m.admin)).collect())
}

/// A consumer of the cluster's brokers that never joins the group (it only
/// reads the group's offsets and description), and their topics' admin.
fn observer(plan: &Plan) -> Result<(BaseConsumer, ClusterTopics), ClusterError> {
    let settings = plan.cluster.as_ref().expect("a cluster plan");
    let source = settings.brokers();
    let mut config = super::run::brokers_config(settings);
    let topics = ClusterTopics::connect(&config)?;
    config.set("group.id", &settings.group).set(
        "session.timeout.ms",
        settings.session_timeout.as_millis().to_string(),
    );
    let consumer = config.create().map_err(ClusterError::kafka(
        source.bootstrap_servers.value(),
        "connecting".to_owned(),
    ))?;
    Ok((consumer, topics))
}

/// The group's members as its description gives them (their tasks not
/// asked yet).
fn members_of(plan: &Plan, consumer: &BaseConsumer) -> Result<Vec<MemberStatus>, ClusterError> {
    let settings = plan.cluster.as_ref().expect("a cluster plan");
    let groups = consumer
        .fetch_group_list(Some(&settings.group), TIMEOUT)
        .map_err(ClusterError::kafka(
            settings.brokers().bootstrap_servers.value(),
            "describing the group".to_owned(),
        ))?;
    let members = groups
        .groups()
        .iter()
        .filter(|g| g.name() == settings.group)
        .flat_map(|g| g.members())
        .map(|m| MemberStatus {
            client_id: m.client_id().to_owned(),
            host: m.client_host().to_owned(),
            partitions: m.assignment().map(assigned_partitions).unwrap_or_default(),
            admin: admin_of(m.client_id(), m.client_host()),
            tasks: Err("not asked".into()),
        })
        .collect();
    Ok(members)
}

/// The tasks of member `m`, asked of its admin API with the manifest's
/// token, when the manifest lists its address (else why not).
fn tasks_of(peers: &Result<AdminPeers, ClientError>, m: &MemberStatus) -> Result<Vec<TaskSnapshot>, String> {
    let no_api = || "it serves no admin API (add `[admin]` to the manifest to see its tasks)".to_owned();
    let Some(addr) = m.admin else { return Err(no_api()) };
    match peers {
        Ok(peers) => peers
            .client(&m.client_id, addr)
            .and_then(|client| client.tasks())
            .map_err(|e| e.to_string()),
        Err(ClientError::NoAdmin) => Err(no_api()),
        Err(e) => Err(e.to_string()),
    }
}

/// The partitions of a consumer-protocol assignment: a version (i16), then
/// an array (i32 count) of topics, each a string (i16 length) and an array
/// of partitions (i32 each); user data after it is ignored. Whatever does
/// not parse gives what parsed so far.
pub(super) fn assigned_partitions(bytes: &[u8]) -> Vec<TopicPartition> {
    let mut out = Vec::new();
    let mut at = 2usize;
    let mut take = |n: usize| {
        let slice = bytes.get(at..at + n)?;
        at += n;
        Some(slice)
    };
    let mut parse = || -> Option<()> {
        let topics = i32::from_be_bytes(take(4)?.try_into().ok()?);
        for _ in 0..topics.max(0) {
            let len = i16::from_be_bytes(take(2)?.try_into().ok()?).max(0) as usize;
            let topic = String::from_utf8_lossy(take(len)?).into_owned();
            let count = i32::from_be_bytes(take(4)?.try_into().ok()?);
            for _ in 0..count.max(0) {
                out.push((topic.clone(), i32::from_be_bytes(take(4)?.try_into().ok()?)));
            }
        }
        Some(())
    };
    let _ = parse();
    out
}

impl fmt::Display for ClusterStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "group `{}`: {} member(s)", self.group, self.members.len())?;
        for m in &self.members {
            writeln!(
                f,
                "  {} ({}): {} partition(s)",
                m.client_id,
                m.host,
                m.partitions.len()
            )?;
            match &m.tasks {
                Ok(tasks) => {
                    let restoring: Vec<&TaskSnapshot> = tasks.iter().filter(|t| t.restoring).collect();
                    writeln!(f, "    {} task(s), {} restoring", tasks.len(), restoring.len())?;
                    for t in restoring {
                        writeln!(
                            f,
                            "    restoring {}: {} of {} changelog record(s)",
                            t.name, t.restored, t.to_restore
                        )?;
                    }
                }
                Err(why) => writeln!(f, "    tasks not shown: {why}")?,
            }
        }
        writeln!(
            f,
            "{:<48} {:>10} {:>10} {:>8}  member",
            "partition", "committed", "end", "lag"
        )?;
        for p in &self.partitions {
            let committed = p.committed.map_or_else(|| "-".to_owned(), |o| o.to_string());
            writeln!(
                f,
                "{:<48} {committed:>10} {:>10} {:>8}  {}",
                format!("{}/{}", p.partition.0, p.partition.1),
                p.end,
                p.lag(),
                p.member.as_deref().unwrap_or("-")
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_assignment_reads_back() {
        let mut bytes = vec![0, 1];
        bytes.extend(2i32.to_be_bytes());
        for (topic, partitions) in [("in", vec![0i32, 3]), ("p.c.repartition", vec![5])] {
            bytes.extend((topic.len() as i16).to_be_bytes());
            bytes.extend(topic.as_bytes());
            bytes.extend((partitions.len() as i32).to_be_bytes());
            for p in partitions {
                bytes.extend(p.to_be_bytes());
            }
        }
        bytes.extend((-1i32).to_be_bytes());
        assert_eq!(
            assigned_partitions(&bytes),
            [("in".into(), 0), ("in".into(), 3), ("p.c.repartition".into(), 5)]
        );
        assert_eq!(assigned_partitions(&bytes[..9]), Vec::<TopicPartition>::new());
        assert_eq!(assigned_partitions(&[]), Vec::<TopicPartition>::new());
    }
}
