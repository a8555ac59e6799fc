//! What the topics mailer keeps its own records in must be set to: the
//! settings it makes them with, and the checks of a topic that exists
//! already (made by hand, by an older version, or with the brokers'
//! defaults), refused when a setting would lose what mailer keeps there.
//! A changelog or a commit topic must be compacted and never expire; a
//! repartition topic must never be compacted nor expire (mailer deletes
//! its records itself, once the group committed past them). Their
//! replication factor is asked for explicitly: by default the smaller of 3
//! and the brokers the cluster lists, as Kafka Streams advises for
//! production.

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, ResourceSpecifier, TopicReplication};
use rdkafka::client::ClientContext;
use rdkafka::types::RDKafkaErrorCode;
use std::collections::HashMap;
use std::time::Duration;

/// The replication factor mailer asks for at most when none is set.
pub const DEFAULT_REPLICATION: usize = 3;

/// Segments of a repartition topic: small, so that the records purged
/// below the committed offsets free their disk soon (Kafka Streams' value).
const REPARTITION_SEGMENT_BYTES: &str = "52428800";

/// A repartition topic's segment rolls at least every 10 minutes (Kafka
/// Streams' value), for the same reason.
const REPARTITION_SEGMENT_MS: &str = "600000";

/// What a topic of mailer's own must keep.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Keeps {
    /// The newest record of every key, for good: compacted, never expired
    /// (changelogs, `<pipeline>.offsets.committed`, the commit topic).
    /// `tombstones_for`: how long a deletion must stay readable at least
    /// (`delete.retention.ms`), when the reader relies on it.
    NewestOfEachKey {
        /// The shortest `delete.retention.ms` allowed.
        tombstones_for: Option<Duration>,
    },
    /// Every record, until mailer deletes those its group committed past:
    /// never compacted, never expired (repartition topics).
    EveryRecord,
}

impl Keeps {
    /// The topic settings a topic that keeps this is made with.
    pub fn creation_configs(self) -> &'static [(&'static str, &'static str)] {
        match self {
            Keeps::NewestOfEachKey { .. } => &[("cleanup.policy", "compact")],
            // Records keep their event time as their timestamp: replayed
            // history must not expire before its task reads it.
            Keeps::EveryRecord => &[
                ("cleanup.policy", "delete"),
                ("retention.ms", "-1"),
                ("retention.bytes", "-1"),
                ("segment.bytes", REPARTITION_SEGMENT_BYTES),
                ("segment.ms", REPARTITION_SEGMENT_MS),
            ],
        }
    }
}

/// An existing topic mailer cannot use as it is set.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TopicSettingError {
    /// A setting would lose records mailer needs.
    #[error(
        "topic `{topic}` has `{setting}={found}`, but mailer needs `{setting}={needed}`: {why}. Set it (`kafka-configs.sh --bootstrap-server {brokers} --alter --entity-type topics --entity-name {topic} --add-config {setting}={needed}`) and start again"
    )]
    Unsafe {
        /// The brokers.
        brokers: String,
        /// The topic.
        topic: String,
        /// The topic setting.
        setting: &'static str,
        /// Its value.
        found: String,
        /// The value mailer needs.
        needed: String,
        /// What the value found would lose.
        why: &'static str,
    },
    /// The topic has fewer replicas than `replication_factor` asks for.
    #[error(
        "topic `{topic}` has {found} replica(s) of a partition, but `[cluster] replication_factor = {asked}`: add replicas (`kafka-reassign-partitions.sh --bootstrap-server {brokers} ...`) or lower `replication_factor`, and start again"
    )]
    UnderReplicated {
        /// The brokers.
        brokers: String,
        /// The topic.
        topic: String,
        /// The fewest replicas of one of its partitions.
        found: usize,
        /// What the manifest asks for.
        asked: usize,
    },
}

/// Makes `topic` of `partitions` partitions and `replication` replicas,
/// set as what it `keeps` needs, within `timeout`: whether it was made now
/// (false: it was there already, its settings unchecked), or why not.
pub async fn create<C: ClientContext + 'static>(
    client: &AdminClient<C>,
    topic: &str,
    (partitions, replication): (usize, usize),
    keeps: Keeps,
    timeout: Duration,
) -> Result<bool, String> {
    let count = i32::try_from(partitions).map_err(|_| format!("{partitions} partitions are too many"))?;
    let factor = i32::try_from(replication).map_err(|_| format!("{replication} replicas are too many"))?;
    let mut new = NewTopic::new(topic, count, TopicReplication::Fixed(factor));
    for (name, value) in keeps.creation_configs() {
        new = new.set(name, value);
    }
    let options = AdminOptions::new().request_timeout(Some(timeout));
    let results = client
        .create_topics([&new], &options)
        .await
        .map_err(|e| format!("creating it with replication factor {replication}: {e}"))?;
    match results.into_iter().next() {
        Some(Ok(_)) => Ok(true),
        Some(Err((_, RDKafkaErrorCode::TopicAlreadyExists))) | None => Ok(false),
        Some(Err((_, code))) => Err(format!(
            "creating it with replication factor {replication}: {code}"
        )),
    }
}

/// `topic`'s settings as the brokers describe them (each name with its
/// value, defaults included). A broker that has not yet seen a topic just
/// made elsewhere answers without its settings: asked again until they
/// come (every topic has a `cleanup.policy`, default or not), within
/// `timeout`.
pub async fn describe<C: ClientContext + 'static>(
    client: &AdminClient<C>,
    topic: &str,
    timeout: Duration,
) -> Result<HashMap<String, String>, String> {
    let options = AdminOptions::new().request_timeout(Some(timeout));
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let described = client
            .describe_configs([&ResourceSpecifier::Topic(topic)], &options)
            .await
            .map_err(|e| format!("reading the topic's settings: {e}"))?;
        let config: HashMap<String, String> = match described.into_iter().next() {
            Some(Ok(config)) => config
                .entries
                .into_iter()
                .filter_map(|e| Some((e.name, e.value?)))
                .collect(),
            Some(Err(code)) => return Err(format!("reading the topic's settings: {code}")),
            None => HashMap::new(),
        };
        if config.contains_key("cleanup.policy") {
            return Ok(config);
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(format!(
                "reading the topic's settings: the brokers did not describe them within {timeout:?}"
            ));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Checks the settings `config` of `topic` (at `brokers`), which keeps
/// what `keeps` says: the first setting that would lose records, if any.
pub fn check_settings(
    brokers: &str,
    topic: &str,
    keeps: Keeps,
    config: &HashMap<String, String>,
) -> Result<(), Box<TopicSettingError>> {
    let value = |name: &str| config.get(name).map(String::as_str);
    let unsafe_setting = |setting: &'static str, needed: String, why: &'static str| {
        Err(Box::new(TopicSettingError::Unsafe {
            brokers: brokers.to_owned(),
            topic: topic.to_owned(),
            setting,
            found: value(setting).unwrap_or("(not set)").to_owned(),
            needed,
            why,
        }))
    };
    let policies: Vec<&str> = value("cleanup.policy")
        .unwrap_or("delete")
        .split(',')
        .map(str::trim)
        .collect();
    let (compacted, deletes) = (policies.contains(&"compact"), policies.contains(&"delete"));
    let unlimited = |name: &str| value(name).is_none_or(never_expires);
    match keeps {
        Keeps::NewestOfEachKey { tombstones_for } => {
            if !compacted {
                return unsafe_setting(
                    "cleanup.policy",
                    "compact".into(),
                    "without compaction the topic drops old records by age and size (`retention.ms`, `retention.bytes`) and the state or commits they hold are lost, or it grows without end",
                );
            }
            if deletes && !(unlimited("retention.ms") && unlimited("retention.bytes")) {
                return unsafe_setting(
                    "cleanup.policy",
                    "compact".into(),
                    "with `delete` too, records older than `retention.ms` or beyond `retention.bytes` are dropped, and the state or commits they hold are lost",
                );
            }
            if let Some(least) = tombstones_for {
                let kept_ms = value("delete.retention.ms").and_then(|v| v.parse::<i64>().ok());
                if kept_ms.is_some_and(|ms| ms >= 0 && (ms as u128) < least.as_millis()) {
                    return unsafe_setting(
                        "delete.retention.ms",
                        least.as_millis().to_string(),
                        "a state a process kept on disk for this long is brought up to date from the changelog, which must still hold the deletions made meanwhile",
                    );
                }
            }
        }
        Keeps::EveryRecord => {
            if compacted {
                return unsafe_setting(
                    "cleanup.policy",
                    "delete".into(),
                    "compaction drops every record of a key but its newest before its task reads them",
                );
            }
            if !unlimited("retention.ms") {
                return unsafe_setting(
                    "retention.ms",
                    "-1".into(),
                    "records keep their event time as their timestamp, so old history read again would expire before its task reads it (mailer deletes the records its group committed past itself)",
                );
            }
            if !unlimited("retention.bytes") {
                return unsafe_setting(
                    "retention.bytes",
                    "-1".into(),
                    "records not read yet would be dropped once a partition grows past it (mailer deletes the records its group committed past itself)",
                );
            }
        }
    }
    Ok(())
}

/// Whether a `retention.ms` or `retention.bytes` value keeps records for
/// good: -1 (or any negative), or Java's `Long.MAX_VALUE`.
fn never_expires(value: &str) -> bool {
    value.trim().parse::<i64>().is_ok_and(|v| v < 0 || v == i64::MAX)
}

/// The replication factor of a topic mailer makes: `asked`, else the
/// smaller of [`DEFAULT_REPLICATION`] and the `brokers` the cluster lists.
pub fn replication_factor(asked: Option<usize>, brokers: usize) -> usize {
    asked.unwrap_or_else(|| DEFAULT_REPLICATION.min(brokers.max(1)))
}

/// Checks the fewest replicas (`found`) of a partition of an existing
/// `topic` against what mailer asks for: refused below an `asked`
/// replication factor; below the default one only a warning, returned
/// (topics made before mailer set one keep working).
pub fn check_replication(
    brokers: &str,
    topic: &str,
    found: usize,
    (asked, listed_brokers): (Option<usize>, usize),
) -> Result<Option<String>, Box<TopicSettingError>> {
    let wanted = replication_factor(asked, listed_brokers);
    if found >= wanted {
        return Ok(None);
    }
    match asked {
        Some(asked) => Err(Box::new(TopicSettingError::UnderReplicated {
            brokers: brokers.to_owned(),
            topic: topic.to_owned(),
            found,
            asked,
        })),
        None => Ok(Some(format!(
            "topic `{topic}` has {found} replica(s) of a partition, fewer than the {wanted} mailer makes its topics with: a broker lost loses what it holds. Add replicas (`kafka-reassign-partitions.sh`); in cluster mode, `[cluster] replication_factor = {found}` says fewer are meant"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    const STATE: Keeps = Keeps::NewestOfEachKey {
        tombstones_for: Some(Duration::from_secs(12 * 3600)),
    };

    #[test]
    fn a_state_topic_must_be_compacted_and_never_expire() {
        let check =
            |pairs: &[(&str, &str)]| check_settings("b:9092", "p.counts.changelog", STATE, &config(pairs));
        assert_eq!(check(&[("cleanup.policy", "compact")]), Ok(()));
        assert_eq!(
            check(&[("cleanup.policy", "compact,delete"), ("retention.ms", "-1")]),
            Ok(())
        );
        let err = check(&[("cleanup.policy", "delete"), ("retention.ms", "604800000")]).unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("topic `p.counts.changelog` has `cleanup.policy=delete`")
                && text.contains("needs `cleanup.policy=compact`")
                && text.contains("--entity-name p.counts.changelog --add-config cleanup.policy=compact"),
            "{text}"
        );
        assert!(check(&[("cleanup.policy", "compact, delete"), ("retention.ms", "1000")]).is_err());
        assert!(
            check(&[
                ("cleanup.policy", "compact,delete"),
                ("retention.ms", "-1"),
                ("retention.bytes", "1000")
            ])
            .is_err()
        );
        // No policy said: Kafka's default, delete.
        assert!(check(&[]).is_err());
        let short = check(&[("cleanup.policy", "compact"), ("delete.retention.ms", "3600000")]).unwrap_err();
        assert!(
            short
                .to_string()
                .contains("`delete.retention.ms=3600000`, but mailer needs `delete.retention.ms=43200000`"),
            "{short}"
        );
        let commits = Keeps::NewestOfEachKey { tombstones_for: None };
        assert_eq!(
            check_settings(
                "b",
                "t",
                commits,
                &config(&[("cleanup.policy", "compact"), ("delete.retention.ms", "0")])
            ),
            Ok(())
        );
    }

    #[test]
    fn a_repartition_topic_must_keep_every_record() {
        let check = |pairs: &[(&str, &str)]| {
            check_settings("b", "p.counts.repartition", Keeps::EveryRecord, &config(pairs))
        };
        let made: Vec<(&str, &str)> = Keeps::EveryRecord.creation_configs().to_vec();
        assert_eq!(check(&made[..]), Ok(()));
        assert_eq!(
            check(&[
                ("cleanup.policy", "delete"),
                ("retention.ms", "9223372036854775807")
            ]),
            Ok(())
        );
        for bad in [
            &[("cleanup.policy", "compact")][..],
            &[("cleanup.policy", "delete"), ("retention.ms", "604800000")],
            &[("retention.ms", "-1"), ("retention.bytes", "1073741824")],
        ] {
            assert!(check(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn the_replication_factor_is_asked_or_three_at_most() {
        assert_eq!(replication_factor(None, 1), 1);
        assert_eq!(replication_factor(None, 2), 2);
        assert_eq!(replication_factor(None, 5), 3);
        assert_eq!(replication_factor(Some(2), 5), 2);
        assert_eq!(replication_factor(None, 0), 1);
        assert_eq!(check_replication("b", "t", 3, (None, 3)), Ok(None));
        assert!(
            check_replication("b", "t", 1, (None, 3))
                .unwrap()
                .is_some_and(|w| w.contains("fewer than the 3"))
        );
        let refused = check_replication("b", "t", 1, (Some(2), 3)).unwrap_err();
        assert!(
            refused.to_string().contains(
                "topic `t` has 1 replica(s) of a partition, but `[cluster] replication_factor = 2`"
            ),
            "{refused}"
        );
    }
}
