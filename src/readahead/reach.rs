//! `OrderReach`: how many distinct shards each rank's order still reads from a position to the
//! end of its epoch, so a plan's walk can stop early.
//!
//! A plan walks each rank's order forward and gives every shard the distance of its first use
//! in the walk. Once every shard the rest of an epoch reads has been met in the walk, the
//! positions left in that epoch cannot change anything: each of them would only offer a
//! larger distance for a shard that has one. In a shuffled epoch all of a rank's shards are
//! met within a few hundred positions, so the walk of an epoch of tens of thousands of
//! positions, repeated at every plan, was most of the planner's cost (a profile of the bench's
//! cold pass, 20,000 samples in 33 shards: 9 % of the daemon's CPU in the walk).
//!
//! The counts come from one backward pass over the order per (epoch, rank), kept while the
//! epoch is in use, at every [`CHECKPOINT`]th position: from position `p` the walk compares
//! with the count at the checkpoint at or before `p`, which counts at least the shards of the
//! rest of the epoch (so the walk may stop later than it could, never earlier).

use super::walk::ShardSet;
use crate::plan::RankOrder;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

/// Positions between two kept counts (a table costs 1/16 of the order it describes).
pub(super) const CHECKPOINT: usize = 64;

/// Distinct shards from each checkpoint to the end of its epoch, for one rank's order.
pub(super) struct SuffixShards {
    counts: Vec<u32>,
    len: usize,
}

impl SuffixShards {
    /// Counts, with `shard_of`, the distinct shards from every [`CHECKPOINT`]th position of
    /// `order` to its end (positions whose shard is unknown are not counted).
    pub(super) fn of(order: &RankOrder, shard_of: &dyn Fn(u64) -> Option<u32>) -> Self {
        let len = order.len();
        let mut counts = vec![0u32; len.div_ceil(CHECKPOINT)];
        let mut met = ShardSet::default();
        let mut distinct = 0u32;
        for i in (0..len).rev() {
            if let Some(shard) = order.get(i).and_then(shard_of) {
                if met.insert(shard) {
                    distinct += 1;
                }
            }
            if i % CHECKPOINT == 0 {
                if let Some(c) = counts.get_mut(i / CHECKPOINT) {
                    *c = distinct;
                }
            }
        }
        Self { counts, len }
    }

    /// At least the number of distinct shards from position `from` to the end of the epoch
    /// (exactly that when `from` is a checkpoint); 0 past the end.
    pub(super) fn from(&self, from: usize) -> u32 {
        if from >= self.len {
            return 0;
        }
        // No count kept (cannot happen below `len`): as if no shard could be met.
        self.counts
            .get(from / CHECKPOINT)
            .copied()
            .unwrap_or(u32::MAX)
    }
}

/// The [`SuffixShards`] of each (epoch, rank) a plan walked, computed once and dropped with
/// their epoch.
#[derive(Default)]
pub(super) struct OrderReach {
    tables: Mutex<HashMap<(u64, usize), Arc<SuffixShards>>>,
    /// Tests turn the early stop off to compare with whole walks.
    #[cfg(test)]
    whole_walks: std::sync::atomic::AtomicBool,
}

impl OrderReach {
    /// The table of rank `rank`'s order in `epoch`, made from `order` the first time.
    pub(super) fn of(
        &self,
        epoch: u64,
        rank: usize,
        order: &RankOrder,
        shard_of: &dyn Fn(u64) -> Option<u32>,
    ) -> Arc<SuffixShards> {
        #[cfg(test)]
        if self.whole_walks.load(std::sync::atomic::Ordering::Relaxed) {
            return Arc::new(SuffixShards {
                counts: Vec::new(),
                len: usize::MAX,
            });
        }
        if let Some(t) = self.lock().get(&(epoch, rank)) {
            return t.clone();
        }
        // Made outside the lock: only the planner thread asks, so no other maker races it.
        let table = Arc::new(SuffixShards::of(order, shard_of));
        self.lock().insert((epoch, rank), table.clone());
        table
    }

    /// Whether walks may stop early (tests: off makes `of` count no shards in reach, so every
    /// walk goes to its end).
    #[cfg(test)]
    pub(super) fn set_stop_early(&self, on: bool) {
        self.whole_walks
            .store(!on, std::sync::atomic::Ordering::Relaxed);
    }

    /// Drops the tables of epochs not in `epochs`.
    pub(super) fn keep_only(&self, epochs: &HashSet<u64>) {
        self.lock().retain(|(e, _), _| epochs.contains(e));
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(u64, usize), Arc<SuffixShards>>> {
        self.tables.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_the_distinct_shards_from_each_checkpoint_to_the_end() {
        // Shard = sample / 10. Positions 0..64 read shard 0, 64..128 shards 1 and 2
        // alternately, 128..130 shard 0 again.
        let mut ids: Vec<u64> = vec![0; 64];
        ids.extend((0..64).map(|i| if i % 2 == 0 { 10 } else { 20 }));
        ids.extend([1, 2]);
        let order = RankOrder::new(ids);
        let t = SuffixShards::of(&order, &|s| Some((s / 10) as u32));
        assert_eq!(t.from(0), 3);
        assert_eq!(
            t.from(63),
            3,
            "a position counts with the checkpoint before it"
        );
        assert_eq!(t.from(64), 3, "shard 0 comes back at the end");
        assert_eq!(t.from(128), 1);
        assert_eq!(t.from(130), 0, "past the end");
    }

    #[test]
    fn unknown_samples_are_not_counted() {
        let order = RankOrder::new(vec![5, 99, 15]);
        let t = SuffixShards::of(&order, &|s| (s < 50).then_some((s / 10) as u32));
        assert_eq!(t.from(0), 2);
    }

    #[test]
    fn tables_of_epochs_no_longer_in_use_are_dropped() {
        let reach = OrderReach::default();
        let order = RankOrder::new(vec![1, 2, 3]);
        let shard_of = |s: u64| Some(s as u32);
        let a = reach.of(0, 0, &order, &shard_of);
        assert!(
            Arc::ptr_eq(&a, &reach.of(0, 0, &order, &shard_of)),
            "made once"
        );
        reach.of(1, 0, &order, &shard_of);
        reach.keep_only(&HashSet::from([1]));
        assert!(
            !Arc::ptr_eq(&a, &reach.of(0, 0, &order, &shard_of)),
            "epoch 0 was dropped"
        );
    }
}
