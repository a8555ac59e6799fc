//! A partition's low and high watermarks, asked again while no broker can
//! answer for it yet: a topic just created (its leader not yet known to
//! every broker) or a leader moving to another broker (a broker restarted
//! or failed over). Anything else fails at once. And a partition's end
//! once the transactions written to it are decided.

use super::transient::{FaultLog, leader_unknown};
use rdkafka::client::Client;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, KafkaResult};
use rdkafka::{ClientConfig, ClientContext};
use std::time::{Duration, Instant};

/// `(low, high)` of `partition` of `topic`, retried on a leader not yet
/// known until `timeout` passed.
pub fn watermarks<C: ClientContext>(
    client: &Client<C>,
    topic: &str,
    partition: i32,
    timeout: Duration,
) -> KafkaResult<(i64, i64)> {
    let deadline = Instant::now() + timeout;
    let mut pause = Duration::from_millis(20);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match client.fetch_watermarks(topic, partition, left.max(Duration::from_millis(100))) {
            Err(e) if leader_unknown(&e) && Instant::now() + pause < deadline => {
                tracing::debug!(topic, partition, error = %e, "no leader for the partition yet: asking again");
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(500));
            }
            answer => return answer,
        }
    }
}

/// The longest a transaction can stay open before the brokers abort it
/// (their `transaction.max.timeout.ms` default), and a minute more: how
/// long [`decided_end`] waits for a writer's open transaction at most.
pub const LONGEST_OPEN_TRANSACTION: Duration = Duration::from_secs(16 * 60);

/// Where `partition` of `topic` ends once every transaction written to it
/// is decided: its high watermark as asked now, returned with its low
/// watermark when the last stable offset has reached it. A
/// `read_committed` reader that stops at its end of partition (the last
/// stable offset) would otherwise stop short of records committed after a
/// transaction still open — another writer's, one a crashed process left,
/// or one whose commit markers a leader failover delays — and miss them
/// (docs/architecture.md, "Reading to a decided end"). Waits at most
/// `wait`, saying so every [`FaultLog::EVERY`] while it does; `config` is
/// the readers' connection (isolation levels are set here).
pub fn decided_end(
    config: &ClientConfig,
    topic: &str,
    partition: i32,
    wait: Duration,
) -> Result<(i64, i64), String> {
    let client = |isolation: &str| -> Result<BaseConsumer, String> {
        let mut config = config.clone();
        config.remove("group.id");
        config
            .set("isolation.level", isolation)
            .set("enable.auto.commit", "false")
            .create()
            .map_err(|e: KafkaError| e.to_string())
    };
    let ask = |consumer: &BaseConsumer| {
        watermarks(consumer.client(), topic, partition, LOOKUP_TIMEOUT)
            .map_err(|e| format!("reading its end: {e}"))
    };
    let (_, high) = ask(&client("read_uncommitted")?)?;
    let committed = client("read_committed")?;
    let deadline = Instant::now() + wait;
    let mut log = FaultLog::default();
    loop {
        let (low, stable) = ask(&committed)?;
        if stable >= high {
            return Ok((low, high));
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "a transaction below offset {high} stayed undecided for {wait:?} (the last stable offset stays at {stable})"
            ));
        }
        if log.due() {
            tracing::warn!(
                topic,
                partition,
                last_stable_offset = stable,
                end = high,
                "a transaction written to the partition is neither committed nor aborted yet: waiting for the brokers to decide it (at most its writer's transaction.timeout.ms) before reading to the end"
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// How long one watermark lookup may take.
const LOOKUP_TIMEOUT: Duration = Duration::from_secs(30);
