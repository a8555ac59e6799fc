//! A cluster of Apache Kafka brokers a test starts for itself
//! (`scripts/kafka-broker cluster N`): its nodes killed and started again by
//! process id, who leads what looked up, and all of it removed when dropped.

use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use std::path::PathBuf;
use std::process::Command;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// `__transaction_state`'s partitions (`transaction.state.log.num.partitions`
/// in `scripts/kafka-broker`).
const TRANSACTION_STATE_PARTITIONS: i32 = 8;

/// Held by the one cluster running: every cluster listens on the same
/// ports (29091..), so tests running side by side take turns.
static RUNNING: Mutex<()> = Mutex::new(());

/// The brokers of one `scripts/kafka-broker cluster N`.
pub struct KafkaCluster {
    dir: PathBuf,
    bootstrap: String,
    _turn: MutexGuard<'static, ()>,
}

fn script() -> PathBuf {
    crate::repo().join("scripts/kafka-broker")
}

impl KafkaCluster {
    /// Starts `nodes` brokers (each also a controller) and waits until all
    /// serve.
    pub fn start(nodes: usize) -> Self {
        let turn = RUNNING.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let out = Command::new(script())
            .args(["cluster", &nodes.to_string()])
            .output()
            .expect("scripts/kafka-broker runs");
        assert!(
            out.status.success(),
            "scripts/kafka-broker cluster {nodes}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        let env = std::fs::read_to_string(dir.join("env")).expect("the cluster's env file");
        let bootstrap = env
            .lines()
            .find_map(|l| l.strip_prefix("KAFKA_BOOTSTRAP="))
            .expect("KAFKA_BOOTSTRAP in the env file")
            .to_owned();
        Self {
            dir,
            bootstrap,
            _turn: turn,
        }
    }

    /// Its brokers, comma-separated.
    pub fn bootstrap(&self) -> &str {
        &self.bootstrap
    }

    fn pid(&self, node: i32) -> i32 {
        let file = self.dir.join(format!("node-{node}/pid"));
        std::fs::read_to_string(&file)
            .unwrap_or_else(|e| panic!("{}: {e}", file.display()))
            .trim()
            .parse()
            .expect("a process id")
    }

    /// Sends `signal` to node `node`'s process.
    pub fn signal(&self, node: i32, signal: i32) {
        // SAFETY: kill(2) on a broker this cluster started.
        assert_eq!(
            unsafe { libc::kill(self.pid(node), signal) },
            0,
            "signalling node {node}"
        );
    }

    /// SIGKILLs node `node` and waits until its process is gone.
    pub fn kill(&self, node: i32) {
        let pid = self.pid(node);
        self.signal(node, libc::SIGKILL);
        let deadline = Instant::now() + Duration::from_secs(10);
        // SAFETY: signal 0 only asks whether the process exists.
        while unsafe { libc::kill(pid, 0) } == 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Starts node `node` again and waits until it serves.
    pub fn restart(&self, node: i32) {
        let out = Command::new(script())
            .arg("node")
            .arg(&self.dir)
            .arg(node.to_string())
            .output()
            .expect("scripts/kafka-broker runs");
        assert!(
            out.status.success(),
            "restarting node {node}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// The node leading `partition` of `topic` (waiting up to 30 s for
    /// one).
    pub fn leader(&self, topic: &str, partition: i32) -> i32 {
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", &self.bootstrap)
            .create()
            .expect("a client");
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let leader = consumer
                .fetch_metadata(Some(topic), Duration::from_secs(10))
                .ok()
                .and_then(|m| {
                    let t = m.topics().iter().find(|t| t.name() == topic)?;
                    let p = t.partitions().iter().find(|p| p.id() == partition)?;
                    (p.leader() >= 0).then_some(p.leader())
                });
            match leader {
                Some(node) => return node,
                None if Instant::now() > deadline => panic!("{topic} [{partition}] has no leader"),
                None => std::thread::sleep(Duration::from_millis(200)),
            }
        }
    }

    /// The node coordinating the transactions of `transactional_id`: the
    /// leader of its `__transaction_state` partition, which Kafka picks
    /// from the id's Java `hashCode`.
    pub fn transaction_coordinator(&self, transactional_id: &str) -> i32 {
        let hash = transactional_id
            .encode_utf16()
            .fold(0i32, |h, c| h.wrapping_mul(31).wrapping_add(i32::from(c)));
        self.leader(
            "__transaction_state",
            (hash & 0x7fff_ffff) % TRANSACTION_STATE_PARTITIONS,
        )
    }
}

impl Drop for KafkaCluster {
    fn drop(&mut self) {
        let _ = Command::new(script()).arg("stop").arg(&self.dir).status();
    }
}
