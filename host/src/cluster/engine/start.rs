//! How a process's engine starts: its source parts, its keyed tasks and
//! their restores, its producer and the topics it writes, from the plan's
//! parts and what the group committed.

use super::*;

impl Engine {
    /// An engine with no partitions yet.
    pub fn new(parts: EngineParts) -> Result<Self, ClusterError> {
        let EngineParts {
            mut plan,
            producer,
            client,
            topics,
            source_partitions,
            repartition_partitions,
            client_id,
        } = parts;
        let mut settings = plan.cluster.take().expect("a cluster plan");
        let sources = settings.sources.len();
        let route = |feed: Option<Feed>| {
            feed.map(|f| Route {
                keyed: f.part - sources,
                input: f.input,
            })
        };
        let mut source_of = HashMap::new();
        for (i, spec) in settings.sources.iter().enumerate() {
            for topic in &spec.topics {
                source_of.insert(topic.clone(), i);
            }
        }
        // The tasks feeding each part's tasks.
        let mut upstream = vec![0; settings.parts.len()];
        for part in &settings.parts {
            let tasks = match part.reads {
                PartInput::Source(i) => source_partitions
                    .iter()
                    .filter(|(t, _)| source_of[t] == i)
                    .count(),
                PartInput::Repartition { .. } => repartition_partitions,
            };
            if let Some(feed) = part.feeds {
                upstream[feed.part] += tasks;
            }
        }
        let mut source_parts = Vec::new();
        let mut keyed = Vec::new();
        for (k, part) in std::mem::take(&mut settings.parts).into_iter().enumerate() {
            match &part.reads {
                PartInput::Source(i) => {
                    let (name, spec) = (&plan.sources[*i].name, &settings.sources[*i]);
                    let chains = PartChains::instantiate(&plan, &part, (0, 1), None).map_err(|cause| {
                        ClusterError::Task {
                            task: format!("source `{name}`"),
                            cause: Box::new(cause),
                        }
                    })?;
                    source_parts.push(SourcePart {
                        chains,
                        reader: RecordReader::of(spec),
                        rejects: FailureHandler::new(name, spec.on_error, None, Default::default()),
                        pending: Vec::new(),
                        route: route(part.feeds),
                    });
                }
                PartInput::Repartition { by } => {
                    let topic = topic_name(&plan.name, by, TopicRole::Repartition)?;
                    keyed.push(KeyedPart {
                        route: route(part.feeds),
                        part,
                        topic,
                        partitions: repartition_partitions,
                        upstream: upstream[k],
                        tasks: BTreeMap::new(),
                    });
                }
            }
        }
        let mut topics_in_order: Vec<&String> = source_of.keys().collect();
        topics_in_order.sort();
        let source_topics = topics_in_order
            .into_iter()
            .enumerate()
            .map(|(i, t)| (t.clone(), i))
            .collect();
        // Each keyed part's repartition topic and changelog topics: the
        // plan's shape, and what standbys keep warm.
        let mut parts = Vec::new();
        for k in &keyed {
            let changelogs =
                changelog_topics(&plan, &k.part, k.partitions).map_err(|cause| ClusterError::Task {
                    task: k.topic.clone(),
                    cause: Box::new(cause),
                })?;
            parts.push((k.topic.clone(), changelogs));
        }
        let changelogs: Vec<String> = parts.iter().flat_map(|(_, c)| c.clone()).collect();
        // Made, or checked, before the process joins: one that would lose
        // state stops it at once.
        let mut ensured = HashSet::new();
        for changelog in &changelogs {
            topics.ensure(changelog, repartition_partitions, TopicRole::Changelog)?;
            ensured.insert(changelog.clone());
        }
        let purge = RepartitionPurge::new(keyed.iter().map(|k| k.topic.clone()), settings.purge_interval);
        let standby = match settings.standby_replicas {
            0 => None,
            replicas => {
                let warm = WarmStates::new(&client, &settings.group).map_err(ClusterError::kafka(
                    settings.brokers().bootstrap_servers.value(),
                    "making the standby states' consumer".to_owned(),
                ))?;
                Some(Standbys::new(warm, replicas, client_id, parts))
            }
        };
        let brokers = settings.brokers().bootstrap_servers.value();
        let committed = CommittedPartitions::new(&plan.name, &settings.group, brokers)?;
        topics.ensure(committed.topic(), 1, TopicRole::Committed)?;
        let shape = PlanShape {
            key_groups: plan.key_groups,
            changelogs,
        };
        if committed.check_shape(&client, &producer, &shape)? {
            // Committed at once: an open transaction would hold back
            // every reader of the topic, this process's too.
            let kafka = |what: &str| ClusterError::kafka(brokers, what.to_owned());
            if settings.sink.exactly_once {
                producer
                    .commit_transaction(TIMEOUT)
                    .map_err(kafka("committing the plan's record"))?;
                producer
                    .begin_transaction()
                    .map_err(kafka("beginning a transaction"))?;
            } else {
                producer
                    .flush(TIMEOUT)
                    .map_err(kafka("writing the plan's record"))?;
            }
        }
        Ok(Self {
            brokers: brokers.to_owned(),
            committed,
            exactly_once: settings.sink.exactly_once,
            sink_topic: settings.sink.topic.clone(),
            sink_partition: settings.sink.partition,
            delay: plan.watermark.map(|w| w.delay.as_millis() as i64),
            idle_timeout: plan.watermark.and_then(|w| w.idle_timeout),
            // A process without a stable name never finds its folder again.
            kept: settings
                .instance_id
                .as_ref()
                .and_then(|_| KeptStates::of(&plan.state)),
            plan,
            producer,
            client,
            topics,
            ensured,
            purge,
            source_parts,
            source_of,
            source_topics,
            sources: HashMap::new(),
            marks_written: Instant::now(),
            keyed,
            swapped: Vec::new(),
            standby,
            dirty: false,
            failed: None,
            rejoin: false,
            counts: (0, 0),
        })
    }
}
