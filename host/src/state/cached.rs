//! A bounded write-back cache in front of a slow backend (RocksDB), so that
//! state on disk runs at memory speed while it fits the cache.
//!
//! The cache is a [`MemoryBackend`] whose values carry a tag byte: a write
//! stays in the cache, *dirty*, until a snapshot or a full cache writes the
//! dirty entries to the backend in one batch; a read that misses the cache
//! asks the backend and keeps the answer, *clean* (absence too). A scan
//! merges the cache's dirty entries of the range with the backend's. When
//! the cache outgrows its budget, its dirty entries are written back and
//! about half of it is dropped.
//!
//! An entry written where the backend is known to have nothing (a window's
//! accumulator, read first) is *new*: deleting it before it was written back
//! drops it from the cache, and the backend never sees it. A deletion that
//! was written back leaves nothing in the cache either: fired windows do not
//! fill it.

use super::{MemoryBackend, StateBackend, StateError};
use std::cell::RefCell;
use std::path::Path;

/// The tag before a cached value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
enum Tag {
    /// Written here, not in the backend yet.
    Dirty = 0,
    /// Deleted here, not in the backend yet.
    DirtyDeleted = 1,
    /// As in the backend.
    Clean = 2,
    /// Absent in the backend.
    CleanAbsent = 3,
    /// Written here, absent in the backend.
    DirtyNew = 4,
}

impl Tag {
    fn of(tagged: &[u8]) -> Tag {
        match tagged[0] {
            0 => Tag::Dirty,
            1 => Tag::DirtyDeleted,
            2 => Tag::Clean,
            3 => Tag::CleanAbsent,
            _ => Tag::DirtyNew,
        }
    }

    fn dirty(self) -> bool {
        matches!(self, Tag::Dirty | Tag::DirtyDeleted | Tag::DirtyNew)
    }

    /// Whether the backend has no value for the entry.
    fn absent_below(self) -> bool {
        matches!(self, Tag::CleanAbsent | Tag::DirtyNew)
    }

    fn has_value(self) -> bool {
        matches!(self, Tag::Dirty | Tag::Clean | Tag::DirtyNew)
    }
}

/// The value a tagged cache entry stands for.
fn value_of(tagged: &[u8]) -> Option<Vec<u8>> {
    value_in(tagged).map(<[u8]>::to_vec)
}

/// [`value_of`], borrowed.
fn value_in(tagged: &[u8]) -> Option<&[u8]> {
    Tag::of(tagged).has_value().then(|| &tagged[1..])
}

/// What a key in the dirty list takes beside its bytes.
const DIRTY_KEY_OVERHEAD: usize = 24;

/// The cache and the tagged value being written.
struct Cache {
    entries: MemoryBackend,
    scratch: Vec<u8>,
    /// The keys of the dirty entries (and of new entries deleted since,
    /// which the write-back skips): a write-back reads these, not the whole
    /// cache.
    dirty: Vec<Box<[u8]>>,
    /// What `dirty` takes, counted against the capacity with the entries.
    dirty_bytes: usize,
}

impl Cache {
    /// Caches `value` at `key` with `tag` ([`Tag::Dirty`] or
    /// [`Tag::DirtyDeleted`] for a write; a write over an entry the backend
    /// lacks stays [`Tag::DirtyNew`], and deleting one forgets it).
    fn put(&mut self, key: &[u8], tag: Tag, value: &[u8]) {
        // A value of the same length is overwritten in place, in one lookup.
        let mut tag = tag;
        let in_place = self.entries.update(key, |tagged| {
            let was = Tag::of(tagged);
            if tag == Tag::Dirty && was.absent_below() {
                tag = Tag::DirtyNew;
            }
            let fits = tagged.len() == 1 + value.len() && !(tag == Tag::DirtyDeleted && was == Tag::DirtyNew);
            if fits {
                tagged[0] = tag as u8;
                tagged[1..].copy_from_slice(value);
            }
            (was, fits)
        });
        if let Some((Tag::DirtyNew, _)) = in_place
            && tag == Tag::DirtyDeleted
        {
            // Never written back: the backend has nothing to delete. The key
            // stays in the dirty list; the write-back skips it.
            self.entries
                .delete(key)
                .expect("the memory backend does not fail");
            return;
        }
        if tag.dirty() && !in_place.is_some_and(|(was, _)| was.dirty()) {
            self.dirty.push(key.into());
            self.dirty_bytes += key.len() + DIRTY_KEY_OVERHEAD;
        }
        if in_place.is_some_and(|(_, fits)| fits) {
            return;
        }
        self.scratch.clear();
        self.scratch.push(tag as u8);
        self.scratch.extend_from_slice(value);
        self.entries
            .put(key, &self.scratch)
            .expect("the memory backend does not fail");
    }

    /// What the cache takes: its entries and its list of dirty keys.
    fn bytes(&self) -> usize {
        self.entries.bytes() + self.dirty_bytes
    }

    /// Drops about half of the clean entries.
    fn drop_half_clean(&mut self) {
        let mut toggle = false;
        self.entries.retain(&mut |_, tagged| {
            toggle = !toggle;
            Tag::of(tagged).dirty() || toggle
        });
    }
}

/// `B` behind a write-back cache of about `capacity` bytes.
pub struct CachedBackend<B> {
    backend: RefCell<B>,
    cache: RefCell<Cache>,
    capacity: usize,
}

impl<B: StateBackend> CachedBackend<B> {
    /// `backend` behind a cache of about `capacity` bytes.
    pub fn new(backend: B, capacity: usize) -> Self {
        Self {
            backend: RefCell::new(backend),
            cache: RefCell::new(Cache {
                entries: MemoryBackend::default(),
                scratch: Vec::new(),
                dirty: Vec::new(),
                dirty_bytes: 0,
            }),
            capacity,
        }
    }

    /// Writes the dirty entries to the backend in one batch; written ones
    /// stay cached, clean, and deleted ones leave the cache.
    fn write_back(&mut self) -> Result<(), StateError> {
        let Cache {
            entries,
            dirty,
            dirty_bytes,
            ..
        } = self.cache.get_mut();
        *dirty_bytes = 0;
        if dirty.is_empty() {
            return Ok(());
        }
        let mut batch: Vec<(Vec<u8>, Option<Vec<u8>>)> = Vec::with_capacity(dirty.len());
        for key in dirty.drain(..) {
            let deleted = entries.update(&key, |tagged| match Tag::of(tagged) {
                Tag::Dirty | Tag::DirtyNew => {
                    batch.push((key.to_vec(), Some(tagged[1..].to_vec())));
                    tagged[0] = Tag::Clean as u8;
                    false
                }
                Tag::DirtyDeleted => {
                    batch.push((key.to_vec(), None));
                    true
                }
                Tag::Clean | Tag::CleanAbsent => false,
            });
            if deleted == Some(true) {
                // Gone from the backend too: nothing worth keeping.
                entries.delete(&key)?;
            }
        }
        self.backend.get_mut().write_batch(&batch)
    }

    /// Keeps a write in the cache; writes back and makes room when the
    /// cache is full.
    fn write(&mut self, key: &[u8], tag: Tag, value: &[u8]) -> Result<(), StateError> {
        let cache = self.cache.get_mut();
        cache.put(key, tag, value);
        if cache.bytes() > self.capacity {
            self.write_back()?;
            self.cache.get_mut().drop_half_clean();
        }
        Ok(())
    }
}

impl<B: StateBackend> StateBackend for CachedBackend<B> {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StateError> {
        let mut cache = self.cache.borrow_mut();
        if let Some(value) = cache.entries.read(key, value_of) {
            return Ok(value);
        }
        let value = self.backend.borrow().get(key)?;
        match &value {
            Some(v) => cache.put(key, Tag::Clean, v),
            None => cache.put(key, Tag::CleanAbsent, &[]),
        }
        if cache.bytes() > self.capacity {
            cache.drop_half_clean();
        }
        Ok(value)
    }

    fn read_with(&self, key: &[u8], f: &mut dyn FnMut(Option<&[u8]>)) -> Result<(), StateError> {
        let hit = self
            .cache
            .borrow()
            .entries
            .read(key, |tagged| f(value_in(tagged)));
        if hit.is_none() {
            f(self.get(key)?.as_deref());
        }
        Ok(())
    }

    fn put(&mut self, key: &[u8], value: &[u8]) -> Result<(), StateError> {
        self.write(key, Tag::Dirty, value)
    }

    fn delete(&mut self, key: &[u8]) -> Result<(), StateError> {
        self.write(key, Tag::DirtyDeleted, &[])
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
        // The dirty entries of the range, in order, override the backend's.
        let mut dirty: Vec<(Vec<u8>, Option<Vec<u8>>)> = Vec::new();
        {
            let cache = self.cache.borrow();
            if !cache.dirty.is_empty() {
                cache.entries.scan(from, to, &mut |k, tagged| {
                    if Tag::of(tagged).dirty() {
                        dirty.push((k.to_vec(), value_of(tagged)));
                    }
                    true
                })?;
            }
        }
        let mut pending = dirty.into_iter().peekable();
        let mut going = true;
        self.backend.borrow().scan(from, to, &mut |k, v| {
            while let Some((dk, _)) = pending.peek() {
                if dk.as_slice() > k {
                    break;
                }
                let (dk, dv) = pending.next().expect("peeked");
                let same = dk.as_slice() == k;
                if let Some(dv) = dv
                    && !f(&dk, &dv)
                {
                    going = false;
                    return false;
                }
                if same {
                    return true;
                }
            }
            going = f(k, v);
            going
        })?;
        if going {
            for (dk, dv) in pending {
                if let Some(dv) = dv
                    && !f(&dk, &dv)
                {
                    break;
                }
            }
        }
        Ok(())
    }

    fn snapshot(&mut self, dir: &Path) -> Result<(), StateError> {
        self.write_back()?;
        self.backend.get_mut().snapshot(dir)
    }
}
