//! Reading a checkpoint (or a savepoint) back from the bucket: its metadata,
//! then its files, each checked against its digest.

use super::*;

impl RemoteCheckpoints {
    /// Checkpoint `id`, downloaded into the local folder `target` unless
    /// that already holds it whole; its metadata, or why it cannot be used.
    pub fn fetch_checkpoint(&self, id: u64, target: &Path) -> Result<Metadata, String> {
        let metadata = self.fetch(&metadata_key(id), target)?;
        match metadata.id == id {
            true => Ok(metadata),
            false => Err(format!("its metadata names checkpoint {}", metadata.id)),
        }
    }

    /// The checkpoint whose metadata is at `key`, downloaded into `target`
    /// (replacing what is there unless it is the same checkpoint whole):
    /// every file (snapshot files and swapped-in plugins) checked against
    /// its size and digest before the folder is renamed into place.
    pub(super) fn fetch(&self, key: &str, target: &Path) -> Result<Metadata, String> {
        let metadata = match self.get_metadata(key).map_err(|e| e.to_string())? {
            Some(parsed) => parsed?,
            None => return Err(format!("`{}` does not exist", self.url.key(key))),
        };
        if read_metadata(target).is_ok_and(|local| local == metadata) {
            return Ok(metadata);
        }
        let name = target
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let partial = target.with_file_name(format!("{name}.download"));
        let io = |what: &str, p: &Path, e: std::io::Error| format!("{what} `{}`: {e}", p.display());
        if partial.exists() {
            std::fs::remove_dir_all(&partial).map_err(|e| io("clearing", &partial, e))?;
        }
        // Made even when no snapshot needs a folder (no stateful operator).
        std::fs::create_dir_all(&partial).map_err(|e| io("creating", &partial, e))?;
        let mut jobs = Vec::new();
        for s in &metadata.snapshots {
            let folder = partial.join(&s.path);
            std::fs::create_dir_all(&folder).map_err(|e| io("creating", &folder, e))?;
            for (name, size) in &s.files {
                let digest = s
                    .digests
                    .get(name)
                    .ok_or_else(|| format!("snapshot `{}` lists `{name}` without its digest", s.path))?;
                let path = folder.join(name);
                if let Some(parent) = path.parent() {
                    std::fs::create_dir_all(parent).map_err(|e| io("creating", parent, e))?;
                }
                jobs.push((self.object(&file_key(digest)), path, *size, digest.clone()));
            }
        }
        for (digest, size) in &metadata.plugins {
            let path = crate::checkpoint::plugins::file_in(&partial, digest);
            let folder = path.parent().expect("in a folder");
            std::fs::create_dir_all(folder).map_err(|e| io("creating", folder, e))?;
            jobs.push((self.object(&file_key(digest)), path, *size, digest.clone()));
        }
        let (client, concurrency) = (self.client.clone(), self.concurrency);
        wait_for(async move {
            futures_util::stream::iter(jobs)
                .map(|(key, path, size, digest)| download_file(client.clone(), key, path, size, digest))
                .buffer_unordered(concurrency)
                .collect::<Vec<_>>()
                .await
                .into_iter()
                .collect::<Result<Vec<()>, String>>()
        })
        .map_err(|e| {
            let _ = std::fs::remove_dir_all(&partial);
            format!("downloading from `{}`: {e}", self.url)
        })?;
        let json = serde_json::to_vec_pretty(&metadata).expect("metadata serialises");
        std::fs::write(partial.join(METADATA), json).map_err(|e| io("writing into", &partial, e))?;
        if target.exists() {
            std::fs::remove_dir_all(target).map_err(|e| io("replacing", target, e))?;
        }
        std::fs::rename(&partial, target).map_err(|e| io("renaming into place", target, e))?;
        read_metadata(target)
    }

    /// The savepoint here, downloaded into the local folder `target`.
    pub fn read_savepoint(&self, target: &Path) -> Result<Metadata, String> {
        self.fetch(METADATA, target)
    }
}

/// Downloads `key` into the file `path`, checking its size and digest.
pub(super) async fn download_file(
    client: Arc<dyn ObjectStore>,
    key: ObjectPath,
    path: PathBuf,
    size: u64,
    digest: String,
) -> Result<(), String> {
    let failed = |e: &dyn std::fmt::Display| format!("`{key}`: {e}");
    let mut stream = client.get(&key).await.map_err(|e| failed(&e))?.into_stream();
    let mut file = tokio::fs::File::create(&path).await.map_err(|e| failed(&e))?;
    let (mut hasher, mut got) = (Sha256::new(), 0u64);
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| failed(&e))?;
        hasher.update(&chunk);
        got += chunk.len() as u64;
        file.write_all(&chunk).await.map_err(|e| failed(&e))?;
    }
    file.flush().await.map_err(|e| failed(&e))?;
    if got != size {
        return Err(format!("`{key}` has {got} bytes, not {size}"));
    }
    if hex::encode(hasher.finalize()) != digest {
        return Err(format!("`{key}` does not match its digest: it is corrupt"));
    }
    file.sync_all().await.map_err(|e| failed(&e))
}
