//! Tasks arriving in a process and leaving it: an assigned task's state
//! (from a standby copy, a kept state or empty) restored from its
//! changelogs before it runs; a revoked task's state kept on disk and warm;
//! the standby copies this process keeps; plugin swaps, applied to every
//! task at a commit and to the tasks assigned later.

use super::{Engine, TIMEOUT};
use crate::cluster::error::ClusterError;
use crate::cluster::kept::KeptMark;
use crate::cluster::member::TopicPartition;
use crate::cluster::restore::restore_task;
use crate::cluster::task::{KeyedTask, open_kept};
use crate::cluster::topics::TopicRole;
use crate::connectors::kafka::watermarks;
use crate::state::StateQuery;
use crate::swap::SwapPoint;
use rdkafka::producer::Producer;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

impl Engine {
    /// `partitions` are this process's now: each source partition becomes
    /// a source task, each repartition partition a keyed task, its state
    /// restored from its changelogs (after the warm or kept copy this
    /// process has, when it has one).
    pub fn assigned(&mut self, partitions: &[TopicPartition]) -> Result<(), ClusterError> {
        #[cfg(debug_assertions)]
        if partitions
            .iter()
            .any(|(t, _)| self.keyed.iter().any(|k| &k.topic == t))
            && (!self.sources.is_empty() || self.keyed.iter().any(|k| !k.tasks.is_empty()))
        {
            crate::runtime::test_hooks::before_restore(partitions);
        }
        self.assigned_sources(partitions);
        for (topic, p) in partitions {
            let Some(k) = self.keyed.iter().position(|k| &k.topic == topic) else {
                continue;
            };
            let started = Instant::now();
            let part = &self.keyed[k];
            let task_name = format!("{topic}/{p}");
            let (plan, kept, standby) = (&self.plan, self.kept.as_ref(), &mut self.standby);
            // A standby's state is the newest; a kept one may be older.
            let mut warm = |changelog: &str, name: &str| {
                let copy = standby
                    .as_mut()
                    .and_then(|s| s.warm.take(&(changelog.to_owned(), *p)));
                copy.or_else(|| open_kept(plan, kept, name, *p as usize))
            };
            let mut task = KeyedTask::new(
                plan,
                &part.part,
                (*p as usize, part.partitions),
                part.upstream,
                &mut warm,
            )
            .map_err(|cause| ClusterError::Task {
                task: task_name.clone(),
                cause: Box::new(cause),
            })?;
            for swap in &self.swapped {
                let switched = task.chains.on_swap(swap)?;
                swap.switched(switched);
            }
            task.stats = self.plan.telemetry.task_started(task_name.clone());
            task.stats.restoring.store(true, Ordering::Relaxed);
            let (mut restored, mut from_offset, mut to_restore) = (0, 0, 0);
            for log in &task.changelogs {
                if self.ensured.insert(log.topic.clone()) {
                    self.topics
                        .ensure(&log.topic, part.partitions, TopicRole::Changelog)?;
                }
                let mut state = log.state.lock();
                let from = log.kept.map_or(0, |k| k.next_offset);
                let stats = &task.stats;
                let done = restore_task(&self.client, &log.topic, *p, from, &mut state, &mut |now| {
                    let reading = (now.end - now.from).max(0) as u64;
                    stats.to_restore.store(to_restore + reading, Ordering::Relaxed);
                    stats.restored.store(restored + now.records, Ordering::Relaxed);
                    if now.records > 0 {
                        tracing::info!(task = %task_name, changelog = %log.topic, records = now.records, of = reading, "restoring");
                    }
                })?;
                to_restore += (done.end - done.from).max(0) as u64;
                restored += done.records;
                from_offset = from_offset.max(done.from);
                let kept_watermark = log
                    .kept
                    .filter(|k| k.next_offset == done.from)
                    .and_then(|k| k.watermark);
                if let Some(w) = done.watermark.or(kept_watermark) {
                    task.watermarks.resume_at(w);
                    task.logged_watermark = Some(w);
                    task.marked_watermark = Some(w);
                }
            }
            tracing::info!(
                task = %task_name,
                from_offset,
                records = restored,
                millis = started.elapsed().as_millis() as u64,
                "task restored from its changelog"
            );
            task.stats.restoring.store(false, Ordering::Relaxed);
            self.keyed[k].tasks.insert(*p, task);
        }
        Ok(())
    }

    /// Answers state `queries` from this process's keyed tasks, between
    /// two batches (a key's task is on one process: the others find
    /// nothing).
    pub fn answer_queries(&mut self, queries: Vec<Arc<StateQuery>>) {
        for query in queries {
            for part in &mut self.keyed {
                for task in part.tasks.values_mut() {
                    task.chains.on_query(&query);
                }
            }
            query.finish();
        }
    }

    /// Runs the plugins of `swaps` from now on (just after a commit: the
    /// transaction boundary) in the source parts and every task, keeping
    /// their state, and in the tasks assigned later.
    pub fn swap_plugins(&mut self, swaps: Vec<Arc<SwapPoint>>) -> Result<(), ClusterError> {
        for swap in swaps {
            let (operator, plugin) = (&swap.operator, &swap.plugin);
            if swap.kind.is_trial() {
                // The admin API refuses shadows and canaries in cluster mode.
                tracing::warn!(%operator, "shadows and canaries are not built for cluster mode: ignored");
                continue;
            }
            let mut switched = 0;
            for source in &mut self.source_parts {
                switched += source.chains.on_swap(&swap)?;
            }
            for part in &mut self.keyed {
                for task in part.tasks.values_mut() {
                    switched += task.chains.on_swap(&swap)?;
                }
            }
            // The process switched as a whole: its tasks now and every
            // task it gets later (from `swapped`), even when it holds none.
            swap.switched(swap.workers);
            tracing::info!(%operator, digest = %plugin.digest(), instances = switched, "plugin swapped at a commit");
            self.swapped.retain(|s| &s.operator != operator);
            self.swapped.push(swap);
        }
        Ok(())
    }

    /// `partitions` left this process (committed before): their tasks go,
    /// each keeping its state here when it can.
    pub fn revoked(&mut self, partitions: &[TopicPartition]) {
        for tp in partitions {
            self.sources.remove(tp);
            let Some(part) = self.keyed.iter_mut().find(|k| k.topic == tp.0) else {
                continue;
            };
            let Some(task) = part.tasks.remove(&tp.1) else {
                continue;
            };
            let p = tp.1;
            // The task was just committed and is this process's until the
            // revoke ends: each changelog's end is where its state stands
            // (asked only when its state is kept on disk or warm).
            let keeps = self.kept.is_some() || self.standby.is_some();
            let marks: Vec<Option<KeptMark>> = task
                .changelogs
                .iter()
                .filter(|_| keeps)
                .map(|log| {
                    let end = watermarks(self.producer.client(), &log.topic, p, TIMEOUT);
                    let end = end.inspect_err(|e| tracing::warn!(changelog = %log.topic, partition = p, error = %e, "a revoked task's changelog end is unknown: its state is not kept"));
                    end.ok().map(|(_, end)| KeptMark {
                        next_offset: end,
                        watermark: task.logged_watermark,
                    })
                })
                .collect();
            let kept = self.keep(p, &task, &marks);
            if let Some(standby) = &mut self.standby {
                // Warm until the next standby pick: an eager rebalance
                // gives most tasks straight back.
                for ((topic, state), mark) in task.into_states().into_iter().zip(marks) {
                    if let Some(mark) = mark {
                        standby.warm.put((topic, p), state, mark);
                    }
                }
            }
            tracing::info!(task = %format!("{}/{}", tp.0, tp.1), kept, "task revoked");
        }
    }

    /// Keeps the state of `task`, task `p` of a keyed part, just
    /// committed, as of `marks` (each changelog's), in the process's state
    /// folder (docs/architecture.md, "Cluster mode"); whether it was kept.
    fn keep(&self, p: i32, task: &KeyedTask, marks: &[Option<KeptMark>]) -> bool {
        let Some(kept) = &self.kept else {
            return false;
        };
        task.changelogs.iter().zip(marks).all(|(log, mark)| {
            let Some(mark) = *mark else { return false };
            let mut state = log.state.clone();
            let kept = kept.keep(&log.state_name, p, &mut state, mark);
            if let Err(e) = &kept {
                tracing::warn!(changelog = %log.topic, partition = p, error = %e, "the task's state is not kept here: when it comes back, it restores from its changelog's start");
            }
            kept.is_ok()
        })
    }

    /// Whether this process keeps standby replicas.
    pub fn keeps_standbys(&self) -> bool {
        self.standby.is_some()
    }

    /// Picks the standbys to keep from the group's `members` (a stable
    /// group's description: each `client.id` and assignment).
    pub fn follow_group(&mut self, members: &[(String, Vec<TopicPartition>)]) -> Result<(), ClusterError> {
        let Some(standby) = &mut self.standby else {
            return Ok(());
        };
        let state = &self.plan.state;
        let open = |(topic, p): &TopicPartition| state.open(&format!("standby-{topic}"), *p as usize);
        Ok(standby.follow(members, &open)?)
    }

    /// Applies up to `max` changelog records to the standby states.
    pub fn catch_up_standbys(&mut self, max: usize) -> Result<usize, ClusterError> {
        match &mut self.standby {
            Some(standby) => Ok(standby.warm.catch_up(max)?),
            None => Ok(0),
        }
    }
}
