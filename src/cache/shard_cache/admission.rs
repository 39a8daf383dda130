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
    /// back first, as many as `len` needs ([`ShardCache::take_back_for_tier`]).
    pub(super) fn tier_has_room(&self, len: u64) -> bool {
        let fits = |lent: u64| {
            lent == 0
                || self.tier_held().saturating_add(lent).saturating_add(len)
                    <= self.opts.memory_limit
        };
        fits(self.downloads.lent())
            || (self.take_back_for_tier(len) > 0 && fits(self.downloads.lent()))
    }

    /// Frees download buffers kept past the download budget (borrowed from the tier's share)
    /// until the tier's share has room for `len` more bytes beside what downloads still
    /// borrow; returns the bytes freed. Called before every insert into the tier, also those
    /// that go in whatever the check says (samples and headers read from the cache disk), so
    /// kept buffers never hold the tier's share while the tier uses it.
    pub(super) fn take_back_for_tier(&self, len: u64) -> u64 {
        let lent = self.downloads.lent();
        let held = self.tier_held().saturating_add(len);
        if lent == 0 || held.saturating_add(lent) <= self.opts.memory_limit {
            return 0;
        }
        let spare = self.opts.memory_limit.saturating_sub(held);
        self.downloads.free_kept_past(spare)
    }

    /// Puts a verified or ranged header into the tier, whatever room it has (headers are
    /// small, and the tier's own bound evicts), after taking back kept download buffers.
    pub(super) fn tier_put_header(&self, shard: usize, trust: Provenance, h: Arc<ShardHeader>) {
        self.take_back_for_tier(MemoryTier::header_weight(&h));
        self.memory.put_header(shard, trust, h);
    }

    /// Puts sample bytes read from the cache disk into the tier, whatever room it has (the
    /// tier's own bound evicts), after taking back kept download buffers.
    pub(super) fn tier_put_sample(&self, shard: usize, i: u32, trust: Provenance, b: Bytes) {
        self.take_back_for_tier(b.len() as u64);
        self.memory.put_sample(shard, i, trust, b);
    }
}
