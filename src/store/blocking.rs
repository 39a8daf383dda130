//! `BlockingStore`: the [`Store`] trait for synchronous callers (FUSE threads, the CLI).
//!
//! It owns a small multi-threaded tokio runtime. Callers must not be inside a tokio runtime
//! themselves (FUSE worker threads and `main` are not); from async code use the store
//! directly.

use super::{ObjectInfo, ObjectKey, Store, StoreError, StoreExt};
use bytes::Bytes;
use std::ops::Range;
use std::sync::Arc;

/// A synchronous facade over an async [`Store`].
#[derive(Debug, Clone)]
pub struct BlockingStore {
    store: Arc<dyn Store>,
    runtime: Arc<tokio::runtime::Runtime>,
}

impl BlockingStore {
    /// Starts a runtime with `worker_threads` threads (at least 1) for `store`.
    pub fn new(store: Arc<dyn Store>, worker_threads: usize) -> Result<Self, StoreError> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(worker_threads.max(1))
            .thread_name("shardfs-store")
            .enable_all()
            .build()
            .map_err(|e| StoreError::Config {
                source_url: store.url_of_root(),
                reason: format!("cannot start I/O runtime: {e}"),
            })?;
        Ok(BlockingStore {
            store,
            runtime: Arc::new(runtime),
        })
    }

    /// The async store underneath.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// The runtime, for spawning background work (prefetch) next to blocking calls.
    pub fn runtime(&self) -> &Arc<tokio::runtime::Runtime> {
        &self.runtime
    }

    /// See [`Store::url_of`].
    pub fn url_of(&self, key: &ObjectKey) -> String {
        self.store.url_of(key)
    }

    /// Runs `fut` to completion on the runtime, carrying the calling thread's demand mark
    /// (see [`super::demand_scope`]): for the store's functions that have no method here
    /// ([`super::get_in_parts`], [`super::refetch_differing_parts`]). The future runs on
    /// this thread (`block_on`), so do the callbacks it makes: a checksum fed by a
    /// [`super::Landing`] uses the thread that waits for the download anyway.
    pub fn run<F: std::future::Future>(&self, fut: F) -> F::Output {
        self.runtime.block_on(super::urgency::carry(fut))
    }

    /// See [`Store::head`].
    pub fn head(&self, key: &ObjectKey) -> Result<ObjectInfo, StoreError> {
        self.run(self.store.head(key))
    }

    /// See [`StoreExt::get_range`].
    pub fn get_range(&self, key: &ObjectKey, range: Range<u64>) -> Result<Bytes, StoreError> {
        self.run(self.store.get_range(key, range))
    }

    /// Two GETs of the same `range` at once, for bytes no checksum covers: damage in transit
    /// to one of them shows as a difference, at the latency of one request.
    pub fn get_range_twice(
        &self,
        key: &ObjectKey,
        range: Range<u64>,
    ) -> (Result<Bytes, StoreError>, Result<Bytes, StoreError>) {
        self.run(async {
            futures::join!(
                self.store.get_range(key, range.clone()),
                self.store.get_range(key, range)
            )
        })
    }

    /// See [`StoreExt::get`].
    pub fn get(&self, key: &ObjectKey) -> Result<Bytes, StoreError> {
        self.run(self.store.get(key))
    }

    /// See [`StoreExt::get_fetched`].
    pub fn get_fetched(&self, key: &ObjectKey) -> Result<super::Fetched, StoreError> {
        self.run(self.store.get_fetched(key))
    }

    /// See [`Store::checksums`].
    pub fn checksums(&self, key: &ObjectKey) -> Result<super::StoreChecksums, StoreError> {
        self.run(self.store.checksums(key))
    }

    /// See [`Store::list`].
    pub fn list(&self, prefix: Option<&ObjectKey>) -> Result<Vec<ObjectInfo>, StoreError> {
        self.run(self.store.list(prefix))
    }
}

trait RootUrl {
    fn url_of_root(&self) -> String;
}

impl RootUrl for Arc<dyn Store> {
    fn url_of_root(&self) -> String {
        let probe = ObjectKey::new("index.json")
            .map(|k| self.url_of(&k))
            .unwrap_or_default();
        probe
            .trim_end_matches("index.json")
            .trim_end_matches('/')
            .to_string()
    }
}
