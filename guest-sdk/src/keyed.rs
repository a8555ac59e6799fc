//! Keyed state, owned by the host: typed handles over the `state` imports.
//! Every handle is scoped by the host to the operator and to the key of the
//! record (or timer) being handled; a plugin names a state, never a key.
//! Values are stored as JSON, so a plugin in another language (or a later
//! version of this one) reads them back.
//!
//! The `#[operator(process)]` attribute makes each handle from the name of
//! the parameter that takes it.

use crate::{Result, host};
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::marker::PhantomData;

/// A handle the `#[operator]` attribute creates from a parameter's name.
pub trait Named {
    /// The handle of the state called `name`.
    fn named(name: &'static str) -> Self;
}

fn encode<T: Serialize>(v: &T) -> Result<Vec<u8>> {
    Ok(serde_json::to_vec(v)?)
}

fn decode<T: DeserializeOwned>(name: &str, bytes: &[u8]) -> Result<T> {
    serde_json::from_slice(bytes)
        .map_err(|e| crate::Error::new(format!("state `{name}` holds a value of another type: {e}")))
}

/// One value per key.
#[derive(Debug)]
pub struct ValueState<T> {
    name: &'static str,
    _type: PhantomData<fn() -> T>,
}

impl<T> Named for ValueState<T> {
    fn named(name: &'static str) -> Self {
        Self {
            name,
            _type: PhantomData,
        }
    }
}

impl<T: Serialize + DeserializeOwned> ValueState<T> {
    /// The key's value, if set (and not expired).
    pub fn get(&self) -> Result<Option<T>> {
        host::get(self.name).map(|b| decode(self.name, &b)).transpose()
    }

    /// Sets the key's value.
    pub fn set(&mut self, value: &T) -> Result<()> {
        host::set(self.name, &encode(value)?);
        Ok(())
    }

    /// Removes the key's value.
    pub fn clear(&mut self) {
        host::clear(self.name);
    }
}

/// A list per key, in the order of appends.
#[derive(Debug)]
pub struct ListState<T> {
    name: &'static str,
    _type: PhantomData<fn() -> T>,
}

impl<T> Named for ListState<T> {
    fn named(name: &'static str) -> Self {
        Self {
            name,
            _type: PhantomData,
        }
    }
}

impl<T: Serialize + DeserializeOwned> ListState<T> {
    /// The key's items, oldest first (expired ones left out).
    pub fn get(&self) -> Result<Vec<T>> {
        host::list_get(self.name)
            .iter()
            .map(|b| decode(self.name, b))
            .collect()
    }

    /// Appends one item.
    pub fn append(&mut self, item: &T) -> Result<()> {
        host::list_append(self.name, &encode(item)?);
        Ok(())
    }

    /// Replaces the key's items.
    pub fn set(&mut self, items: &[T]) -> Result<()> {
        host::clear(self.name);
        items.iter().try_for_each(|i| self.append(i))
    }

    /// Removes every item.
    pub fn clear(&mut self) {
        host::clear(self.name);
    }
}

/// A map per key; entries come back in the order of their keys' JSON text.
#[derive(Debug)]
pub struct MapState<K, V> {
    name: &'static str,
    _type: PhantomData<fn() -> (K, V)>,
}

impl<K, V> Named for MapState<K, V> {
    fn named(name: &'static str) -> Self {
        Self {
            name,
            _type: PhantomData,
        }
    }
}

impl<K: Serialize + DeserializeOwned, V: Serialize + DeserializeOwned> MapState<K, V> {
    /// The value at `key`.
    pub fn get(&self, key: &K) -> Result<Option<V>> {
        host::map_get(self.name, &encode(key)?)
            .map(|b| decode(self.name, &b))
            .transpose()
    }

    /// Sets `key` to `value`.
    pub fn insert(&mut self, key: &K, value: &V) -> Result<()> {
        host::map_set(self.name, &encode(key)?, &encode(value)?);
        Ok(())
    }

    /// Removes `key`.
    pub fn remove(&mut self, key: &K) -> Result<()> {
        host::map_remove(self.name, &encode(key)?);
        Ok(())
    }

    /// Every entry.
    pub fn entries(&self) -> Result<Vec<(K, V)>> {
        host::map_entries(self.name)
            .iter()
            .map(|(k, v)| Ok((decode(self.name, k)?, decode(self.name, v)?)))
            .collect()
    }

    /// Removes every entry.
    pub fn clear(&mut self) {
        host::clear(self.name);
    }
}
