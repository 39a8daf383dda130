//! `CountingStore`: counts requests and bytes per operation and per key.
//!
//! Tests use it to prove what a code path asked the network for ("one ranged GET of the
//! header, not the whole shard"; "a remount refetches only the interrupted shard").

use super::{ObjectInfo, ObjectKey, Store, StoreFuture};
use bytes::Bytes;
use std::collections::HashMap;
use std::ops::Range;
use std::sync::{Arc, Mutex};

/// Requests seen for one key (or in total).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RequestCounts {
    /// `head` calls.
    pub heads: u64,
    /// `get_range` calls.
    pub range_gets: u64,
    /// Whole-object `get` calls.
    pub gets: u64,
    /// `list` calls.
    pub lists: u64,
    /// Bytes returned by successful `get` and `get_range` calls.
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

impl Store for CountingStore {
    fn url_of(&self, key: &ObjectKey) -> String {
        self.inner.url_of(key)
    }

    fn head<'a>(&'a self, key: &'a ObjectKey) -> StoreFuture<'a, ObjectInfo> {
        Box::pin(async move {
            self.bump(key.as_str(), |c| c.heads += 1);
            self.inner.head(key).await
        })
    }

    fn get_range<'a>(&'a self, key: &'a ObjectKey, range: Range<u64>) -> StoreFuture<'a, Bytes> {
        Box::pin(async move {
            self.bump(key.as_str(), |c| c.range_gets += 1);
            let b = self.inner.get_range(key, range).await?;
            self.bump(key.as_str(), |c| c.bytes += b.len() as u64);
            Ok(b)
        })
    }

    fn get<'a>(&'a self, key: &'a ObjectKey) -> StoreFuture<'a, Bytes> {
        Box::pin(async move {
            self.bump(key.as_str(), |c| c.gets += 1);
            let b = self.inner.get(key).await?;
            self.bump(key.as_str(), |c| c.bytes += b.len() as u64);
            Ok(b)
        })
    }

    fn get_fetched<'a>(&'a self, key: &'a ObjectKey) -> StoreFuture<'a, super::Fetched> {
        Box::pin(async move {
            self.bump(key.as_str(), |c| c.gets += 1);
            let f = self.inner.get_fetched(key).await?;
            self.bump(key.as_str(), |c| c.bytes += f.bytes.len() as u64);
            Ok(f)
        })
    }

    fn checksums<'a>(&'a self, key: &'a ObjectKey) -> StoreFuture<'a, super::StoreChecksums> {
        Box::pin(async move {
            self.bump(key.as_str(), |c| c.heads += 1);
            self.inner.checksums(key).await
        })
    }

    fn get_part_into<'a>(
        &'a self,
        key: &'a ObjectKey,
        range: Range<u64>,
        dest: &'a mut [u8],
    ) -> StoreFuture<'a, super::EtagMd5s> {
        Box::pin(async move {
            self.bump(key.as_str(), |c| c.range_gets += 1);
            let tags = self.inner.get_part_into(key, range, &mut *dest).await?;
            self.bump(key.as_str(), |c| c.bytes += dest.len() as u64);
            Ok(tags)
        })
    }

    fn list<'a>(&'a self, prefix: Option<&'a ObjectKey>) -> StoreFuture<'a, Vec<ObjectInfo>> {
        Box::pin(async move {
            self.bump(prefix.map(|p| p.as_str()).unwrap_or(""), |c| c.lists += 1);
            self.inner.list(prefix).await
        })
    }
}
