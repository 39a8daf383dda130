//! Sizes in a listing before any shard is read: a rank folder's listing has the headers of the
//! shards its first positions use made ready (`SampleSource::ready_sizes`), and each entry
//! whose size such a header gives goes out with it (`Vfs::attr_now`), so the kernel opens the
//! file without a LOOKUP. The mount starts this for each served rank's first epoch folder.

use std::sync::Arc;

use super::Vfs;
use crate::vfs::inode::{ColumnNo, Epoch, LocalRank, MAX_EPOCHS};

/// Positions of a rank folder whose shards' headers a listing makes ready, to give the
/// entries their sizes ([`Vfs::readdir_plus`]).
const LISTED_SIZE_POSITIONS: usize = 1 << 16;
/// Most shards whose headers one listing fetches.
const LISTED_SIZE_SHARDS: usize = 1024;
/// How long a listing waits for those headers (its first page, and so the loader's first
/// open, waits with it; later pages take the headers in memory by then).
pub(super) const LISTED_SIZE_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

impl Vfs {
    /// A file's size known now without reading anything (from its shard's header in
    /// memory), recorded as a size computed here (unverified when the header is; the first
    /// read checks it).
    pub(super) fn size_now(&self, sample: u64, col: ColumnNo) -> Option<u64> {
        let at = self.source.locate(sample)?;
        let (size, verified) = self.source.size_now(&at, col.0)?;
        if verified {
            self.sizes.record(sample, col, size);
        } else {
            self.sizes.record_unverified(sample, col, size);
        }
        Some(size)
    }

    /// Before a listing of `rank`'s `epoch` folder gives its entries: the headers of the
    /// shards its first [`LISTED_SIZE_POSITIONS`] positions use (at most
    /// [`LISTED_SIZE_SHARDS`]), fetched side by side and waited for up to `wait`, so that
    /// entries get their sizes and the loader opens them without a lookup each. Those whose
    /// header is not in memory yet when listed get a placeholder and are looked up on open,
    /// as before.
    pub(super) fn ready_listed_sizes(
        &self,
        rank: LocalRank,
        epoch: Epoch,
        wait: std::time::Duration,
    ) {
        let Ok(order) = self.order(rank, epoch) else {
            return;
        };
        let mut seen = std::collections::HashSet::new();
        let mut samples = Vec::new();
        for sample in order.iter_from(0).take(LISTED_SIZE_POSITIONS) {
            let Some(at) = self.source.locate(sample) else {
                continue;
            };
            if seen.insert((at.stream, at.shard)) {
                samples.push(at);
                if samples.len() >= LISTED_SIZE_SHARDS {
                    break;
                }
            }
        }
        self.source.ready_sizes(&samples, wait);
    }

    /// Starts fetching, on a thread of its own, what the first listing of each served rank's
    /// first epoch folder will want to size its files (see `ready_listed_sizes`), so that a
    /// loader that lists its folder soon after the mount finds the headers there.
    pub fn ready_first_listings(self: &Arc<Self>) {
        let vfs = Arc::clone(self);
        let spawned = std::thread::Builder::new()
            .name("shardfs-list-prep".into())
            .spawn(move || {
                let epoch = Epoch(vfs.config.first_epoch_listed.min(MAX_EPOCHS));
                for r in 0..vfs.config.global_ranks.len() {
                    vfs.ready_listed_sizes(LocalRank(r as u32), epoch, std::time::Duration::ZERO);
                }
            });
        if let Err(e) = spawned {
            tracing::debug!(error = %e, "cannot start a thread to fetch the first listings' headers");
        }
    }
}
