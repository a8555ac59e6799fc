//! What a plugin swapped in at a point of the stream does: replace the
//! operator's version, run beside it, or take a share of its key groups.

use std::sync::Arc;

/// What a swap point's plugin does.
#[derive(Debug, Clone)]
pub enum SwapKind {
    /// It replaces the current version.
    Replace,
    /// It replaces the current version and, its state version being
    /// higher, migrates every key's state in the background (a few keys
    /// after each batch) rather than each key when next handled.
    Upgrade,
    /// It runs beside the current version, its outputs compared into these
    /// stats and thrown away.
    Shadow(Arc<super::ShadowStats>),
    /// It handles the key groups of these stats' share, the current
    /// version the rest.
    Canary(Arc<super::CanaryStats>),
}

impl SwapKind {
    /// Its name in logs.
    pub fn name(&self) -> &'static str {
        match self {
            SwapKind::Replace => "swap",
            SwapKind::Upgrade => "swap, migrating every key",
            SwapKind::Shadow(_) => "shadow",
            SwapKind::Canary(_) => "canary",
        }
    }
}
