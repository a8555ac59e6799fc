//! What runs one operator of a stage: its name, its family's node, the
//! policy for the records it fails on, and the counts all of its workers
//! share. The planner places nodes; each worker makes its instance from one.

use super::branch::BranchNode;
use super::join::JoinNode;
use super::wasm::WasmNode;
use super::window::WindowNode;
use super::{InstanceContext, InstantiateError, NativeFactory, Operator, OperatorIdentity};
use crate::failure::{FailureHandler, FailurePolicy, FailureStats};
use crate::plugin::LoadedPlugin;
use std::sync::Arc;

/// One operator of a stage.
pub struct OperatorNode {
    /// Its unique name.
    pub name: String,
    /// What runs it.
    pub kind: NodeKind,
    /// What happens to records it fails on.
    pub policy: FailurePolicy,
    /// Counts shared by all of its workers.
    pub failures: Arc<FailureStats>,
    /// Its plugin calls, shared by all of its workers.
    pub calls: Arc<crate::plugin::CallStats>,
    /// What its plugin may reach (nothing by default).
    pub grants: Arc<crate::plugin::Grants>,
}

impl OperatorNode {
    /// Operator `name` run by `kind`, with `policy` for the records it
    /// fails on, what it may reach nothing, and fresh counts.
    pub fn new(name: &str, kind: NodeKind, policy: FailurePolicy) -> Self {
        Self {
            name: name.to_owned(),
            kind,
            policy,
            failures: Default::default(),
            calls: Default::default(),
            grants: Default::default(),
        }
    }

    /// The plugin it runs, if any.
    pub fn plugin(&self) -> Option<&Arc<LoadedPlugin>> {
        match &self.kind {
            NodeKind::Plugin(WasmNode { plugin, .. })
            | NodeKind::Window(WindowNode {
                plugin: Some((plugin, _)),
                ..
            })
            | NodeKind::Join(JoinNode {
                plugin: Some((plugin, ..)),
                ..
            }) => Some(plugin),
            _ => None,
        }
    }

    pub fn plugin_mut(&mut self) -> Option<&mut Arc<LoadedPlugin>> {
        match &mut self.kind {
            NodeKind::Plugin(WasmNode { plugin, .. })
            | NodeKind::Window(WindowNode {
                plugin: Some((plugin, _)),
                ..
            })
            | NodeKind::Join(JoinNode {
                plugin: Some((plugin, ..)),
                ..
            }) => Some(plugin),
            _ => None,
        }
    }

    /// A new instance for one worker, made by its family.
    pub fn instantiate(&self, ctx: &InstanceContext<'_>) -> Result<Box<dyn Operator>, InstantiateError> {
        let failure = FailureHandler::new(
            &self.name,
            self.policy,
            ctx.dead_letter.clone(),
            self.failures.clone(),
        )
        .for_worker(ctx.worker);
        let node = OperatorIdentity {
            name: &self.name,
            calls: &self.calls,
            grants: &self.grants,
        };
        match &self.kind {
            NodeKind::Native(factory) => factory(ctx, failure),
            NodeKind::Plugin(wasm) => wasm.instantiate(&node, ctx, failure),
            NodeKind::Window(window) => window.instantiate(&node, ctx, failure),
            NodeKind::Join(join) => join.instantiate(&node, ctx, failure),
            NodeKind::Branch(branch) => branch.instantiate(&node, failure),
        }
    }
}

/// What runs an operator: one of the families of [`crate::operators`].
pub enum NodeKind {
    /// A plugin of a record world.
    Plugin(WasmNode),
    /// Native Rust (built-ins, closures of the builder, benchmarks).
    Native(NativeFactory),
    /// The window operator.
    Window(WindowNode),
    /// A join of two inputs.
    Join(JoinNode),
    /// A branch: several outputs.
    Branch(BranchNode),
}
