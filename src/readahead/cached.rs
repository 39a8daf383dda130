//! `CachedStreams`: the node's shard caches (one per stream) as the scheduler's
//! [`ShardSource`], reached directly, with the plan's [`SampleMap`] for where samples live.

use super::ShardSource;
use crate::cache::{Advice, CacheError, ShardCache};
use crate::fetch::ShardFault;
use crate::plan::SampleMap;
use std::sync::Arc;

/// Every stream's cache, in stream order, numbered by `map`.
pub struct CachedStreams {
    map: Arc<SampleMap>,
    caches: Vec<Arc<ShardCache>>,
}

impl CachedStreams {
    /// The caches of the streams `map` numbers, in stream order.
    pub fn new(map: Arc<SampleMap>, caches: Vec<Arc<ShardCache>>) -> Self {
        Self { map, caches }
    }

    /// The cache of global shard `shard` and the shard's number in it.
    fn cache_of(&self, shard: u32) -> Option<(&Arc<ShardCache>, usize)> {
        let (stream, local) = self.map.stream_of_shard(shard)?;
        Some((self.caches.get(stream)?, local))
    }
}

impl ShardSource for CachedStreams {
    fn shard_of(&self, sample: u64) -> Option<u32> {
        self.map.locate(sample).map(|at| at.global_shard)
    }

    fn shard_bytes(&self, shard: u32) -> u64 {
        self.map.shard_bytes(shard)
    }

    fn is_resident(&self, shard: u32) -> bool {
        self.cache_of(shard)
            .is_some_and(|(cache, local)| cache.is_resident(local))
    }

    fn fetch(&self, shard: u32, urgent: bool) -> Result<(), CacheError> {
        let (cache, local) = self.cache_of(shard).ok_or(ShardFault::NoSuchShard {
            shard: shard as usize,
            shards: self.map.num_shards(),
        })?;
        let fetched = if urgent {
            cache.ensure_if_room_for_reader(local)?
        } else {
            cache.ensure_if_room(local)?
        };
        if !fetched {
            tracing::debug!(shard = local, "readahead skipped: no room in the cache now");
        }
        Ok(())
    }

    fn advise(&self, sample: u64) -> Advice {
        self.map.locate(sample).map_or(Advice::Skipped, |at| {
            self.caches.get(at.stream).map_or(Advice::Skipped, |cache| {
                cache.advise_sample(at.shard, at.index)
            })
        })
    }
}
