//! Writing to a store, for `shardfs pack`: put a whole object (multipart above
//! [`MULTIPART_THRESHOLD`]), read one back, delete one, list a folder's names.
//!
//! Reads for mounts go through the [`Store`](super::Store) trait; writing is a separate, small
//! synchronous facade with its own runtime so that the read trait stays narrow. Writes are
//! atomic on every store: a single PUT, or a multipart upload whose object appears only when
//! it completes (a failed upload is aborted). A transient failure is retried a few times with
//! backoff; the same rule as reads decides what is transient ([`StoreError::is_retryable`]).

use super::classify::map_error;
use super::{ObjectStoreBackend, Source, SourceKind, StoreError, StoreOptions};
use bytes::Bytes;
use futures::TryStreamExt;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use std::sync::Arc;
use std::time::Duration;

/// Objects larger than this are uploaded in parts.
pub const MULTIPART_THRESHOLD: usize = 16 << 20;
/// The size of each part of a multipart upload (S3 wants at least 5 MiB but the last).
pub const PART_SIZE: usize = 8 << 20;
/// How many times a write is tried before its error is reported.
const ATTEMPTS: u32 = 4;

/// A writable folder in an object store.
pub struct DestStore {
    inner: Arc<dyn ObjectStore>,
    root: Path,
    /// URL of the folder, without a trailing slash.
    base_url: String,
    runtime: Arc<tokio::runtime::Runtime>,
}

impl std::fmt::Debug for DestStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DestStore({})", self.base_url)
    }
}

/// The write operations a pack needs (so tests may count or fail them).
pub trait PutStore {
    /// Writes the object `name` whole.
    fn put(&self, name: &str, data: &[u8]) -> Result<(), StoreError>;
}

impl DestStore {
    /// Opens the folder `source` (an `s3://`, `gs://` or `az://` URL) for writing.
    pub fn open(source: &Source, opts: &StoreOptions) -> Result<DestStore, StoreError> {
        if matches!(
            source.kind,
            SourceKind::Http { .. } | SourceKind::Local { .. }
        ) {
            return Err(StoreError::InvalidSource {
                source_url: source.canonical().to_string(),
                reason: "cannot write there; give a local path or an s3://, gs:// or az:// URL"
                    .into(),
            });
        }
        let backend = ObjectStoreBackend::open_for_writes(source, opts)?;
        let (inner, root) = backend.client();
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("shardfs-put")
            .enable_all()
            .build()
            .map_err(|e| StoreError::Config {
                source_url: source.canonical().to_string(),
                reason: format!("cannot start I/O runtime: {e}"),
            })?;
        Ok(DestStore {
            inner,
            root,
            base_url: source.canonical().to_string(),
            runtime: Arc::new(runtime),
        })
    }

    /// The folder `name` below this one.
    pub fn child(&self, name: &str) -> DestStore {
        DestStore {
            inner: self.inner.clone(),
            root: self.location(name),
            base_url: format!("{}/{name}", self.base_url),
            runtime: self.runtime.clone(),
        }
    }

    fn location(&self, name: &str) -> Path {
        if self.root.as_ref().is_empty() {
            Path::from(name)
        } else {
            Path::from(format!("{}/{name}", self.root))
        }
    }

    /// The URL of `name` in this folder (the folder itself for `""`).
    pub fn url(&self, name: &str) -> String {
        if name.is_empty() {
            self.base_url.clone()
        } else {
            format!("{}/{name}", self.base_url)
        }
    }

    /// Runs `op` until it succeeds, fails for good, or the attempts run out.
    fn retry<T, F, Fut>(&self, name: &str, op: F) -> Result<T, StoreError>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Result<T, object_store::Error>>,
    {
        let url = self.url(name);
        self.runtime.block_on(async {
            let mut attempt = 0;
            loop {
                attempt += 1;
                match op().await {
                    Ok(v) => return Ok(v),
                    Err(e) => {
                        let e = map_error(e, &url);
                        if attempt >= ATTEMPTS || !e.is_retryable() {
                            return Err(e);
                        }
                        tracing::warn!(url = %url, attempt, error = %e, "write failed; retrying");
                        tokio::time::sleep(Duration::from_millis(200 << attempt)).await;
                    }
                }
            }
        })
    }

    /// Names directly in this folder: objects and sub-folders.
    pub fn list_names(&self) -> Result<Vec<String>, StoreError> {
        let prefix = (!self.root.as_ref().is_empty()).then_some(&self.root);
        let listing = self.retry("", || self.inner.list_with_delimiter(prefix))?;
        let last = |p: &Path| p.parts().next_back().map(|s| s.as_ref().to_string());
        let mut names: Vec<String> = listing
            .objects
            .iter()
            .filter_map(|m| last(&m.location))
            .chain(listing.common_prefixes.iter().filter_map(last))
            .collect();
        names.sort();
        Ok(names)
    }

    /// Reads a whole object.
    pub fn get(&self, name: &str) -> Result<Vec<u8>, StoreError> {
        let loc = self.location(name);
        let bytes = self.retry(name, || async { self.inner.get(&loc).await?.bytes().await })?;
        Ok(bytes.to_vec())
    }

    /// Deletes an object (a missing one is not an error).
    pub fn delete(&self, name: &str) -> Result<(), StoreError> {
        let loc = self.location(name);
        match self.retry(name, || self.inner.delete(&loc)) {
            Err(e) if e.is_not_found() => Ok(()),
            r => r,
        }
    }

    async fn put_multipart(&self, loc: &Path, data: &Bytes) -> Result<(), object_store::Error> {
        let mut upload = self.inner.put_multipart(loc).await?;
        let mut parts = Vec::new();
        for chunk in data.chunks(PART_SIZE) {
            let part = data.slice_ref(chunk);
            parts.push(upload.put_part(PutPayload::from_bytes(part)));
        }
        // Parts go up concurrently; the object exists only once the upload completes.
        let sent = futures::future::try_join_all(parts).await;
        match sent {
            Ok(_) => upload.complete().await.map(|_| ()),
            Err(e) => {
                let _ = upload.abort().await;
                Err(e)
            }
        }
    }
}

impl DestStore {
    /// [`PutStore::put`] of bytes the upload keeps (and signs, and sends) without copying.
    pub fn put_bytes(&self, name: &str, bytes: Bytes) -> Result<(), StoreError> {
        let loc = self.location(name);
        if bytes.len() > MULTIPART_THRESHOLD {
            self.retry(name, || self.put_multipart(&loc, &bytes))
        } else {
            self.retry(name, || async {
                self.inner
                    .put(&loc, PutPayload::from_bytes(bytes.clone()))
                    .await
                    .map(|_| ())
            })
        }
    }
}

impl PutStore for DestStore {
    fn put(&self, name: &str, data: &[u8]) -> Result<(), StoreError> {
        self.put_bytes(name, Bytes::copy_from_slice(data))
    }
}

/// Lists every object under a folder (recursively), as (relative name, size), sorted.
pub fn list_recursive(store: &DestStore) -> Result<Vec<(String, u64)>, StoreError> {
    let prefix = (!store.root.as_ref().is_empty()).then_some(store.root.clone());
    let root_parts = store.root.parts().count();
    let metas: Vec<_> = store.retry("", || {
        let prefix = prefix.clone();
        async move {
            store
                .inner
                .list(prefix.as_ref())
                .try_collect::<Vec<_>>()
                .await
        }
    })?;
    let mut out: Vec<(String, u64)> = metas
        .into_iter()
        .map(|m| {
            let rel: Vec<String> = m
                .location
                .parts()
                .skip(root_parts)
                .map(|p| p.as_ref().to_string())
                .collect();
            (rel.join("/"), m.size)
        })
        .collect();
    out.sort();
    Ok(out)
}
