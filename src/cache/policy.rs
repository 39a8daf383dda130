//! Eviction policies: which resident shard to drop when a new one needs room.
//!
//! The cache owns the mechanism (budget, pins, files); a policy only chooses. It is called
//! with the lock held, so it must be quick and must not call back into the cache.
//!
//! Contract of [`EvictionPolicy::choose_victim`]:
//! - `ctx.candidates` holds every shard that may be evicted right now: resident, not
//!   pinned by an open [`super::ShardHandle`], not being filled. Pinned shards never
//!   appear there; `ctx.pinned` lists them for policies that want to know.
//! - Return one candidate's id, or `None` to refuse (the cache then reports
//!   [`super::CacheError::Full`]). Returning a non-candidate is treated as `None`.
//! - The cache calls it repeatedly until `usage + need <= limit`.
//!
//! The readahead scheduler implements furthest-next-use (Belady) with its knowledge of every
//! rank's future; [`LruPolicy`] is the default when no future is known.

/// One evictable shard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Candidate {
    /// Shard number in index.json.
    pub shard: usize,
    /// Its size on disk.
    pub bytes: u64,
    /// Logical time of its last use (larger = more recent); survives restarts via file mtimes.
    pub last_use: u64,
}

/// What a policy sees when asked for a victim.
#[derive(Debug)]
pub struct EvictionContext<'a> {
    /// Evictable shards (resident, unpinned, not filling), in no particular order.
    pub candidates: &'a [Candidate],
    /// Shards pinned by open readers (never evictable now).
    pub pinned: &'a [usize],
    /// The shard that needs room.
    pub incoming: usize,
    /// Bytes it needs.
    pub need: u64,
    /// Bytes on disk plus bytes reserved by fills in progress.
    pub usage: u64,
    /// The budget.
    pub limit: u64,
    /// No reader waits for the incoming shard (readahead): a policy should refuse rather than
    /// evict a shard needed no later than the incoming one.
    pub prefetch: bool,
}

/// Chooses which shard to evict. See the module notes for the contract.
pub trait EvictionPolicy: Send + Sync + std::fmt::Debug {
    /// Picks one of `ctx.candidates` to evict, or `None` to refuse.
    fn choose_victim(&self, ctx: &EvictionContext<'_>) -> Option<usize>;

    /// Told when a shard is read (cache hit or just filled). Default: nothing.
    fn touched(&self, _shard: usize) {}

    /// Told when a shard becomes resident. Default: nothing.
    fn inserted(&self, _shard: usize, _bytes: u64) {}

    /// Told when a shard is evicted. Default: nothing.
    fn removed(&self, _shard: usize) {}
}

/// Least recently used, by the cache's logical clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct LruPolicy;

impl EvictionPolicy for LruPolicy {
    fn choose_victim(&self, ctx: &EvictionContext<'_>) -> Option<usize> {
        ctx.candidates
            .iter()
            .min_by_key(|c| (c.last_use, c.shard))
            .map(|c| c.shard)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lru_picks_the_oldest_candidate() {
        let c = [
            Candidate {
                shard: 3,
                bytes: 10,
                last_use: 7,
            },
            Candidate {
                shard: 1,
                bytes: 10,
                last_use: 2,
            },
            Candidate {
                shard: 2,
                bytes: 10,
                last_use: 9,
            },
        ];
        let ctx = EvictionContext {
            candidates: &c,
            pinned: &[0],
            incoming: 4,
            need: 10,
            usage: 40,
            limit: 40,
            prefetch: false,
        };
        assert_eq!(LruPolicy.choose_victim(&ctx), Some(1));
        let ctx = EvictionContext {
            candidates: &[],
            ..ctx
        };
        assert_eq!(LruPolicy.choose_victim(&ctx), None);
    }
}
