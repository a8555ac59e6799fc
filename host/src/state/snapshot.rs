//! Snapshots of a backend for checkpoints, and restoring from them.
//!
//! RocksDB snapshots are RocksDB's own checkpoints (hard links to its
//! immutable files: the cost grows with what changed since the last one);
//! the in-memory backend writes its entries to one file,
//! `MAILERSNAP1 (key_len:u32 key value_len:u32 value)* count:u64 xxh3:u64`,
//! whose trailer proves it complete.
//!
//! Restoring reads the entries of the key groups a worker owns out of every
//! snapshot of its operator, so a pipeline can come back at another
//! parallelism; a worker that owns exactly what one RocksDB snapshot holds
//! opens a copy of it instead (hard links, no rewrite).

use super::{StateBackend, StateError, keys};
use std::io::{BufReader, BufWriter, Read, Write};
use std::path::Path;
use xxhash_rust::xxh3::Xxh3;

const MAGIC: &[u8; 11] = b"MAILERSNAP1";
const ENTRIES: &str = "entries";

/// The key group an entry belongs to (keyed entries and timers), or `None`
/// for an entry of neither layout.
pub fn entry_key_group(key: &[u8]) -> Option<u16> {
    let first = u16::from_be_bytes(key.get(..2)?.try_into().ok()?);
    if first == keys::TIMERS {
        keys::parse_timer(key).map(|(_, kg, _, _)| kg)
    } else {
        Some(first)
    }
}

fn storage(path: &Path, message: impl std::fmt::Display) -> StateError {
    StateError::Storage {
        backend: "snapshot",
        path: path.display().to_string(),
        message: message.to_string(),
    }
}

/// Writes every entry of `backend` into the folder `dir` (created) as a
/// snapshot file.
pub fn write_entries(backend: &dyn StateBackend, dir: &Path) -> Result<(), StateError> {
    std::fs::create_dir_all(dir).map_err(|e| storage(dir, e))?;
    let path = dir.join(ENTRIES);
    let file = std::fs::File::create(&path).map_err(|e| storage(&path, e))?;
    let mut out = BufWriter::with_capacity(1 << 20, file);
    let mut hash = Xxh3::new();
    let mut count = 0u64;
    let mut failed = None;
    let mut write = |bytes: &[u8], hash: &mut Xxh3| -> std::io::Result<()> {
        hash.update(bytes);
        out.write_all(bytes)
    };
    write(MAGIC, &mut hash).map_err(|e| storage(&path, e))?;
    backend.scan(&[], &[0xFF; 64], &mut |k, v| {
        let r = write(&(k.len() as u32).to_le_bytes(), &mut hash)
            .and_then(|()| write(k, &mut hash))
            .and_then(|()| write(&(v.len() as u32).to_le_bytes(), &mut hash))
            .and_then(|()| write(v, &mut hash));
        count += 1;
        match r {
            Ok(()) => true,
            Err(e) => {
                failed = Some(e);
                false
            }
        }
    })?;
    if let Some(e) = failed {
        return Err(storage(&path, e));
    }
    let digest = hash.digest();
    out.write_all(&count.to_le_bytes())
        .and_then(|()| out.write_all(&digest.to_le_bytes()))
        .and_then(|()| out.flush())
        .map_err(|e| storage(&path, e))
}

/// Calls `f` with each entry of the snapshot file in `dir`, after checking
/// that the file is complete and unchanged.
pub fn read_entries(dir: &Path, f: super::EntryVisitor<'_>) -> Result<(), StateError> {
    let path = dir.join(ENTRIES);
    let bytes = std::fs::read(&path).map_err(|e| storage(&path, e))?;
    let corrupt = |what: &str| storage(&path, format!("the snapshot is corrupt: {what}"));
    if bytes.len() < MAGIC.len() + 16 || &bytes[..MAGIC.len()] != MAGIC {
        return Err(corrupt("no header"));
    }
    let (body, trailer) = bytes.split_at(bytes.len() - 16);
    let count = u64::from_le_bytes(trailer[..8].try_into().expect("8 bytes"));
    let digest = u64::from_le_bytes(trailer[8..].try_into().expect("8 bytes"));
    if xxhash_rust::xxh3::xxh3_64(body) != digest {
        return Err(corrupt("checksum mismatch"));
    }
    let mut r = BufReader::new(&body[MAGIC.len()..]);
    let read_bytes = |r: &mut BufReader<&[u8]>| -> Option<Vec<u8>> {
        let mut len = [0u8; 4];
        r.read_exact(&mut len).ok()?;
        let mut b = vec![0u8; u32::from_le_bytes(len) as usize];
        r.read_exact(&mut b).ok()?;
        Some(b)
    };
    for _ in 0..count {
        let (Some(k), Some(v)) = (read_bytes(&mut r), read_bytes(&mut r)) else {
            return Err(corrupt("fewer entries than its trailer says"));
        };
        f(&k, &v)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::{BackendKind, MemoryBackend, SnapshotSource};
    use std::collections::BTreeMap;

    fn entries(b: &dyn StateBackend) -> BTreeMap<Vec<u8>, Vec<u8>> {
        let mut all = BTreeMap::new();
        b.scan(&[], &[0xFF; 64], &mut |k, v| {
            all.insert(k.to_vec(), v.to_vec());
            true
        })
        .unwrap();
        all
    }

    /// State of four key groups: keyed entries and timers.
    fn filled(mut b: Box<dyn StateBackend>) -> Box<dyn StateBackend> {
        for kg in 0..4u16 {
            b.put(&keys::keyed(kg, 1, b"k"), &[kg as u8]).unwrap();
            b.put(&keys::timer(1, i64::from(kg), kg, b"k", &[]), &[]).unwrap();
        }
        b
    }

    #[test]
    fn restoring_at_another_parallelism_splits_the_key_groups_exactly() {
        let dir = tempfile::tempdir().unwrap();
        for kind in [BackendKind::Memory, BackendKind::rocks(dir.path().join("db"))] {
            let mut original = filled(kind.open("s", 0).unwrap());
            let snap = dir.path().join(format!("snap-{}", kind.name()));
            original.snapshot(&snap).unwrap();
            let sources = [SnapshotSource {
                path: snap,
                backend: kind.name().to_owned(),
                same_key_groups: false,
            }];
            let low = kind.restore("r", 1, &sources, &|kg| kg < 2).unwrap();
            let high = kind.restore("r", 2, &sources, &|kg| kg >= 2).unwrap();
            let (low, high) = (entries(low.as_ref()), entries(high.as_ref()));
            assert_eq!(low.len(), 4, "{}", kind.name());
            assert!(low.keys().all(|k| entry_key_group(k).unwrap() < 2));
            let mut both = low;
            both.extend(high);
            assert_eq!(both, entries(original.as_ref()), "{}", kind.name());
        }
    }

    #[test]
    fn a_damaged_memory_snapshot_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let mut b = filled(Box::new(MemoryBackend::default()));
        b.snapshot(&dir.path().join("s")).unwrap();
        let file = dir.path().join("s").join(ENTRIES);
        let mut bytes = std::fs::read(&file).unwrap();
        bytes.truncate(bytes.len() - 3);
        std::fs::write(&file, &bytes).unwrap();
        let err = read_entries(&dir.path().join("s"), &mut |_, _| Ok(())).unwrap_err();
        assert!(err.to_string().contains("corrupt"), "{err}");
    }
}
