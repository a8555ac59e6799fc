//! A process of the cluster: it makes the repartition topics when missing,
//! joins the group with one consumer and one (transactional) producer, and
//! runs what the group gives it on this thread until stopped — polling,
//! running tasks, committing every `commit_interval`, committing before
//! partitions leave. On a stop it commits once more and leaves the group,
//! which hands its partitions to the others.

use super::engine::{Engine, EngineParts};
use super::error::ClusterError;
use super::member::{GroupMember, MemberContext, Membership, RebalanceListener, TopicPartition};
use super::member_folder::MemberFolder;
use super::topics::{ClusterTopics, TopicRole, topic_name};
use crate::connectors::kafka::{
    FaultLog, KafkaSinkSpec, Reported, consumer_recovers, producer_config, set_transactional,
};
use crate::plan::{ClusterSettings, Plan};
use crate::runtime::{Control, RunReport, Shutdown};
use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::producer::{BaseProducer, Producer};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

const TIMEOUT: Duration = Duration::from_secs(30);

/// How often processing-time timers are served.
const PROCESSING_TIME_TICK: Duration = Duration::from_millis(100);

/// How often a process keeping standbys reads the group's description to
/// pick them again.
const STANDBY_PICK: Duration = Duration::from_secs(2);

/// The engine, shared with the rebalance callbacks (which run inside the
/// member's polls, on the same thread).
#[derive(Clone)]
struct Shared(Arc<Mutex<Engine>>);

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Engine> {
        self.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl RebalanceListener for Shared {
    fn revoking(&self, partitions: &[TopicPartition], consumer: &BaseConsumer<MemberContext<Self>>) {
        tracing::info!(partitions = %names(partitions), "the group takes partitions away: committing first");
        let mut engine = self.lock();
        #[cfg(debug_assertions)]
        crate::runtime::test_hooks::in_revoke();
        match engine.commit_unless_moved_on(consumer) {
            Ok(true) => engine.revoked(partitions),
            Ok(false) => {}
            Err(e) => engine.fail(e),
        }
    }

    fn lost(&self, partitions: &[TopicPartition]) {
        tracing::warn!(partitions = %names(partitions), "the group took partitions without a revoke (this process was silent too long): its uncommitted work is dropped, and it rejoins");
        let mut engine = self.lock();
        if let Err(e) = engine.lost() {
            engine.fail(e);
        }
    }

    fn assigned(&self, partitions: &[TopicPartition], consumer: &BaseConsumer<MemberContext<Self>>) {
        tracing::info!(partitions = %names(partitions), "the group gives partitions");
        let mut engine = self.lock();
        // A cooperative rebalance revokes nothing from a member it gives
        // partitions to: what its open transaction holds is committed
        // first, since restoring the new tasks may take longer than a
        // transaction may stay open (the brokers would abort it).
        let assigned = match engine.commit_unless_moved_on(consumer) {
            Ok(true) => engine
                .check_positions(consumer, partitions)
                .and_then(|()| engine.assigned(partitions)),
            Ok(false) => Ok(()),
            Err(e) => Err(e),
        };
        if let Err(e) = assigned {
            engine.fail(e);
        }
    }
}

fn names(partitions: &[TopicPartition]) -> String {
    let names: Vec<String> = partitions.iter().map(|(t, p)| format!("{t}/{p}")).collect();
    names.join(", ")
}

/// Runs `plan` (which has cluster settings) as one process of its cluster
/// until `shutdown` stops it or it fails; the process's admin API, when it
/// serves one at `admin`, is published in its `client.id`, and the plugin
/// swaps it asks for through `control` apply at the next commit.
pub fn run(
    mut plan: Plan,
    admin: Option<SocketAddr>,
    shutdown: &Shutdown,
    control: &Control,
) -> Result<RunReport, ClusterError> {
    let started = Instant::now();
    let settings = plan.cluster.clone().expect("a cluster plan");
    let source = settings.brokers();
    let mut client = brokers_config(&settings);
    client.set(
        "session.timeout.ms",
        settings.session_timeout.as_millis().to_string(),
    );
    if !source.options.contains_key("fetch.wait.max.ms") {
        client.set("fetch.wait.max.ms", "20");
    }
    let topics = ClusterTopics::connect(&client)?.with_replication(settings.replication_factor);
    let source_topics: Vec<&String> = settings.sources.iter().flat_map(|s| &s.topics).collect();
    let mut source_partitions = Vec::new();
    for &topic in &source_topics {
        for p in topics.partitions(topic)? {
            source_partitions.push((topic.clone(), p));
        }
    }
    let widest = source_topics
        .iter()
        .map(|&t| source_partitions.iter().filter(|(s, _)| s == t).count());
    let repartition_partitions = settings
        .repartition_partitions
        .map_or_else(|| widest.max().unwrap_or(1), |n| n as usize);
    for (_, by) in settings.keyed_parts() {
        let topic = topic_name(&plan.name, by, TopicRole::Repartition)?;
        topics.ensure(&topic, repartition_partitions, TopicRole::Repartition)?;
    }
    let member_name = settings
        .instance_id
        .clone()
        .unwrap_or_else(|| format!("pid-{}-{}", std::process::id(), crate::clock::now_ms()));
    isolate_state(&mut plan, &member_name);
    // Dropped last: after the engine closed its databases.
    let _folder = MemberFolder::take(&plan, &member_name)?;
    let client_id = super::member::client_id(&plan.name, &member_name, admin);
    let producer = producer(&settings, &member_name)?;
    let pipeline = plan.name.clone();
    let engine = Shared(Arc::new(Mutex::new(Engine::new(EngineParts {
        plan,
        producer,
        client: client.clone(),
        topics,
        source_partitions,
        repartition_partitions,
        client_id: client_id.clone(),
    })?)));
    let subscriptions = engine.lock().subscriptions();
    let member = GroupMember::join(
        client,
        &Membership {
            group: &settings.group,
            instance_id: settings
                .instance_id
                .as_deref()
                .filter(|_| settings.static_membership),
            client_id: &client_id,
            topics: &subscriptions,
            rebalancing: settings.rebalancing,
        },
        engine.clone(),
    )?;
    tracing::info!(pipeline = %pipeline, group = %settings.group, member = %member_name, "joined the cluster");
    let result = serve(&member, &engine, &settings, (shutdown, control));
    // Moved on without it: whoever holds the partitions now resumes from
    // the last commit.
    let result = result.and_then(|()| engine.lock().commit_unless_moved_on(member.consumer()).map(drop));
    // Leaving the group revokes what is left (committed just now).
    drop(member);
    let mut engine = engine.lock();
    engine.close();
    result?;
    let (source_records, sink_records) = engine.counts;
    Ok(RunReport {
        source_records,
        sink_records,
        cancelled: shutdown.is_cancelled(),
        elapsed: started.elapsed(),
        ..RunReport::default()
    })
}

/// Polls, runs and commits until `shutdown` or a failure; the swaps
/// `control` holds apply just after a commit.
fn serve(
    member: &GroupMember<Shared>,
    engine: &Shared,
    settings: &ClusterSettings,
    (shutdown, control): (&Shutdown, &Control),
) -> Result<(), ClusterError> {
    let consumer = member.consumer();
    let batch = engine.lock().batch_size();
    let (mut last_commit, mut last_tick) = (Instant::now(), Instant::now());
    let mut last_pick = Instant::now();
    let keeps_standbys = engine.lock().keeps_standbys();
    let mut faults = FaultLog::default();
    while !shutdown.is_cancelled() {
        if keeps_standbys && last_pick.elapsed() >= STANDBY_PICK {
            if let Some(members) = stable_members(consumer, &settings.group) {
                engine.lock().follow_group(&members)?;
            }
            last_pick = Instant::now();
        }
        let mut polled = 0;
        while polled < batch {
            let wait = if polled == 0 {
                Duration::from_millis(100)
            } else {
                Duration::ZERO
            };
            let polled_now = consumer.poll(wait);
            if engine.lock().take_rejoin() {
                // Whatever this poll returned is past what may be
                // committed: the group gives the partitions anew.
                member.rejoin()?;
                break;
            }
            match polled_now {
                None => break,
                Some(Ok(msg)) => {
                    polled += 1;
                    let mut engine = engine.lock();
                    if let Some(e) = engine.take_failure() {
                        return Err(e);
                    }
                    engine.on_message(&msg)?;
                }
                Some(Err(e)) if consumer_recovers(&e) => {
                    if faults.due() {
                        tracing::warn!(error = %e, "the cluster's consumer reported a fault it rides out; it goes on");
                    }
                }
                Some(Err(e)) => {
                    if faults.due() {
                        tracing::error!(error = %e, "the cluster's consumer reported an error; it retries (repeats of it are logged every 10 s)");
                    }
                }
            }
        }
        let mut engine = engine.lock();
        if let Some(e) = engine.take_failure() {
            return Err(e);
        }
        engine.flush()?;
        engine.answer_queries(control.take_queries());
        if keeps_standbys {
            engine.catch_up_standbys(batch)?;
        }
        if last_tick.elapsed() >= PROCESSING_TIME_TICK {
            engine.on_processing_time(crate::clock::now_ms())?;
            last_tick = Instant::now();
        }
        if last_commit.elapsed() >= settings.commit_interval {
            if engine.commit_unless_moved_on(consumer)? {
                engine.swap_plugins(control.take_swaps())?;
            }
            last_commit = Instant::now();
        }
    }
    Ok(())
}

/// The group's members (each `client.id` and assignment) when the group is
/// stable; none while it rebalances or cannot be described (the standbys
/// stay as they are until the next try).
fn stable_members<C: ConsumerContext>(
    consumer: &BaseConsumer<C>,
    group: &str,
) -> Option<Vec<(String, Vec<TopicPartition>)>> {
    let groups = consumer
        .fetch_group_list(Some(group), Duration::from_secs(5))
        .inspect_err(
            |e| tracing::debug!(error = %e, "the group cannot be described; standbys stay as they are"),
        )
        .ok()?;
    let described = groups.groups().iter().find(|g| g.name() == group)?;
    if described.state() != "Stable" {
        return None;
    }
    let members = described
        .members()
        .iter()
        .map(|m| {
            let assigned = m
                .assignment()
                .map(super::status::assigned_partitions)
                .unwrap_or_default();
            (m.client_id().to_owned(), assigned)
        })
        .collect();
    Some(members)
}

/// The client settings of the cluster's brokers: the first source's.
pub(super) fn brokers_config(settings: &ClusterSettings) -> ClientConfig {
    let source = settings.brokers();
    crate::connectors::kafka::client_config(
        &source.bootstrap_servers,
        source.security.as_ref(),
        &source.options,
    )
}

/// With RocksDB, each process keeps its tasks' databases in a folder of
/// its own (processes of one machine share the manifest's `path`).
fn isolate_state(plan: &mut Plan, member: &str) {
    if let crate::state::BackendKind::Rocks { dir, .. } = &mut plan.state {
        *dir = dir.join(member);
    }
}

/// The process's producer: transactional with `exactly_once` (its id is
/// the member's, so a restarted process fences the one it replaces), its
/// first transaction begun.
fn producer(settings: &ClusterSettings, member: &str) -> Result<BaseProducer<Reported>, ClusterError> {
    let sink: &KafkaSinkSpec = &settings.sink;
    let brokers = sink.bootstrap_servers.value().to_owned();
    let failed = |what: &str| ClusterError::kafka(&brokers, what.to_owned());
    let mut config: ClientConfig = producer_config(sink);
    if sink.exactly_once {
        // An open transaction of a killed process holds readers back until
        // the brokers abort it: a short timeout by default.
        let timeout = (settings.commit_interval * 4).max(Duration::from_secs(10));
        let id = format!("mailer.{}.{member}", settings.group);
        set_transactional(&mut config, sink, &id, timeout);
    }
    let producer: BaseProducer<Reported> = config
        .create_with_context(Reported::default())
        .map_err(failed("making the producer"))?;
    if sink.exactly_once {
        producer
            .init_transactions(TIMEOUT)
            .map_err(failed("starting transactions (fencing an earlier instance)"))?;
        producer
            .begin_transaction()
            .map_err(failed("beginning a transaction"))?;
    }
    Ok(producer)
}
