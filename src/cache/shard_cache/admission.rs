//! Memory-tier admission: what the tier and the samples read ahead may take while downloads
//! borrow part of their share of `--memory-limit`.

use super::ShardCache;

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
    /// back when the tier needs them.
    pub(super) fn tier_has_room(&self, len: u64) -> bool {
        let fits = |lent: u64| {
            lent == 0
                || self.tier_held().saturating_add(lent).saturating_add(len)
                    <= self.opts.memory_limit
        };
        fits(self.downloads.lent())
            || (self.downloads.free_kept_beyond_limit() > 0 && fits(self.downloads.lent()))
    }
}
