//! The memory tier: parsed shard headers and sample bytes, bounded in bytes (moka, TinyLFU).
//!
//! Headers get a quarter of `--memory-limit` (they are small and make `stat` and every
//! read O(1)); samples the rest. Entries are immutable bytes of a dataset whose identity
//! includes its index digest, so nothing here ever needs invalidating.

use crate::mds::ShardHeader;
use bytes::Bytes;
use moka::sync::Cache;
use std::sync::Arc;

pub(crate) struct MemoryTier {
    headers: Cache<usize, Arc<ShardHeader>>,
    samples: Option<Cache<(usize, u32), Bytes>>,
}

impl MemoryTier {
    pub fn new(limit: u64) -> Self {
        let header_budget = (limit / 4).max(1 << 20);
        let headers = Cache::builder()
            .max_capacity(header_budget)
            .weigher(|_, h: &Arc<ShardHeader>| {
                u32::try_from(64 + 4 * (u64::from(h.num_samples()) + 1)).unwrap_or(u32::MAX)
            })
            .build();
        let sample_budget = limit.saturating_sub(limit / 4);
        let samples = (sample_budget > 0).then(|| {
            Cache::builder()
                .max_capacity(sample_budget)
                .weigher(|_, b: &Bytes| u32::try_from(b.len() + 32).unwrap_or(u32::MAX))
                .build()
        });
        MemoryTier { headers, samples }
    }

    pub fn header(&self, shard: usize) -> Option<Arc<ShardHeader>> {
        self.headers.get(&shard)
    }

    pub fn put_header(&self, shard: usize, h: Arc<ShardHeader>) {
        self.headers.insert(shard, h);
    }

    pub fn sample(&self, shard: usize, i: u32) -> Option<Bytes> {
        self.samples.as_ref()?.get(&(shard, i))
    }

    pub fn put_sample(&self, shard: usize, i: u32, b: Bytes) {
        if let Some(s) = &self.samples {
            s.insert((shard, i), b);
        }
    }
}
