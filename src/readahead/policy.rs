//! Furthest-next-use eviction for the shard cache, from the readahead plan.

use std::sync::{Arc, OnceLock, Weak};

use super::Readahead;
use crate::cache::{EvictionContext, EvictionPolicy};

/// Evicts the unpinned shard whose next planned use is furthest away (never planned = first),
/// least recently used among equals. One instance per stream: `first_shard` turns the
/// stream's shard numbers into the node's global shard numbers.
pub struct FurthestNextUse {
    readahead: Arc<OnceLock<Weak<Readahead>>>,
    first_shard: u32,
}

impl std::fmt::Debug for FurthestNextUse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FurthestNextUse")
            .field("first_shard", &self.first_shard)
            .finish_non_exhaustive()
    }
}

impl FurthestNextUse {
    /// A policy that asks the readahead set into `readahead` once it exists (until then it
    /// behaves as LRU).
    pub fn new(readahead: Arc<OnceLock<Weak<Readahead>>>, first_shard: u32) -> Self {
        Self {
            readahead,
            first_shard,
        }
    }
}

impl EvictionPolicy for FurthestNextUse {
    fn choose_victim(&self, ctx: &EvictionContext<'_>) -> Option<usize> {
        let ra = self.readahead.get().and_then(Weak::upgrade);
        ctx.candidates
            .iter()
            .filter(|c| !ctx.pinned.contains(&c.shard) && c.shard != ctx.incoming)
            .max_by_key(|c| {
                let next = ra
                    .as_ref()
                    .map(|r| r.next_use(self.first_shard + c.shard as u32))
                    .unwrap_or(u64::MAX);
                (next, std::cmp::Reverse(c.last_use))
            })
            .map(|c| c.shard)
    }
}
