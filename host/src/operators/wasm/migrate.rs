//! Bringing a key's state to the state version of a process operator's
//! plugin before the plugin handles the key (see
//! `state::context::migration`): each stale value goes through the
//! plugin's `migrate`, and the results join the call's changes.

use super::fatal;
use crate::failure::OperatorError;
use crate::plugin::{CallError, PluginInstance};
use crate::state::{KeyedError, StateVersions};

/// Migrates the state of the key in scope of `instance` (operator
/// `operator`) to `versions.current` when it is older. `Ok(Err(reason))`
/// when the plugin could not migrate one of its values: the key's records
/// (or timer) then fail and its state stays as it was.
pub fn migrate_key(
    operator: &str,
    instance: &mut PluginInstance,
    versions: StateVersions,
) -> Result<Result<(), String>, OperatorError> {
    let ctx = instance
        .keyed()
        .expect("a process operator's instance holds keyed state");
    let (from, stale) = match ctx.stale_values(versions) {
        Ok(Some(found)) => found,
        Ok(None) => return Ok(Ok(())),
        Err(KeyedError::Backend(e)) => return Err(OperatorError::state(operator, e)),
        Err(refused) => return Ok(Err(format!("migrating the key's state: {refused}"))),
    };
    let to = versions.current;
    let mut migrated = Vec::with_capacity(stale.len());
    for value in stale {
        match instance.call_migrate(from, &value.name, &value.value) {
            Ok(Ok(bytes)) => migrated.push((value, bytes)),
            Ok(Err(reason)) => {
                return Ok(Err(format!(
                    "migrating state `{}` from state version {from} to {to}: {reason}",
                    value.name
                )));
            }
            Err(CallError::Instantiate(e)) => return Err(fatal(operator, e)),
            Err(e) => {
                return Ok(Err(format!(
                    "migrating state `{}` from state version {from} to {to}: {e}",
                    value.name
                )));
            }
        }
    }
    let ctx = instance.keyed().expect("checked above");
    match ctx.put_migrated(to, migrated) {
        Ok(()) => Ok(Ok(())),
        Err(KeyedError::Backend(e)) => Err(OperatorError::state(operator, e)),
        Err(refused) => Ok(Err(format!("migrating the key's state: {refused}"))),
    }
}
