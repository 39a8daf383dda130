//! What the tree remembers about sample files it named recently, in bounded memory.
//!
//! A sample file is one inode wherever it appears (every `rank-R/epoch-E` folder and
//! `samples/`), so the kernel's page cache serves it again without asking us. Two facts about
//! recently named samples make that work well:
//! - [`RecentNames`]: the rank folder position a sample was last opened through. A read of the
//!   shared inode says *which sample* but not *which position of which rank*, and the readahead
//!   cursor is driven by positions; the lookup (or listed entry) that preceded it does say.
//! - [`KnownSizes`]: each column file's exact size once computed. A listing (READDIRPLUS) can
//!   then give real attributes without reading shards, so the kernel opens the files without a
//!   lookup each, and never applies a placeholder size to an inode whose pages it holds (which
//!   would drop them).
//!
//! Both are [`BoundedMap`]s: entries live in two generations in each of 16 shards; when a
//! shard's current generation is full it becomes the previous one and the oldest is dropped.
//! Memory stays under the map's capacity however long the mount lives; an entry survives at
//! least `capacity / 32` later writes to its shard (about `capacity / 2` writes in all, spread
//! evenly) and at most `capacity / 16`.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

use super::inode::{
    ColumnNo, Epoch, LocalRank, Position, MAX_COLUMNS, MAX_EPOCHS, MAX_LOCAL_RANKS, MAX_POSITIONS,
    MAX_SAMPLES,
};

const SHARDS: usize = 16;

#[derive(Default)]
struct Generations {
    current: HashMap<u64, u64>,
    previous: HashMap<u64, u64>,
}

/// A `u64 → u64` map holding at most `capacity` entries; the oldest go first.
pub struct BoundedMap {
    shards: [Mutex<Generations>; SHARDS],
    per_generation: usize,
}

impl BoundedMap {
    /// A map of at most `capacity` entries (rounded to a multiple of 32).
    pub fn new(capacity: usize) -> Self {
        Self {
            shards: std::array::from_fn(|_| Mutex::new(Generations::default())),
            per_generation: (capacity / SHARDS / 2).max(1),
        }
    }

    fn shard(&self, key: u64) -> MutexGuard<'_, Generations> {
        let m = &self.shards[(key % SHARDS as u64) as usize];
        m.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sets `key` to `value`.
    pub fn insert(&self, key: u64, value: u64) {
        let mut g = self.shard(key);
        if g.current.len() >= self.per_generation && !g.current.contains_key(&key) {
            g.previous = std::mem::take(&mut g.current);
        }
        g.current.insert(key, value);
    }

    /// The value of `key`, if it is still held.
    pub fn get(&self, key: u64) -> Option<u64> {
        let g = self.shard(key);
        g.current
            .get(&key)
            .or_else(|| g.previous.get(&key))
            .copied()
    }
}

/// Where a sample was opened: rank, epoch and position.
pub type NamedAt = (LocalRank, Epoch, Position);

/// Sample id → the rank folder position it was last looked up or listed at.
pub struct RecentNames(BoundedMap);

impl Default for RecentNames {
    fn default() -> Self {
        Self(BoundedMap::new(Self::CAPACITY))
    }
}

// Packing: position (32 bits) | epoch (12 bits) | rank (8 bits), the widths inode numbers
// allow (names beyond them are never resolved, so never recorded).
const POS_SHIFT: u32 = 20;
const EPOCH_SHIFT: u32 = 8;

impl RecentNames {
    /// Samples remembered at most (~20 bytes each).
    pub const CAPACITY: usize = 1 << 18;

    /// Records that `sample` was just looked up or listed at `at`.
    pub fn record(&self, sample: u64, (r, e, p): NamedAt) {
        if r.0 < MAX_LOCAL_RANKS && e.0 < MAX_EPOCHS && p.0 < MAX_POSITIONS {
            self.0.insert(
                sample,
                (p.0 << POS_SHIFT) | (e.0 << EPOCH_SHIFT) | u64::from(r.0),
            );
        }
    }

    /// Where `sample` was last looked up or listed, if recently.
    pub fn find(&self, sample: u64) -> Option<NamedAt> {
        self.0.get(sample).map(|v| {
            (
                LocalRank((v & 0xff) as u32),
                Epoch((v >> EPOCH_SHIFT) & 0xfff),
                Position(v >> POS_SHIFT),
            )
        })
    }
}

/// (sample id, column) → the column file's exact size, once computed.
pub struct KnownSizes(BoundedMap);

impl Default for KnownSizes {
    fn default() -> Self {
        Self(BoundedMap::new(Self::CAPACITY))
    }
}

impl KnownSizes {
    /// Files remembered at most (~20 bytes each); about half as many are always kept.
    pub const CAPACITY: usize = 1 << 20;

    fn key(sample: u64, col: ColumnNo) -> Option<u64> {
        (sample < MAX_SAMPLES && col.0 < MAX_COLUMNS).then(|| (sample << 8) | u64::from(col.0))
    }

    /// Records the size of a column file.
    pub fn record(&self, sample: u64, col: ColumnNo, size: u64) {
        if let Some(k) = Self::key(sample, col) {
            self.0.insert(k, size);
        }
    }

    /// The size of a column file, if known.
    pub fn get(&self, sample: u64, col: ColumnNo) -> Option<u64> {
        Self::key(sample, col).and_then(|k| self.0.get(k))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_latest_lookup_wins_and_old_ones_are_forgotten() {
        let names = RecentNames::default();
        assert_eq!(names.find(7), None);
        let at = |r, e, p| (LocalRank(r), Epoch(e), Position(p));
        names.record(7, at(3, 0, 41));
        names.record(7, at(255, 4095, (1 << 32) - 1));
        assert_eq!(names.find(7), Some(at(255, 4095, (1 << 32) - 1)));
        names.record(8, at(0, 4096, 0)); // too wide: never resolved, never recorded
        assert_eq!(names.find(8), None);
        // Fill sample 7's shard with other samples: after two generations it is gone, and
        // the map never held more than its capacity.
        let per_shard = (RecentNames::CAPACITY / SHARDS) as u64;
        for i in 1..=per_shard {
            names.record(7 + i * SHARDS as u64, at(0, 0, i));
        }
        assert_eq!(names.find(7), None);
        let g = names.0.shard(7);
        assert!(g.current.len() + g.previous.len() <= per_shard as usize);
    }

    #[test]
    fn sizes_are_kept_per_column_and_rewriting_a_key_does_not_rotate() {
        let sizes = KnownSizes::default();
        sizes.record(5, ColumnNo(0), 110_000);
        sizes.record(5, ColumnNo(1), 3);
        sizes.record(1 << 40, ColumnNo(0), 1); // beyond inode widths: not kept
        assert_eq!(sizes.get(5, ColumnNo(0)), Some(110_000));
        assert_eq!(sizes.get(5, ColumnNo(1)), Some(3));
        assert_eq!(sizes.get(5, ColumnNo(2)), None);
        assert_eq!(sizes.get(1 << 40, ColumnNo(0)), None);
        // A small map: writing the same keys again and again keeps them all.
        let m = BoundedMap::new(64);
        for round in 0..10 {
            for k in 0..32u64 {
                m.insert(k, round);
            }
        }
        assert!((0..32u64).all(|k| m.get(k) == Some(9)));
    }
}
