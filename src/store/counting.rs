//! `CountingStore`: counts requests and bytes per operation and per key.
//!
//! Tests use it to prove what a code path asked the network for ("one ranged GET of the
//! header, not the whole shard"; "a remount refetches only the interrupted shard").

use super::{Fetched, GetOptions, ObjectInfo, ObjectKey, Store, StoreChecksums, StoreError};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Requests seen for one key (or in total).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RequestCounts {
    /// `head` calls.
    pub heads: u64,
    /// Ranged GETs (`get_range`, `get_part_into`).
    pub range_gets: u64,
    /// Whole-object GETs (`get`, `get_fetched`).
    pub gets: u64,
    /// `list` calls.
    pub lists: u64,
    /// Bytes returned by successful GETs.
    pub bytes: u64,
}

impl RequestCounts {
    /// All requests of any kind.
    pub fn requests(&self) -> u64 {
        self.heads + self.range_gets + self.gets + self.lists
    }
}

/// A store that forwards to `inner` and counts every request it forwards.
#[derive(Debug)]
pub struct CountingStore {
    inner: Arc<dyn Store>,
    counts: Mutex<HashMap<String, RequestCounts>>,
}

impl CountingStore {
    /// Wraps `inner`.
    pub fn new(inner: Arc<dyn Store>) -> Self {
        CountingStore {
            inner,
            counts: Mutex::new(HashMap::new()),
        }
    }

    fn bump(&self, key: &str, f: impl FnOnce(&mut RequestCounts)) {
        let mut map = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        f(map.entry(key.to_string()).or_default());
    }

    /// Counts for one key (listings are recorded under their prefix, or `""`).
    pub fn for_key(&self, key: &str) -> RequestCounts {
        self.counts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(key)
            .copied()
            .unwrap_or_default()
    }

    /// Sum over all keys.
    pub fn total(&self) -> RequestCounts {
        let map = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        map.values().fold(RequestCounts::default(), |mut acc, c| {
            acc.heads += c.heads;
            acc.range_gets += c.range_gets;
            acc.gets += c.gets;
            acc.lists += c.lists;
            acc.bytes += c.bytes;
            acc
        })
    }

    /// Forgets all counts.
    pub fn reset(&self) {
        self.counts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
    }
}

#[async_trait::async_trait]
impl Store for CountingStore {
    fn url_of(&self, key: &ObjectKey) -> String {
        self.inner.url_of(key)
    }

    async fn head(&self, key: &ObjectKey) -> Result<ObjectInfo, StoreError> {
        self.bump(key.as_str(), |c| c.heads += 1);
        self.inner.head(key).await
    }

    async fn get_opts(
        &self,
        key: &ObjectKey,
        mut opts: GetOptions<'_>,
    ) -> Result<Fetched, StoreError> {
        match opts.range {
            Some(_) => self.bump(key.as_str(), |c| c.range_gets += 1),
            None => self.bump(key.as_str(), |c| c.gets += 1),
        }
        let f = self.inner.get_opts(key, opts.reborrow()).await?;
        let n = opts.into.map_or(f.bytes.len(), |d| d.len()) as u64;
        self.bump(key.as_str(), |c| c.bytes += n);
        Ok(f)
    }

    async fn checksums(&self, key: &ObjectKey) -> Result<StoreChecksums, StoreError> {
        self.bump(key.as_str(), |c| c.heads += 1);
        self.inner.checksums(key).await
    }

    async fn list(&self, prefix: Option<&ObjectKey>) -> Result<Vec<ObjectInfo>, StoreError> {
        self.bump(prefix.map(|p| p.as_str()).unwrap_or(""), |c| c.lists += 1);
        self.inner.list(prefix).await
    }
}
