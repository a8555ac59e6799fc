//! Whether the plugins can resume the state a checkpoint holds, by the
//! state versions it recorded.

use crate::checkpoint::Restore;
use crate::plan::Plan;

/// Why a plugin cannot resume the state a checkpoint holds (see
/// [`check_state_versions`]).
#[derive(Debug, thiserror::Error)]
pub enum StateVersionError {
    /// The plugin declares an older state version than the state's.
    #[error(
        "operator `{operator}`: checkpoint {checkpoint} holds state at state version {state}, and its plugin `{plugin}` declares state version {declared}: an older version cannot read state a newer one migrated. Run a version of state version {state} or higher, or start anyway with `mailer run --force` (the plugin then reads state it may not understand)"
    )]
    Downgrade {
        /// The operator.
        operator: String,
        /// The checkpoint resumed.
        checkpoint: u64,
        /// The highest state version its state is at.
        state: u32,
        /// The plugin's file.
        plugin: String,
        /// The plugin's state version.
        declared: u32,
    },
    /// The plugin declares a newer state version and cannot migrate.
    #[error(
        "operator `{operator}`: checkpoint {checkpoint} holds state at state version {state}, and its plugin `{plugin}` declares state version {declared} but exports no `migrate` to bring the state to it: give it one (`#[operator(process, state_version = {declared}, migrate = f)]`)"
    )]
    NoMigration {
        /// The operator.
        operator: String,
        /// The checkpoint resumed.
        checkpoint: u64,
        /// The lowest state version its state is at.
        state: u32,
        /// The plugin's file.
        plugin: String,
        /// The plugin's state version.
        declared: u32,
    },
}

/// Refuses to resume the state `restore` holds with a plugin of `plan` of
/// a lower state version than a plugin that wrote it (unless
/// `allow_downgrade`), or of a higher one that cannot migrate it.
pub(super) fn check_state_versions(
    plan: &Plan,
    restore: Option<&Restore>,
    allow_downgrade: bool,
) -> Result<(), StateVersionError> {
    let Some(restore) = restore else {
        return Ok(());
    };
    for op in plan.stages.iter().flat_map(|s| &s.operators) {
        let (Some(plugin), Some(versions)) = (op.plugin(), restore.metadata.state_versions_of(&op.name))
        else {
            continue;
        };
        let (operator, checkpoint) = (op.name.clone(), restore.metadata.id);
        let (path, declared) = (plugin.path().display().to_string(), plugin.state_version());
        if versions.unmarked < declared && !plugin.migrates() {
            return Err(StateVersionError::NoMigration {
                operator,
                checkpoint,
                state: versions.unmarked,
                plugin: path,
                declared,
            });
        }
        if versions.current > declared {
            let downgrade = StateVersionError::Downgrade {
                operator,
                checkpoint,
                state: versions.current,
                plugin: path,
                declared,
            };
            if !allow_downgrade {
                return Err(downgrade);
            }
            tracing::warn!("{downgrade} (forced)");
        }
    }
    Ok(())
}
