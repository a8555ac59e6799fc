//! Watermark markers: each task's mark written to the repartition topics it
//! feeds (again every few seconds, risen or not), and the marks read from
//! them into the keyed tasks' watermarks.

use super::*;

impl Engine {
    /// A marker of task `upstream` at `watermark` reached task `partition`
    /// of keyed part `k`: what the task read before it runs first, then its
    /// watermark moves (and fires what it holds back) when the minimum rose.
    pub(super) fn observe_marker(
        &mut self,
        k: usize,
        partition: i32,
        upstream: u32,
        watermark: i64,
    ) -> Result<(), ClusterError> {
        self.run_task(k, partition)?;
        let Some(task) = self.keyed[k].tasks.get_mut(&partition) else {
            return Ok(());
        };
        if let Some(now) = task.watermarks.observe(upstream, watermark) {
            let fired = task.chains.on_watermark(now)?;
            self.route(self.keyed[k].route, &fired)?;
        }
        Ok(())
    }

    /// Writes each task's watermark marker into every partition of the
    /// next part's repartition topic, when it rose since the last one (or,
    /// `again`, whether it rose or not).
    pub(super) fn send_markers(&mut self, again: bool) -> Result<(), ClusterError> {
        let Some(delay) = self.delay else {
            return Ok(());
        };
        let mut marks: Vec<(Option<Route>, u32, i64)> = Vec::new();
        let idle: HashSet<TopicPartition> = self
            .sources
            .iter()
            .filter(|(_, t)| self.idle_due(t))
            .map(|(at, _)| at.clone())
            .collect();
        for (at, task) in &mut self.sources {
            let before = task.marked;
            if idle.contains(at) {
                task.marked = Some(IDLE);
            } else if let Some(max) = task.max_time.filter(|_| task.marked != Some(IDLE)) {
                // As in one process: a record at the watermark may be late.
                task.marked = task.marked.max(Some(max.saturating_sub(delay).saturating_sub(1)));
            }
            if let Some(mark) = task.marked.filter(|_| again || task.marked != before) {
                marks.push((self.source_parts[task.source].route, task.id, mark));
            }
        }
        for (k, part) in self.keyed.iter_mut().enumerate() {
            for (&p, task) in &mut part.tasks {
                let before = task.marked_watermark;
                task.marked_watermark = task.marked_watermark.max(task.watermarks.current());
                if let Some(mark) = task
                    .marked_watermark
                    .filter(|_| again || task.marked_watermark != before)
                {
                    marks.push((part.route, keyed_task_id(k, p), mark));
                }
            }
        }
        for (route, id, watermark) in marks {
            let Some(next) = route.map(|r| &self.keyed[r.keyed]) else {
                continue;
            };
            let (key, value) = marker(id, watermark);
            for p in 0..next.partitions as i32 {
                let headers = rdkafka::message::OwnedHeaders::new().insert(rdkafka::message::Header {
                    key: MARKER_HEADER,
                    value: Some(&b""[..]),
                });
                let record = BaseRecord::to(&next.topic)
                    .partition(p)
                    .key(&key[..])
                    .payload(&value[..])
                    .headers(headers);
                send_waiting(&self.producer, record).map_err(ClusterError::kafka(
                    &self.brokers,
                    format!("writing a watermark marker to `{}`", next.topic),
                ))?;
            }
        }
        Ok(())
    }
}
