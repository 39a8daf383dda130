//! A small in-memory shard store: fetch, verify, decompress, hold within a byte budget and
//! evict by furthest next use. It stands in where no disk cache is configured.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Condvar, Mutex, OnceLock};

use super::dataset::ShardStore;
use crate::mds;

/// Reads the stored (possibly compressed) bytes of a shard file by basename.
pub type FetchFn = Box<dyn Fn(&str) -> Result<Vec<u8>, String> + Send + Sync>;

/// Ranks shards for eviction: larger = needed later (evicted first).
pub type NextUseFn = Arc<OnceLock<Box<dyn Fn(usize) -> u64 + Send + Sync>>>;

type Bytes = Arc<Vec<u8>>;

enum Slot {
    Loading,
    Ready(Bytes),
}

/// Shards of one stream held in memory.
pub struct MemoryShards {
    index: mds::Index,
    fetch: FetchFn,
    limit: u64,
    next_use: NextUseFn,
    slots: Mutex<(HashMap<usize, Slot>, u64)>,
    loaded: Condvar,
    hits: AtomicU64,
    misses: AtomicU64,
    fetched_shards: AtomicU64,
    fetched_bytes: AtomicU64,
    evictions: AtomicU64,
}

impl MemoryShards {
    /// Holds at most `limit` bytes of decompressed shards of `index`, fetched with `fetch`.
    pub fn new(index: mds::Index, fetch: FetchFn, limit: u64, next_use: NextUseFn) -> Self {
        Self {
            index,
            fetch,
            limit,
            next_use,
            slots: Mutex::new((HashMap::new(), 0)),
            loaded: Condvar::new(),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            fetched_shards: AtomicU64::new(0),
            fetched_bytes: AtomicU64::new(0),
            evictions: AtomicU64::new(0),
        }
    }

    fn load(&self, shard: usize) -> Result<Vec<u8>, String> {
        let entry = self
            .index
            .shards()
            .get(shard)
            .ok_or_else(|| format!("no shard {shard}"))?;
        let stored = entry.stored_file();
        let data = (self.fetch)(&stored.basename)?;
        self.fetched_shards.fetch_add(1, Relaxed);
        self.fetched_bytes.fetch_add(data.len() as u64, Relaxed);
        mds::verify_hashes(stored, &data).map_err(|e| e.to_string())?;
        let raw = match &entry.compression {
            Some(c) => mds::decompress(c, &data, Some(entry.raw.bytes))
                .map_err(|e| format!("{}: {e}", stored.basename))?,
            None => data,
        };
        mds::ShardView::new(entry, &raw).map_err(|e| e.to_string())?;
        Ok(raw)
    }

    fn evict(&self, map: &mut HashMap<usize, Slot>, used: &mut u64) {
        while *used > self.limit {
            let rank = |s: usize| self.next_use.get().map(|f| f(s)).unwrap_or(u64::MAX);
            let victim = map
                .iter()
                .filter_map(|(s, slot)| match slot {
                    Slot::Ready(b) if Arc::strong_count(b) == 1 => {
                        Some((rank(*s), *s, b.len() as u64))
                    }
                    _ => None,
                })
                .max();
            let Some((_, s, len)) = victim else { break };
            map.remove(&s);
            *used -= len;
            self.evictions.fetch_add(1, Relaxed);
        }
    }
}

impl ShardStore for MemoryShards {
    fn get(&self, shard: usize) -> Result<Arc<dyn AsRef<[u8]> + Send + Sync>, String> {
        let mut g = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        let mut counted = false;
        loop {
            match g.0.get(&shard) {
                Some(Slot::Ready(b)) => {
                    if !counted {
                        self.hits.fetch_add(1, Relaxed);
                    }
                    return Ok(b.clone() as Arc<dyn AsRef<[u8]> + Send + Sync>);
                }
                Some(Slot::Loading) => {
                    if !counted {
                        self.misses.fetch_add(1, Relaxed);
                        counted = true;
                    }
                    g = self.loaded.wait(g).unwrap_or_else(|e| e.into_inner());
                }
                None => break,
            }
        }
        if !counted {
            self.misses.fetch_add(1, Relaxed);
        }
        g.0.insert(shard, Slot::Loading);
        drop(g);
        let result = self.load(shard);
        let mut g = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        let out = match result {
            Ok(raw) => {
                let b = Arc::new(raw);
                let (map, used) = &mut *g;
                *used += b.len() as u64;
                map.insert(shard, Slot::Ready(b.clone()));
                self.evict(map, used);
                Ok(b as Arc<dyn AsRef<[u8]> + Send + Sync>)
            }
            Err(e) => {
                g.0.remove(&shard);
                Err(e)
            }
        };
        self.loaded.notify_all();
        out
    }

    fn is_resident(&self, shard: usize) -> bool {
        let g = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        matches!(g.0.get(&shard), Some(Slot::Ready(_)))
    }

    fn status(&self) -> serde_json::Value {
        let used = self.slots.lock().map(|g| g.1).unwrap_or(0);
        serde_json::json!({
            "kind": "memory",
            "bytes_fetched": self.fetched_bytes.load(Relaxed),
            "shards_fetched": self.fetched_shards.load(Relaxed),
            "hits": self.hits.load(Relaxed),
            "misses": self.misses.load(Relaxed),
            "evictions": self.evictions.load(Relaxed),
            "bytes_resident": used,
            "limit": self.limit,
        })
    }
}
