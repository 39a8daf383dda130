//! The memory tier: parsed shard headers and sample bytes, bounded in bytes (moka, TinyLFU).
//!
//! The tier's budget is `CacheOptions::memory_limit` (the part of `--memory-limit` not kept
//! for downloads). Headers get a quarter of it (they are small and make `stat` and every
//! read O(1)); samples the rest. Entries are immutable bytes of a dataset whose identity
//! includes its index digest, so nothing here ever needs invalidating. Entries from ranged
//! reads (not hash-checked) are kept apart from verified ones (see [`Provenance`]).

use crate::mds::ShardHeader;
use bytes::Bytes;
use moka::sync::Cache;
use std::sync::Arc;

pub(crate) struct MemoryTier {
    sample_budget: u64,
    headers: Cache<(usize, Provenance), Arc<ShardHeader>>,
    samples: Option<Cache<(usize, u32, Provenance), Bytes>>,
}

/// Where an entry's bytes came from. Only `Verified` entries (parsed from a shard whose size
/// and hash were checked) may be served as file contents; `Ranged` entries (ranged GETs of an
/// uncompressed remote shard, which no hash covers) only answer `stat` before the shard is
/// downloaded, and are never returned where a verified entry is asked for.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub(crate) enum Provenance {
    /// From a verified shard (or its cached file).
    Verified,
    /// From a ranged GET, checked only for structure.
    Ranged,
}

impl MemoryTier {
    pub fn new(limit: u64) -> Self {
        let header_budget = (limit / 4).max(1 << 20);
        let headers = Cache::builder()
            .max_capacity(header_budget)
            .weigher(|_, h: &Arc<ShardHeader>| {
                u32::try_from(Self::header_weight(h)).unwrap_or(u32::MAX)
            })
            .build();
        let sample_budget = limit.saturating_sub(limit / 4);
        let samples = (sample_budget > 0).then(|| {
            Cache::builder()
                .max_capacity(sample_budget)
                .weigher(|_, b: &Bytes| u32::try_from(b.len() + 32).unwrap_or(u32::MAX))
                .build()
        });
        MemoryTier {
            sample_budget,
            headers,
            samples,
        }
    }

    /// Bytes the sample cache may hold.
    pub fn sample_budget(&self) -> u64 {
        self.samples.as_ref().map_or(0, |_| self.sample_budget)
    }

    /// The bytes a header counts for in the tier's bound (its offsets, and a little more).
    pub fn header_weight(h: &ShardHeader) -> u64 {
        64 + 4 * (u64::from(h.num_samples()) + 1)
    }

    /// Bytes held now (as weighed against the budget; moka settles its count lazily, so
    /// this may lag a few inserts behind).
    pub fn bytes(&self) -> u64 {
        self.headers.weighted_size() + self.samples.as_ref().map_or(0, |s| s.weighted_size())
    }

    /// The verified header of `shard`, if held.
    pub fn header(&self, shard: usize) -> Option<Arc<ShardHeader>> {
        self.headers.get(&(shard, Provenance::Verified))
    }

    /// The header of `shard`, verified if held, else one from a ranged read.
    pub fn header_any(&self, shard: usize) -> Option<Arc<ShardHeader>> {
        self.header(shard)
            .or_else(|| self.headers.get(&(shard, Provenance::Ranged)))
    }

    pub fn put_header(&self, shard: usize, trust: Provenance, h: Arc<ShardHeader>) {
        self.headers.insert((shard, trust), h);
    }

    /// The verified bytes of sample `i` of `shard`, if held.
    pub fn sample(&self, shard: usize, i: u32) -> Option<Bytes> {
        self.samples
            .as_ref()?
            .get(&(shard, i, Provenance::Verified))
    }

    /// Whether the verified bytes of sample `i` of `shard` are held (not counted as a use).
    pub fn contains_sample(&self, shard: usize, i: u32) -> bool {
        self.samples
            .as_ref()
            .is_some_and(|s| s.contains_key(&(shard, i, Provenance::Verified)))
    }

    /// Sample bytes, verified if held, else from a ranged read.
    pub fn sample_any(&self, shard: usize, i: u32) -> Option<Bytes> {
        let s = self.samples.as_ref()?;
        s.get(&(shard, i, Provenance::Verified))
            .or_else(|| s.get(&(shard, i, Provenance::Ranged)))
    }

    pub fn put_sample(&self, shard: usize, i: u32, trust: Provenance, b: Bytes) {
        if let Some(s) = &self.samples {
            s.insert((shard, i, trust), b);
        }
    }
}
