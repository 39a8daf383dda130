//! `LandedPush`: which files of a shard that has just landed from the store to hand to the
//! kernel's page cache, so that readers find them there instead of asking us for each.
//!
//! On a cold pass every read of a sample file whose shard is not on disk yet waits for the
//! download; once the shard lands, each of its files is still one FUSE round trip and one
//! read of the cache disk per reader. When a loader listed its rank folder, the kernel holds
//! an inode for every name in it (READDIRPLUS, see the FUSE layer), and a store notification
//! (`FUSE_NOTIFY_STORE`) can fill those inodes' page caches straight from the verified bytes
//! of the download while they are in memory: the readers' later reads of those files never
//! cross FUSE or touch the disk. Their opens still do when the listing gave them no size (a
//! LOOKUP), which keeps the names and sizes checked as before.
//!
//! What is handed over, for each listed folder whose rank reads that epoch (or has not read
//! yet): the files of the shard's samples at positions from a little behind the rank's cursor
//! on (a DataLoader's workers read a few batches out of order), of the columns readers have
//! read through a rank folder so far (not those merely opened: `ls -l` opens every name;
//! every column until [`LEARN_READS`] reads have shown which are read).
//! Samples at every [`MARK_EVERY`]th position, and the folder's last, are never handed over:
//! their reads still come to us, move the rank's readahead cursor (a lookup does not move
//! it, since `ls -l` looks up every name) and show which columns are read, so the readahead
//! (and the progress `status` shows) follows each reader to within [`MARK_EVERY`] positions,
//! and sees the end of its epoch.
//!
//! Finding a shard's samples in a rank's order costs one pass over a stretch of the order
//! ([`SPAN`] positions from the cursor), done again when the cursor has crossed half of it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

use super::inode::{Epoch, LocalRank};
use super::push::PushCounters;
use super::source::ColumnSet;
use crate::plan::RankOrder;

/// Every this many positions of a rank's order, a sample is not handed over, so that its
/// reads reach us and move that rank's readahead cursor (the last position is not either).
pub const MARK_EVERY: u64 = 16;
/// Positions of a rank's order indexed by shard at once, from 256 behind its cursor: the
/// furthest ahead a landed shard's files are handed over (a shard in a shuffle block of
/// StreamingDataset's default 262,144 samples has samples all over the block; the kernel's
/// page cache is not ours to fill with an epoch).
pub const SPAN: u64 = 1 << 16;
/// Positions behind a rank's cursor that may still be unread (a DataLoader's workers each
/// read a batch of their own, out of order): their files are handed over too.
pub const BEHIND: u64 = 256;
/// Reads (from a file's start, through a rank folder) before the columns read are known:
/// until then every column is handed over (loaders mostly read every file of a sample).
pub const LEARN_READS: u64 = 64;
/// Listed folders remembered per rank (the newest ones).
const FOLDERS_PER_RANK: usize = 2;

/// One listed epoch folder and where its shards' samples are in its order.
struct Folder {
    rank: LocalRank,
    epoch: Epoch,
    index: Option<ShardPositions>,
}

/// The positions `from..to` of a rank's order, grouped by the global shard of their sample.
struct ShardPositions {
    from: u64,
    to: u64,
    by_shard: HashMap<u32, Vec<u64>>,
}

impl ShardPositions {
    fn build(order: &RankOrder, from: u64, shard_of: &dyn Fn(u64) -> Option<u32>) -> Self {
        let to = from.saturating_add(SPAN).min(order.len() as u64);
        let mut by_shard: HashMap<u32, Vec<u64>> = HashMap::new();
        for (p, sample) in (from..to).zip(order.iter_from(from as usize)) {
            if let Some(shard) = shard_of(sample) {
                by_shard.entry(shard).or_default().push(p);
            }
        }
        Self { from, to, by_shard }
    }
}

/// One sample file to hand over: the sample at `position` of `rank`'s order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ToPush {
    /// The global sample id.
    pub sample: u64,
    /// The rank folder it was listed in.
    pub rank: LocalRank,
    /// Its position there.
    pub position: u64,
}

/// The listed folders, the columns opened so far, and what became of the files handed over.
#[derive(Default)]
pub(crate) struct LandedPush {
    folders: Mutex<Vec<Folder>>,
    /// Columns read through a rank folder, one bit each.
    named: [AtomicU64; 4],
    /// Reads counted by [`LandedPush::on_read`] (up to [`LEARN_READS`]).
    reads: AtomicU64,
    counters: Arc<PushCounters>,
}

impl LandedPush {
    /// Folder `epoch` of `rank` was listed from its start (READDIRPLUS: the kernel holds an
    /// inode for each of its names).
    pub fn on_listed(&self, rank: LocalRank, epoch: Epoch) {
        let mut folders = self.folders.lock().unwrap_or_else(|p| p.into_inner());
        if folders.iter().any(|f| f.rank == rank && f.epoch == epoch) {
            return;
        }
        if folders.iter().filter(|f| f.rank == rank).count() >= FOLDERS_PER_RANK {
            if let Some(oldest) = folders.iter().position(|f| f.rank == rank) {
                folders.remove(oldest);
            }
        }
        folders.push(Folder {
            rank,
            epoch,
            index: None,
        });
    }

    /// A file of column `column` was read (from its start) through a rank folder.
    pub fn on_read(&self, column: u32) {
        if self.reads.load(Relaxed) < LEARN_READS {
            self.reads.fetch_add(1, Relaxed);
        }
        if let Some(w) = self.named.get(column as usize / 64) {
            let bit = 1 << (column % 64);
            if w.load(Relaxed) & bit == 0 {
                w.fetch_or(bit, Relaxed);
            }
        }
    }

    /// The columns to hand over: those read through a rank folder so far, or every column
    /// before [`LEARN_READS`] reads.
    pub fn columns(&self) -> ColumnSet {
        if self.reads.load(Relaxed) < LEARN_READS {
            return ColumnSet::from_words([u64::MAX; 4]);
        }
        ColumnSet::from_words(self.named.each_ref().map(|w| w.load(Relaxed)))
    }

    /// What became of the files handed over.
    pub fn counters(&self) -> &Arc<PushCounters> {
        &self.counters
    }

    /// The samples of global shard `shard` to hand over now, for every listed folder whose
    /// rank reads its epoch (`cursor`: the rank's (epoch, position), `None` before its first
    /// read), with `order` giving a folder's order and `shard_of` a sample's global shard.
    pub fn samples_of(
        &self,
        shard: u32,
        cursor: &dyn Fn(LocalRank) -> Option<(u64, u64)>,
        order: &dyn Fn(LocalRank, Epoch) -> Option<RankOrder>,
        shard_of: &dyn Fn(u64) -> Option<u32>,
    ) -> Vec<ToPush> {
        let mut out = Vec::new();
        let mut folders = self.folders.lock().unwrap_or_else(|p| p.into_inner());
        for f in folders.iter_mut() {
            let at = match cursor(f.rank) {
                None => 0,
                Some((e, p)) if e == f.epoch.0 => p.saturating_sub(BEHIND),
                Some(_) => continue,
            };
            let stale = f
                .index
                .as_ref()
                .is_none_or(|ix| at < ix.from || at >= ix.from.saturating_add(SPAN / 2));
            let Some(order) = order(f.rank, f.epoch) else {
                continue;
            };
            if stale && (at as usize) < order.len() {
                f.index = Some(ShardPositions::build(&order, at, shard_of));
            }
            let Some(ix) = &f.index else { continue };
            let Some(positions) = ix.by_shard.get(&shard) else {
                continue;
            };
            for &p in positions {
                let mark = p % MARK_EVERY == 0 || p + 1 == order.len() as u64;
                if p < at || p >= ix.to || mark {
                    continue;
                }
                if let Some(sample) = order.get(p as usize) {
                    out.push(ToPush {
                        sample,
                        rank: f.rank,
                        position: p,
                    });
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn order(n: u64) -> RankOrder {
        // Sample ids in a scrambled order: position p holds sample (p * 7) % n.
        RankOrder::new((0..n).map(|p| (p * 7) % n).collect())
    }

    #[test]
    fn a_landed_shard_gives_its_samples_ahead_of_the_cursor_except_the_marks() {
        let lp = LandedPush::default();
        lp.on_listed(LocalRank(0), Epoch(3));
        let o = order(1000);
        // Shard of a sample: 10 samples per shard.
        let shard_of = |s: u64| Some((s / 10) as u32);
        let cursor = |_: LocalRank| Some((3, 600));
        let got = lp.samples_of(4, &cursor, &|_, _| Some(o.clone()), &shard_of);
        let want: Vec<u64> = (0..1000u64)
            .filter(|&p| p >= 600 - BEHIND && p % MARK_EVERY != 0)
            .filter(|&p| o.get(p as usize).unwrap() / 10 == 4)
            .collect();
        assert!(!want.is_empty());
        assert_eq!(got.iter().map(|t| t.position).collect::<Vec<_>>(), want);
        for t in &got {
            assert_eq!(o.get(t.position as usize), Some(t.sample));
            assert_eq!(t.rank, LocalRank(0));
        }
        // A rank reading another epoch gets nothing; one not reading yet gets everything.
        let elsewhere = |_: LocalRank| Some((2, 10));
        assert!(lp
            .samples_of(4, &elsewhere, &|_, _| Some(o.clone()), &shard_of)
            .is_empty());
        let fresh = LandedPush::default();
        fresh.on_listed(LocalRank(0), Epoch(3));
        let all = fresh.samples_of(4, &|_| None, &|_, _| Some(o.clone()), &shard_of);
        let marked = (0..1000u64)
            .filter(|&p| o.get(p as usize).unwrap() / 10 == 4 && p % MARK_EVERY == 0)
            .count();
        assert!(marked > 0);
        assert_eq!(all.len(), 10 - marked, "ten samples, but those at marks");
        // An unlisted folder gives nothing.
        let none = LandedPush::default();
        assert!(none
            .samples_of(4, &|_| None, &|_, _| Some(o.clone()), &shard_of)
            .is_empty());
    }

    #[test]
    fn the_index_follows_the_cursor_past_half_its_span() {
        let lp = LandedPush::default();
        lp.on_listed(LocalRank(1), Epoch(0));
        let n = SPAN * 2;
        let o = RankOrder::new((0..n).collect());
        let shard_of = |s: u64| Some((s / 100) as u32);
        // Far past the first span: found only once the index was rebuilt there.
        let late = (SPAN + SPAN / 2 + 1000) / 100;
        let early = lp.samples_of(
            late as u32,
            &|_| Some((0, 0)),
            &|_, _| Some(o.clone()),
            &shard_of,
        );
        assert!(early.is_empty(), "beyond the span indexed");
        let at = SPAN + SPAN / 2;
        let moved = lp.samples_of(
            late as u32,
            &|_| Some((0, at)),
            &|_, _| Some(o.clone()),
            &shard_of,
        );
        let want = (late * 100..late * 100 + 100)
            .filter(|p| p % MARK_EVERY != 0)
            .count();
        assert_eq!(moved.len(), want);
    }

    #[test]
    fn a_rank_keeps_its_newest_listed_folders_and_columns_read_are_remembered() {
        let lp = LandedPush::default();
        for e in 0..4 {
            lp.on_listed(LocalRank(0), Epoch(e));
        }
        lp.on_listed(LocalRank(0), Epoch(3));
        let epochs: Vec<u64> = lp
            .folders
            .lock()
            .unwrap()
            .iter()
            .map(|f| f.epoch.0)
            .collect();
        assert_eq!(epochs, vec![2, 3]);
        // Every column until enough reads tell which are read.
        assert!(lp.columns().contains(0) && lp.columns().contains(200));
        lp.on_read(130);
        for _ in 1..LEARN_READS {
            lp.on_read(0);
        }
        assert!(lp.columns().contains(0) && lp.columns().contains(130));
        assert!(!lp.columns().contains(1) && !lp.columns().contains(200));
    }
}
