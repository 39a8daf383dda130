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
    /// Belady with prefetching: a read that waits takes the furthest shard whatever its next
    /// use; a prefetch only evicts a shard no rank plans to read or one needed strictly later
    /// than the one it brings in, else it is refused (fetching now would cost a refetch of
    /// the victim before the incoming shard is even read).
    fn choose_victim(&self, ctx: &EvictionContext<'_>) -> Option<usize> {
        let ra = self.readahead.get().and_then(Weak::upgrade);
        let next_use = |shard: usize| {
            let global = u32::try_from(shard)
                .ok()
                .and_then(|s| s.checked_add(self.first_shard));
            match (&ra, global) {
                (Some(r), Some(g)) => r.next_use(g),
                _ => u64::MAX,
            }
        };
        let (victim, victim_next) = ctx
            .candidates
            .iter()
            .filter(|c| !ctx.pinned.contains(&c.shard) && c.shard != ctx.incoming)
            .map(|c| (c, next_use(c.shard)))
            .max_by_key(|(c, next)| (*next, std::cmp::Reverse(c.last_use)))?;
        if ctx.prefetch
            && ra.is_some()
            && victim_next != u64::MAX
            && victim_next <= next_use(ctx.incoming)
        {
            return None;
        }
        Some(victim.shard)
    }
}
