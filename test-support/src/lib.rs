//! What mailer's integration tests (`tests/all`) and benchmarks
//! (`cli/benches`) share: the repository's paths and built plugins, temp
//! folders holding manifests, a database of the test server, topics of the
//! test broker, clusters of brokers a test starts, an S3-compatible server,
//! and a process's peak memory.

pub mod kafka;
pub mod kafka_cluster;
pub mod postgres;
pub mod s3;
mod workdir;

pub use workdir::Workdir;

use std::path::PathBuf;

/// The repository's root: the workspace folder (the one with `Cargo.lock`)
/// around the package cargo runs the test or benchmark of. Found at run
/// time, not compile time: checkouts that share one target folder share
/// this crate's build, which must find the checkout it runs in.
pub fn repo() -> PathBuf {
    let start = std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| std::env::current_dir().expect("a current folder"));
    start
        .ancestors()
        .find(|d| d.join("Cargo.lock").is_file())
        .unwrap_or_else(|| panic!("no workspace (Cargo.lock) around {}", start.display()))
        .to_owned()
}

/// A built plugin component; fails with a hint when plugins are not built.
pub fn plugin(name: &str) -> PathBuf {
    let p = repo().join("plugins/dist").join(format!("{name}.wasm"));
    assert!(
        p.is_file(),
        "{} is missing: run `just plugins` first",
        p.display()
    );
    p
}

/// A number from the environment, or `default`.
pub fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The peak resident memory of process `pid` so far (`VmHWM`), KiB.
pub fn peak_rss_kib(pid: u32) -> Option<u64> {
    status_kib(pid, "VmHWM:")
}

/// The resident memory of process `pid` now (`VmRSS`), KiB.
pub fn rss_kib(pid: u32) -> Option<u64> {
    status_kib(pid, "VmRSS:")
}

fn status_kib(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    line.split_whitespace().nth(1)?.parse().ok()
}
