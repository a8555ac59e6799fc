//! The in-memory backend: an ordered map.

use super::{StateBackend, StateError};
use std::collections::BTreeMap;
use std::ops::Bound;

/// State in a `BTreeMap`: fast, bounded by RAM.
#[derive(Debug, Default)]
pub struct MemoryBackend {
    map: BTreeMap<Vec<u8>, Vec<u8>>,
}

impl MemoryBackend {
    /// How many entries.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}

impl StateBackend for MemoryBackend {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StateError> {
        Ok(self.map.get(key).cloned())
    }

    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<(), StateError> {
        match self.map.get_mut(key) {
            Some(v) => {
                v.clear();
                v.extend_from_slice(value);
            }
            None => {
                self.map.insert(key.to_vec(), value.to_vec());
            }
        }
        Ok(())
    }

    fn delete(&mut self, key: &[u8]) -> Result<(), StateError> {
        self.map.remove(key);
        Ok(())
    }

    fn scan(
        &self,
        from: &[u8],
        to: &[u8],
        f: &mut dyn FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<(), StateError> {
        if from >= to {
            return Ok(());
        }
        let range = (Bound::Included(from), Bound::Excluded(to));
        for (k, v) in self.map.range::<[u8], _>(range) {
            if !f(k, v) {
                break;
            }
        }
        Ok(())
    }
}
