//! Which rank folder position a sample file was last opened through.
//!
//! A sample file is one inode wherever it appears (every `rank-R/epoch-E` folder and
//! `samples/`), so the kernel's page cache serves it again without asking us. A read therefore
//! says *which sample* but not *which position of which rank*, and the readahead cursor is
//! driven by positions. The lookup of a name in a rank folder does say it; this map remembers
//! it, so the read that follows the open can be attributed.
//!
//! Bounded: entries live in two generations per shard; when the current one is full it
//! becomes the previous one and the oldest generation is dropped. Memory stays under
//! [`RecentNames::CAPACITY`] entries (~20 bytes each) however long the mount lives, and a
//! sample opened within the last `CAPACITY / 2` lookups is always found.

use std::collections::HashMap;
use std::sync::Mutex;

use super::inode::{Epoch, LocalRank, Position};

/// Where a sample was opened: rank, epoch and position.
pub type NamedAt = (LocalRank, Epoch, Position);

const SHARDS: usize = 16;

#[derive(Default)]
struct Generations {
    current: HashMap<u64, u64>,
    previous: HashMap<u64, u64>,
}

/// Sample id → the rank folder position it was last looked up at.
pub struct RecentNames {
    shards: [Mutex<Generations>; SHARDS],
}

impl Default for RecentNames {
    fn default() -> Self {
        Self {
            shards: std::array::from_fn(|_| Mutex::new(Generations::default())),
        }
    }
}

// Packing: position (32 bits) | epoch (12 bits) | rank (8 bits), the widths inode numbers
// allow (names beyond them are never resolved, so never recorded).
const POS_SHIFT: u32 = 20;
const EPOCH_SHIFT: u32 = 8;

fn pack((r, e, p): NamedAt) -> Option<u64> {
    (r.0 < 1 << 8 && e.0 < 1 << 12 && p.0 < 1 << 32)
        .then(|| (p.0 << POS_SHIFT) | (e.0 << EPOCH_SHIFT) | u64::from(r.0))
}

fn unpack(v: u64) -> NamedAt {
    (
        LocalRank((v & 0xff) as u32),
        Epoch((v >> EPOCH_SHIFT) & 0xfff),
        Position(v >> POS_SHIFT),
    )
}

impl RecentNames {
    /// Entries kept at most (both generations of all shards).
    pub const CAPACITY: usize = 1 << 18;

    fn shard(&self, sample: u64) -> std::sync::MutexGuard<'_, Generations> {
        let i = (sample % SHARDS as u64) as usize;
        let m = &self.shards[i];
        m.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records that `sample` was just looked up at `at`.
    pub fn record(&self, sample: u64, at: NamedAt) {
        let Some(v) = pack(at) else {
            return;
        };
        let mut g = self.shard(sample);
        if g.current.len() >= Self::CAPACITY / SHARDS / 2 {
            g.previous = std::mem::take(&mut g.current);
        }
        g.current.insert(sample, v);
    }

    /// Where `sample` was last looked up, if recently.
    pub fn find(&self, sample: u64) -> Option<NamedAt> {
        let g = self.shard(sample);
        g.current
            .get(&sample)
            .or_else(|| g.previous.get(&sample))
            .map(|&v| unpack(v))
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
        let g = names.shard(7);
        assert!(g.current.len() + g.previous.len() <= per_shard as usize);
    }
}
