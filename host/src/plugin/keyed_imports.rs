//! The `state` and `timers` imports of the process world, served from the
//! store's [`KeyedContext`], which they reach through [`KeyedView`]
//! (wasmtime's view pattern). A backend failure or a refused call traps the
//! plugin; the operator then finds a backend failure with
//! [`KeyedContext::take_backend_error`] and stops.

use super::generated::process::mailer::plugin::{state, timers};
use crate::state::{KeyedContext, KeyedError, MapEntries, TimeDomain};
use wasmtime::component::{HasData, Linker};

/// What the `state` and `timers` imports reach in a store: the keyed
/// context of the operator, when it has one.
pub struct KeyedImport<'a>(pub Option<&'a mut KeyedContext>);

/// A store whose plugins may have keyed state and timers.
pub trait KeyedView {
    /// The keyed imports' part of the store.
    fn keyed(&mut self) -> KeyedImport<'_>;
}

struct Keyed;

impl HasData for Keyed {
    type Data<'a> = KeyedImport<'a>;
}

/// Adds the `state` and `timers` imports to `linker`.
pub fn add_to_linker<T: KeyedView + 'static>(linker: &mut Linker<T>) -> wasmtime::Result<()> {
    state::add_to_linker::<T, Keyed>(linker, |s| s.keyed())?;
    timers::add_to_linker::<T, Keyed>(linker, |s| s.keyed())
}

impl KeyedImport<'_> {
    /// Runs `f` on the keyed context; its failure traps the plugin.
    fn keyed<T>(
        &mut self,
        f: impl FnOnce(&mut KeyedContext) -> Result<T, KeyedError>,
    ) -> wasmtime::Result<T> {
        let ctx = self
            .0
            .as_deref_mut()
            .ok_or_else(|| wasmtime::Error::msg("this operator has no keyed state"))?;
        f(ctx).map_err(|e| wasmtime::Error::msg(ctx.fail(e)))
    }
}

impl state::Host for KeyedImport<'_> {
    fn get(&mut self, name: String) -> wasmtime::Result<Option<Vec<u8>>> {
        self.keyed(|c| c.get(&name))
    }

    fn set(&mut self, name: String, value: Vec<u8>) -> wasmtime::Result<()> {
        self.keyed(|c| c.set(&name, value))
    }

    fn clear(&mut self, name: String) -> wasmtime::Result<()> {
        self.keyed(|c| c.clear(&name))
    }

    fn list_get(&mut self, name: String) -> wasmtime::Result<Vec<Vec<u8>>> {
        self.keyed(|c| c.list_get(&name))
    }

    fn list_append(&mut self, name: String, item: Vec<u8>) -> wasmtime::Result<()> {
        self.keyed(|c| c.list_append(&name, item))
    }

    fn map_get(&mut self, name: String, key: Vec<u8>) -> wasmtime::Result<Option<Vec<u8>>> {
        self.keyed(|c| c.map_get(&name, &key))
    }

    fn map_set(&mut self, name: String, key: Vec<u8>, value: Vec<u8>) -> wasmtime::Result<()> {
        self.keyed(|c| c.map_set(&name, &key, value))
    }

    fn map_remove(&mut self, name: String, key: Vec<u8>) -> wasmtime::Result<()> {
        self.keyed(|c| c.map_remove(&name, &key))
    }

    fn map_entries(&mut self, name: String) -> wasmtime::Result<MapEntries> {
        self.keyed(|c| c.map_entries(&name))
    }
}

fn domain(d: timers::TimeDomain) -> TimeDomain {
    match d {
        timers::TimeDomain::EventTime => TimeDomain::EventTime,
        timers::TimeDomain::ProcessingTime => TimeDomain::ProcessingTime,
    }
}

impl timers::Host for KeyedImport<'_> {
    fn register(&mut self, d: timers::TimeDomain, at: i64) -> wasmtime::Result<()> {
        self.keyed(|c| c.register_timer(domain(d), at))
    }

    fn delete(&mut self, d: timers::TimeDomain, at: i64) -> wasmtime::Result<()> {
        self.keyed(|c| c.delete_timer(domain(d), at))
    }

    fn watermark(&mut self) -> wasmtime::Result<i64> {
        self.keyed(|c| Ok(c.watermark()))
    }

    fn now(&mut self) -> wasmtime::Result<i64> {
        self.keyed(|c| Ok(c.now()))
    }
}
