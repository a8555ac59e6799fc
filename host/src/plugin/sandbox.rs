//! What a plugin instance may reach. Nothing by default: no files, no
//! network, no environment, no arguments, a clock frozen at 1970 and
//! randomness of zeros. An operator's `grants` open some of it: one
//! directory read-only, named environment variables, the real clocks, real
//! randomness. The network is never granted. Stdout and stderr are always
//! captured (see [`super::captured`]).

use super::captured::CapturedOutput;
use std::path::PathBuf;
use std::time::Duration;
use wasmtime_wasi::{Deterministic, FsPerms, HostMonotonicClock, HostWallClock, WasiCtx};

/// Where a granted directory appears inside the plugin.
pub const GRANTED_DIR: &str = "/data";

/// What an operator's plugin is granted beyond nothing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Grants {
    /// A host directory the plugin reads (not writes) as [`GRANTED_DIR`].
    pub dir: Option<PathBuf>,
    /// Environment variables (name, value) the plugin sees.
    pub env: Vec<(String, String)>,
    /// The real wall and monotonic clocks.
    pub clocks: bool,
    /// Real randomness.
    pub random: bool,
}

/// A clock that never moves: 1970 for the wall clock, 0 for the monotonic one.
struct Frozen;

impl HostWallClock for Frozen {
    fn resolution(&self) -> Duration {
        Duration::from_secs(1)
    }

    fn now(&self) -> Duration {
        Duration::ZERO
    }
}

impl HostMonotonicClock for Frozen {
    fn resolution(&self) -> u64 {
        1_000_000_000
    }

    fn now(&self) -> u64 {
        0
    }
}

/// The WASI context of one instance under `grants`, its output going to
/// `stdout` and `stderr`.
pub fn wasi_ctx(grants: &Grants, stdout: CapturedOutput, stderr: CapturedOutput) -> Result<WasiCtx, String> {
    let mut b = WasiCtx::builder();
    b.allow_tcp(false)
        .allow_udp(false)
        .allow_ip_name_lookup(false)
        .stdout(stdout)
        .stderr(stderr);
    if let Some(dir) = &grants.dir {
        b.preopened_dir(dir, GRANTED_DIR, FsPerms::ReadOnly)
            .map_err(|e| format!("cannot grant the directory {}: {e:#}", dir.display()))?;
    }
    for (name, value) in &grants.env {
        b.env(name, value);
    }
    if !grants.clocks {
        b.wall_clock(Frozen).monotonic_clock(Frozen);
    }
    if !grants.random {
        b.secure_random(Deterministic::new(vec![0]))
            .insecure_random(Deterministic::new(vec![0]))
            .insecure_random_seed(0);
    }
    Ok(b.build())
}
