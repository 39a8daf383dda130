//! Furthest-next-use eviction for the shard cache, from the plan's next-use table (which the
//! readahead's planner keeps).

use std::sync::Arc;

use crate::cache::{EvictionContext, EvictionPolicy};
use crate::plan::NextUse;

/// Evicts the unpinned shard whose next planned use is furthest away (never planned = first),
/// least recently used among equals. One instance per stream: `first_shard` turns the
/// stream's shard numbers into the node's global shard numbers.
pub struct FurthestNextUse {
    next_use: Arc<NextUse>,
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
    /// A policy that reads `next_use` (until a plan fills it, it behaves as LRU).
    pub fn new(next_use: Arc<NextUse>, first_shard: u32) -> Self {
        Self {
            next_use,
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
        let next_use = |shard: usize| {
            u32::try_from(shard)
                .ok()
                .and_then(|s| s.checked_add(self.first_shard))
                .map_or(u64::MAX, |g| self.next_use.get(g))
        };
        let (victim, victim_next) = ctx
            .candidates
            .iter()
            .filter(|c| !ctx.pinned.contains(&c.shard) && c.shard != ctx.incoming)
            .map(|c| (c, next_use(c.shard)))
            .max_by_key(|(c, next)| (*next, std::cmp::Reverse(c.last_use)))?;
        if ctx.prefetch && victim_next != u64::MAX && victim_next <= next_use(ctx.incoming) {
            return None;
        }
        Some(victim.shard)
    }
}
