//! Memory-tier admission: what the tier and the samples read ahead may take while downloads
//! borrow part of their share of `--memory-limit`.

use std::sync::Arc;

use bytes::Bytes;

use super::ShardCache;
use crate::cache::memory::{MemoryTier, Provenance};
use crate::mds::ShardHeader;

impl ShardCache {
    /// Bytes the memory tier and the samples read ahead hold now (both within `memory_limit`).
    pub(super) fn tier_held(&self) -> u64 {
        self.memory.bytes().saturating_add(self.preloader.bytes())
    }

    /// Bytes of the tier's share unused now, which downloads may borrow (see
    /// `DownloadBudget::acquire_with_loan`). moka settles its count lazily, so a loan can
    /// overshoot by the few inserts it lags behind.
    pub(super) fn tier_unused(&self) -> u64 {
        self.opts.memory_limit.saturating_sub(self.tier_held())
    }

    /// Whether `len` more bytes may go into the tier or the read-ahead now: always, unless
    /// downloads have borrowed part of the tier's share, which then stays free for them until
    /// they give it back. Borrowed bytes kept in buffers for the next downloads are taken
    /// back first, as many as `len` needs (so inserts that go in whatever the answer ask it
    /// too: [`ShardCache::tier_put_sample`], [`ShardCache::tier_put_header`]).
    pub(super) fn tier_has_room(&self, len: u64) -> bool {
        let lent = self.downloads.lent();
        if lent == 0 {
            // Nothing borrowed (every warm read): no count of the tier taken.
            return true;
        }
        let held = self.tier_held().saturating_add(len);
        let fits = |lent: u64| held.saturating_add(lent) <= self.opts.memory_limit;
        fits(lent)
            || (self
                .downloads
                .free_kept_past(self.opts.memory_limit.saturating_sub(held))
                > 0
                && fits(self.downloads.lent()))
    }

    /// Puts a verified or ranged header into the tier, whatever room it has (headers are
    /// small, and the tier's own bound evicts), after taking back kept download buffers.
    pub(super) fn tier_put_header(&self, shard: usize, trust: Provenance, h: Arc<ShardHeader>) {
        let _room = self.tier_has_room(MemoryTier::header_weight(&h));
        self.memory.put_header(shard, trust, h);
    }

    /// Puts sample bytes read from the cache disk into the tier, whatever room it has (the
    /// tier's own bound evicts), after taking back kept download buffers.
    pub(super) fn tier_put_sample(&self, shard: usize, i: u32, trust: Provenance, b: Bytes) {
        let _room = self.tier_has_room(b.len() as u64);
        self.memory.put_sample(shard, i, trust, b);
    }
}
