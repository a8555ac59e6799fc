//! Warm copies of keyed tasks' state (`standby_replicas`): states this
//! process keeps up to date by reading their changelogs, so that a task the
//! group gives it starts from them and restores only the few records
//! written since. A process keeps warm the tasks a rendezvous hash over the
//! group's members picks for it among those other members run, and, until
//! the next such pick, the tasks revoked from it (an eager rebalance hands
//! most of them straight back).

use super::kept::KeptMark;
use super::member::TopicPartition;
use super::restore::WATERMARK_ENTRY;
use crate::connectors::kafka::{FaultLog, consumer_recovers};
use crate::state::{StateBackend, StateError};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::{ClientConfig, Offset, TopicPartitionList};
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

/// One keyed operator's state of one task, kept warm.
struct Warm {
    state: Box<dyn StateBackend>,
    /// Where it stands in the changelog: everything before is applied.
    mark: KeptMark,
    /// Whether it reached its changelog's end once (each copy logs it).
    caught_up: bool,
}

/// Why warm states cannot be kept up to date.
#[derive(Debug, thiserror::Error)]
pub enum StandbyError {
    /// The changelogs cannot be read.
    #[error("keeping standby states warm: {0}")]
    Read(#[from] KafkaError),
    /// A backend refused a record.
    #[error("keeping standby states warm: changelog `{topic}`: {source}")]
    State {
        /// The changelog.
        topic: String,
        /// What the backend said.
        source: StateError,
    },
}

/// The warm states of this process, by changelog partition (a keyed
/// operator's topic, the task's partition), and the consumer reading them
/// (`read_committed`, no group).
pub struct WarmStates {
    consumer: BaseConsumer,
    warm: BTreeMap<TopicPartition, Warm>,
    /// Whether the consumer's assignment must follow `warm` again.
    reassign: bool,
    /// When new standbys were last checked for having caught up.
    last_report: Instant,
    /// Faults the consumer rides out, logged now and then.
    faults: FaultLog,
}

impl WarmStates {
    /// No warm state yet; changelogs are read with `client`'s settings.
    pub fn new(client: &ClientConfig, group: &str) -> Result<Self, KafkaError> {
        let mut config = client.clone();
        config
            .set("group.id", format!("{group}.standby"))
            .set("enable.auto.commit", "false")
            .set("isolation.level", "read_committed");
        Ok(Self {
            consumer: config.create()?,
            warm: BTreeMap::new(),
            reassign: false,
            last_report: Instant::now(),
            faults: FaultLog::default(),
        })
    }

    /// Keeps `state`, the state changelog partition `at` holds up to
    /// `mark`, warm from now on.
    pub fn put(&mut self, at: TopicPartition, state: Box<dyn StateBackend>, mark: KeptMark) {
        let warm = Warm {
            state,
            mark,
            caught_up: false,
        };
        self.warm.insert(at, warm);
        self.reassign = true;
    }

    /// Starts a standby of changelog partition `at` in `state` (empty),
    /// from the changelog's start.
    fn start(&mut self, at: TopicPartition, state: Box<dyn StateBackend>) {
        let mark = KeptMark {
            next_offset: 0,
            watermark: None,
        };
        self.put(at, state, mark);
    }

    /// Takes the warm state of changelog partition `at`, if this process
    /// has it.
    pub fn take(&mut self, at: &TopicPartition) -> Option<(Box<dyn StateBackend>, KeptMark)> {
        let warm = self.warm.remove(at)?;
        self.reassign = true;
        Some((warm.state, warm.mark))
    }

    /// The changelog partitions kept warm.
    pub fn partitions(&self) -> BTreeSet<TopicPartition> {
        self.warm.keys().cloned().collect()
    }

    /// Drops the warm state of every changelog partition `keep` refuses.
    pub fn retain(&mut self, keep: &dyn Fn(&TopicPartition) -> bool) {
        let before = self.warm.len();
        self.warm.retain(|at, _| keep(at));
        if self.warm.len() != before {
            self.reassign = true;
            tracing::info!(
                dropped = before - self.warm.len(),
                kept = self.warm.len(),
                "standby states dropped"
            );
        }
    }

    /// Applies what the changelogs hold past each warm state, at most
    /// `max` records, without waiting; how many it applied.
    pub fn catch_up(&mut self, max: usize) -> Result<usize, StandbyError> {
        if self.reassign {
            let mut list = TopicPartitionList::new();
            for ((topic, task), warm) in &self.warm {
                list.add_partition_offset(topic, *task, Offset::Offset(warm.mark.next_offset))?;
            }
            self.consumer.assign(&list)?;
            self.reassign = false;
        }
        let mut applied = 0;
        while applied < max && !self.warm.is_empty() {
            let Some(polled) = self.consumer.poll(Duration::ZERO) else {
                self.report_caught_up();
                break;
            };
            let m = match polled {
                Ok(m) => m,
                Err(e) if consumer_recovers(&e) => {
                    if self.faults.due() {
                        tracing::warn!(error = %e, "standby copies: the consumer rides out a fault");
                    }
                    break;
                }
                Err(e) => return Err(e.into()),
            };
            let at = (m.topic().to_owned(), m.partition());
            let Some(warm) = self.warm.get_mut(&at) else {
                continue;
            };
            if m.offset() < warm.mark.next_offset {
                continue;
            }
            let entry = m.key().unwrap_or_default();
            if entry == WATERMARK_ENTRY {
                warm.mark.watermark = m
                    .payload()
                    .and_then(|v| Some(i64::from_le_bytes(v.try_into().ok()?)));
            } else {
                let applied = match m.payload() {
                    Some(v) => warm.state.put(entry, v),
                    None => warm.state.delete(entry),
                };
                applied.map_err(|source| StandbyError::State { topic: at.0, source })?;
            }
            warm.mark.next_offset = m.offset() + 1;
            applied += 1;
        }
        Ok(applied)
    }
}

/// Opens an empty state for the standby of a changelog partition.
pub type StandbyOpener<'a> = dyn Fn(&TopicPartition) -> Result<Box<dyn StateBackend>, StateError> + 'a;

impl WarmStates {
    /// Logs each warm copy that reached its changelog's end for the first
    /// time (checked at most once a second, while some have not).
    fn report_caught_up(&mut self) {
        if self.warm.values().all(|w| w.caught_up) || self.last_report.elapsed() < Duration::from_secs(1) {
            return;
        }
        self.last_report = Instant::now();
        let Ok(positions) = self.consumer.position() else {
            return;
        };
        for ((topic, p), warm) in self.warm.iter_mut().filter(|(_, w)| !w.caught_up) {
            let position = positions
                .find_partition(topic, *p)
                .and_then(|e| e.offset().to_raw());
            let Ok((_, end)) = self.consumer.fetch_watermarks(topic, *p, Duration::from_secs(1)) else {
                continue;
            };
            let at = position.unwrap_or(0).max(warm.mark.next_offset);
            if at >= end {
                warm.caught_up = true;
                tracing::info!(changelog = %topic, partition = p, offset = end, "standby caught up with its changelog");
            }
        }
    }
}

/// The standby replicas of one process: which tasks it keeps warm, picked
/// again from the group's description as it changes, and their states.
pub struct Standbys {
    /// The states.
    pub warm: WarmStates,
    replicas: usize,
    /// This process's `client.id`, as the group describes it.
    me: String,
    /// Each keyed part's repartition topic and changelog topics.
    parts: Vec<(String, Vec<String>)>,
}

impl Standbys {
    /// Member `me` keeps `replicas` standbys of each task of `parts` (each
    /// keyed part's repartition topic and changelog topics) in `warm`.
    pub fn new(warm: WarmStates, replicas: usize, me: String, parts: Vec<(String, Vec<String>)>) -> Self {
        Self {
            warm,
            replicas,
            me,
            parts,
        }
    }

    /// Keeps warm what the group's `members` (as a stable group describes
    /// them: each `client.id` and assignment) give this process: the
    /// standbys it picks, and the states of tasks the group has just given
    /// it (about to be taken); every other state is dropped, and a new
    /// standby starts empty from `open`, at its changelog's start.
    pub fn follow(
        &mut self,
        members: &[(String, Vec<TopicPartition>)],
        open: &StandbyOpener<'_>,
    ) -> Result<(), StandbyError> {
        let wanted = standby_partitions(&self.me, members, &self.parts, self.replicas);
        let mut running = BTreeSet::new();
        for (topic, p) in members
            .iter()
            .filter(|(id, _)| *id == self.me)
            .flat_map(|(_, a)| a)
        {
            for (_, changelogs) in self.parts.iter().filter(|(t, _)| t == topic) {
                running.extend(changelogs.iter().map(|c| (c.clone(), *p)));
            }
        }
        // A task no member holds is moving (a member left and the group
        // has not handed its tasks out yet): its copy may be needed here.
        let owned: BTreeSet<&TopicPartition> = members.iter().flat_map(|(_, a)| a).collect();
        let parts = &self.parts;
        let moving = |(changelog, p): &TopicPartition| {
            let part = parts.iter().find(|(_, c)| c.contains(changelog));
            part.is_some_and(|(topic, _)| !owned.contains(&(topic.clone(), *p)))
        };
        self.warm
            .retain(&|at| wanted.contains(at) || running.contains(at) || moving(at));
        let have = self.warm.partitions();
        let new: Vec<&TopicPartition> = wanted.difference(&have).collect();
        for at in &new {
            let state = open(at).map_err(|source| StandbyError::State {
                topic: at.0.clone(),
                source,
            })?;
            self.warm.start((*at).clone(), state);
        }
        if !new.is_empty() {
            tracing::info!(
                started = new.len(),
                standbys = wanted.len(),
                "standby states started"
            );
        }
        Ok(())
    }
}

/// The changelog partitions whose standby member `me` keeps: for each
/// keyed task another member runs (a partition of a repartition topic in
/// its assignment), the `replicas` members other than its owner that score
/// highest for it (rendezvous hashing, so a member joining or leaving moves
/// few standbys) keep one of each of its changelogs. `parts` are each
/// keyed part's repartition topic and changelog topics; `members` each
/// member's `client.id` and assignment.
pub fn standby_partitions(
    me: &str,
    members: &[(String, Vec<TopicPartition>)],
    parts: &[(String, Vec<String>)],
    replicas: usize,
) -> BTreeSet<TopicPartition> {
    let mut mine = BTreeSet::new();
    for (owner, assigned) in members.iter().filter(|(id, _)| id != me) {
        for (topic, p) in assigned {
            let Some((_, changelogs)) = parts.iter().find(|(t, _)| t == topic) else {
                continue;
            };
            let mut ranked: Vec<(u64, &str)> = members
                .iter()
                .filter(|(id, _)| id != owner)
                .map(|(id, _)| (score(id, topic, *p), id.as_str()))
                .collect();
            ranked.sort_unstable_by(|a, b| b.cmp(a));
            if ranked.iter().take(replicas).any(|(_, id)| *id == me) {
                mine.extend(changelogs.iter().map(|c| (c.clone(), *p)));
            }
        }
    }
    mine
}

/// Member `member`'s score for task `p` of `topic`: FNV-1a, mixed, the
/// same in every process.
fn score(member: &str, topic: &str, p: i32) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in member
        .bytes()
        .chain([0])
        .chain(topic.bytes())
        .chain([0])
        .chain(p.to_le_bytes())
    {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    crate::connectors::splitmix64(h)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn members(n: usize) -> Vec<(String, Vec<TopicPartition>)> {
        // Member i runs tasks i, i + n, i + 2n, … of 12.
        (0..n)
            .map(|i| {
                let tasks = (i..12)
                    .step_by(n)
                    .map(|p| ("wc.counts.repartition".to_owned(), p as i32));
                (format!("member-{i}"), tasks.collect())
            })
            .collect()
    }

    fn parts() -> Vec<(String, Vec<String>)> {
        vec![(
            "wc.counts.repartition".to_owned(),
            vec!["wc.counts.changelog".to_owned()],
        )]
    }

    #[test]
    fn each_task_has_its_replicas_on_members_other_than_its_owner() {
        for replicas in 1..=2 {
            let group = members(3);
            let mut holders: BTreeMap<i32, Vec<&str>> = BTreeMap::new();
            for (me, assigned) in &group {
                let mine = standby_partitions(me, &group, &parts(), replicas);
                for (topic, p) in mine {
                    assert_eq!(topic, "wc.counts.changelog");
                    assert!(
                        !assigned.contains(&("wc.counts.repartition".to_owned(), p)),
                        "{me} runs {p}"
                    );
                    holders.entry(p).or_default().push(me);
                }
            }
            assert_eq!(holders.len(), 12);
            assert!(holders.values().all(|h| h.len() == replicas), "{holders:?}");
        }
    }

    #[test]
    fn a_member_leaving_moves_only_the_standbys_it_kept() {
        let before = members(3);
        let mut after = before.clone();
        // member-2 leaves; its tasks go to member-0.
        let (_, orphaned) = after.pop().unwrap();
        after[0].1.extend(orphaned.clone());
        let kept_by =
            |group: &[(String, Vec<TopicPartition>)], me: &str| standby_partitions(me, group, &parts(), 1);
        let was = kept_by(&before, "member-1");
        let now = kept_by(&after, "member-1");
        // member-1 keeps every standby it kept of member-0's tasks.
        for (topic, p) in &was {
            if before[0].1.iter().any(|(_, q)| q == p) {
                assert!(now.contains(&(topic.clone(), *p)), "task {p}");
            }
        }
        assert!(standby_partitions("member-1", &[], &parts(), 1).is_empty());
    }
}
