//! The in-memory backend: a hash map for point reads and writes, and an
//! ordered index of the keys for range scans. Updating an existing key (the
//! common case: a running aggregate) touches only the hash map; the index
//! changes only when a key comes or goes. Both share each key's allocation.

use super::{StateBackend, StateError};
use std::collections::{BTreeSet, HashMap};
use std::ops::Bound;
use std::sync::Arc;

/// State in memory: fast, bounded by RAM.
///
/// The hash is the standard library's SipHash: keys share long prefixes (key
/// group, operator, length), which weak hashes (Fx, and xxh3 fed through the
/// streaming `Hasher`) map to colliding buckets; and keys come from users.
#[derive(Debug, Default)]
pub struct MemoryBackend {
    values: HashMap<Arc<[u8]>, Box<[u8]>>,
    ordered: BTreeSet<Arc<[u8]>>,
}

impl MemoryBackend {
    /// How many entries.
    pub fn len(&self) -> usize {
        self.values.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }
}

impl StateBackend for MemoryBackend {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StateError> {
        Ok(self.values.get(key).map(|v| v.to_vec()))
    }

    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<(), StateError> {
        match self.values.get_mut(key) {
            Some(v) if v.len() == value.len() => v.copy_from_slice(value),
            Some(v) => *v = value.into(),
            None => {
                let key: Arc<[u8]> = key.into();
                self.ordered.insert(key.clone());
                self.values.insert(key, value.into());
            }
        }
        Ok(())
    }

    fn delete(&mut self, key: &[u8]) -> Result<(), StateError> {
        if self.values.remove(key).is_some() {
            self.ordered.remove(key);
        }
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
        for k in self.ordered.range::<[u8], _>(range) {
            let v = self.values.get(k).expect("the index holds only keys with values");
            if !f(k, v) {
                break;
            }
        }
        Ok(())
    }
}
