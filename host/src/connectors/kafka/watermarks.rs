//! A partition's low and high watermarks, asked again while no broker can
//! answer for it yet: a topic just created (its leader not yet known to
//! every broker) or a leader moving to another broker (a broker restarted
//! or failed over). Anything else fails at once.

use super::transient::leader_unknown;
use rdkafka::ClientContext;
use rdkafka::client::Client;
use rdkafka::error::KafkaResult;
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
