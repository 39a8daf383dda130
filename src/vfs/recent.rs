//! What the tree remembers about sample files it named recently, in bounded memory.
//!
//! A sample file is one inode wherever it appears (every `rank-R/epoch-E` folder and
//! `samples/`), so the kernel's page cache serves it again without asking us. Two facts about
//! recently named samples make that work well:
//! - [`RecentNames`]: the rank folder positions a sample was last opened or listed at. A read of
//!   the shared inode says *which sample* but not *which position of which rank*, and the
//!   readahead cursor is driven by positions; the lookup (or listed entry) that preceded it does
//!   say.
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
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::sync::{Mutex, MutexGuard};

use super::inode::{
    ColumnNo, Epoch, LocalRank, Position, MAX_COLUMNS, MAX_EPOCHS, MAX_LOCAL_RANKS, MAX_POSITIONS,
    MAX_SAMPLES,
};

const SHARDS: usize = 16;

struct Generations<V> {
    current: HashMap<u64, V>,
    previous: HashMap<u64, V>,
}

impl<V> Default for Generations<V> {
    fn default() -> Self {
        Self {
            current: HashMap::new(),
            previous: HashMap::new(),
        }
    }
}

/// A map from `u64` keys holding at most `capacity` entries; the oldest go first.
pub struct BoundedMap<V> {
    shards: [Mutex<Generations<V>>; SHARDS],
    per_generation: usize,
}

impl<V: Copy> BoundedMap<V> {
    /// A map of at most `capacity` entries (rounded to a multiple of 32).
    pub fn new(capacity: usize) -> Self {
        Self {
            shards: std::array::from_fn(|_| Mutex::new(Generations::default())),
            per_generation: (capacity / SHARDS / 2).max(1),
        }
    }

    /// The shard of `key`. Keys pack fields into bits (a sample's column sits in the low
    /// bits), so the shard comes from a mix of all of them (Fibonacci hashing: Knuth, TAOCP
    /// vol. 3, 6.4), not from the low bits, which would put every key of a one-column dataset
    /// in one shard (a sixteenth of the capacity).
    fn shard_of(key: u64) -> usize {
        (key.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 60) as usize % SHARDS
    }

    fn shard(&self, key: u64) -> MutexGuard<'_, Generations<V>> {
        let m = &self.shards[Self::shard_of(key)];
        m.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sets `key` to `f(its value, if still held)`, in one step.
    pub fn update(&self, key: u64, f: impl FnOnce(Option<V>) -> V) {
        let mut g = self.shard(key);
        let old = g
            .current
            .get(&key)
            .or_else(|| g.previous.get(&key))
            .copied();
        if g.current.len() >= self.per_generation && !g.current.contains_key(&key) {
            g.previous = std::mem::take(&mut g.current);
        }
        g.current.insert(key, f(old));
    }

    /// The value of `key`, if it is still held.
    pub fn get(&self, key: u64) -> Option<V> {
        let g = self.shard(key);
        g.current
            .get(&key)
            .or_else(|| g.previous.get(&key))
            .copied()
    }
}

/// Where a sample was opened: rank, epoch and position.
pub type NamedAt = (LocalRank, Epoch, Position);

/// How a sample's rank folder position became known.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Named {
    /// A LOOKUP of its name: the kernel is about to open it there.
    Lookup,
    /// An entry of a listing sent with attributes: it may be opened there later, or not.
    Listed,
}

/// Sample id → the last two rank folder positions (of different folders) it was looked up or
/// listed at, newest first.
///
/// Two, because listings run ahead of reading: when rank 1 lists `epoch-1/` while rank 0 still
/// reads `epoch-0/`, a sample in both keeps both positions, and a read goes to the one whose
/// rank is reading that epoch there (see [`RecentNames::pick`]).
pub struct RecentNames(BoundedMap<[u64; 2]>);

impl Default for RecentNames {
    fn default() -> Self {
        Self(BoundedMap::new(Self::CAPACITY))
    }
}

// Packing: looked up (bit 63) | position (32 bits) | epoch (12 bits) | rank (8 bits), the widths
// inode numbers allow (names beyond them are never resolved, so never recorded).
const POS_SHIFT: u32 = 20;
const EPOCH_SHIFT: u32 = 8;
const LOOKUP_BIT: u64 = 1 << 63;
/// The folder (rank and epoch) part of a packed position.
const FOLDER_MASK: u64 = (1 << POS_SHIFT) - 1;
/// No position recorded.
const NONE: u64 = u64::MAX;

fn unpack(v: u64) -> Option<(NamedAt, Named)> {
    (v != NONE).then(|| {
        let how = if v & LOOKUP_BIT != 0 {
            Named::Lookup
        } else {
            Named::Listed
        };
        let v = v & !LOOKUP_BIT;
        (
            (
                LocalRank((v & 0xff) as u32),
                Epoch((v >> EPOCH_SHIFT) & 0xfff),
                Position(v >> POS_SHIFT),
            ),
            how,
        )
    })
}

impl RecentNames {
    /// Samples remembered at most (~30 bytes each).
    pub const CAPACITY: usize = 1 << 18;

    /// Records that `sample` was just looked up or listed at `at`.
    pub fn record(&self, sample: u64, (r, e, p): NamedAt, how: Named) {
        if r.0 >= MAX_LOCAL_RANKS || e.0 >= MAX_EPOCHS || p.0 >= MAX_POSITIONS {
            return;
        }
        let mut v = (p.0 << POS_SHIFT) | (e.0 << EPOCH_SHIFT) | u64::from(r.0);
        if how == Named::Lookup {
            v |= LOOKUP_BIT;
        }
        self.0.update(sample, |old| match old {
            // The same folder again: the newest position replaces the old one.
            Some([newest, older]) if newest != NONE && newest & FOLDER_MASK == v & FOLDER_MASK => {
                [v, older]
            }
            Some([newest, _]) => [v, newest],
            None => [v, NONE],
        });
    }

    /// Where `sample` was last looked up or listed, if recently, and how.
    #[cfg(test)]
    pub fn find(&self, sample: u64) -> Option<(NamedAt, Named)> {
        self.0.get(sample).and_then(|[newest, _]| unpack(newest))
    }

    /// The position a read of `sample` is for: the newest if it was a lookup (the kernel
    /// opens right after one); else the newest of the two whose rank `reads_there` (is
    /// reading that epoch near that position), else the newest.
    pub fn pick(
        &self,
        sample: u64,
        reads_there: impl Fn(LocalRank, Epoch, Position) -> bool,
    ) -> Option<NamedAt> {
        let [newest, older] = self.0.get(sample)?;
        let (first, how) = unpack(newest)?;
        if how == Named::Lookup {
            return Some(first);
        }
        [Some(first), unpack(older).map(|(at, _)| at)]
            .into_iter()
            .flatten()
            .find(|&(r, e, p)| reads_there(r, e, p))
            .or(Some(first))
    }
}

/// (sample id, column) → the column file's exact size, once computed.
pub struct KnownSizes {
    sizes: BoundedMap<u64>,
    /// Entries a read must look at (unverified or being forgotten; see [`SizeState`]). Kept
    /// under each entry's shard lock, so it never counts fewer than there are; an evicted
    /// entry is not subtracted, so it may count more (only costs look-ups). When it is 0, as
    /// once every file read has been checked, reads skip the map.
    to_check: AtomicU64,
}

impl Default for KnownSizes {
    fn default() -> Self {
        Self {
            sizes: BoundedMap::new(Self::CAPACITY),
            to_check: AtomicU64::new(0),
        }
    }
}

impl KnownSizes {
    /// Files remembered at most (~20 bytes each); about half as many are always kept.
    pub const CAPACITY: usize = 1 << 20;

    fn key(sample: u64, col: ColumnNo) -> Option<u64> {
        (sample < MAX_SAMPLES && col.0 < MAX_COLUMNS).then(|| (sample << 8) | u64::from(col.0))
    }

    /// Marks a size computed from bytes no hash covers (see [`KnownSizes::record_unverified`]).
    const UNVERIFIED: u64 = 1 << 63;
    /// Marks a verified size that differs from the one the kernel was given, until the kernel
    /// has been told to forget that one (see [`KnownSizes::record_forgetting`]).
    const FORGETTING: u64 = 1 << 62;
    const SIZE: u64 = !(Self::UNVERIFIED | Self::FORGETTING);

    /// Records the size of a column file, from verified bytes.
    pub fn record(&self, sample: u64, col: ColumnNo, size: u64) {
        self.put(sample, col, size & Self::SIZE);
    }

    /// Records a size computed before the shard was verified (ranged reads): the first read
    /// of the file checks it against the verified bytes ([`SizeState::Unverified`]).
    pub fn record_unverified(&self, sample: u64, col: ColumnNo, size: u64) {
        self.put(sample, col, (size & Self::SIZE) | Self::UNVERIFIED);
    }

    /// Records the verified size of a file whose size the kernel was given wrong and has not
    /// yet been told to forget ([`SizeState::Forgetting`]); [`KnownSizes::record`] ends it.
    pub fn record_forgetting(&self, sample: u64, col: ColumnNo, size: u64) {
        self.put(sample, col, (size & Self::SIZE) | Self::FORGETTING);
    }

    /// Records `size`, from verified bytes, unless a different size was handed out for the
    /// file (unverified, or being forgotten), in one step with the look-up: true when the
    /// file's known size is now `size`, verified. For handing the file's bytes to the page
    /// cache, which must not contradict a size the kernel holds.
    pub fn record_if_consistent(&self, sample: u64, col: ColumnNo, size: u64) -> bool {
        let Some(k) = Self::key(sample, col) else {
            return false;
        };
        let size = size & Self::SIZE;
        let mut consistent = false;
        self.sizes.update(k, |old| match old {
            None => {
                consistent = true;
                size
            }
            Some(v) if v & Self::SIZE == size && v & Self::FORGETTING == 0 => {
                consistent = true;
                if v & Self::UNVERIFIED != 0 {
                    self.to_check.fetch_sub(1, SeqCst);
                }
                size
            }
            Some(v) => v,
        });
        consistent
    }

    fn put(&self, sample: u64, col: ColumnNo, value: u64) {
        let Some(k) = Self::key(sample, col) else {
            return;
        };
        let checked = |v: u64| v & !Self::SIZE != 0;
        self.sizes.update(k, |old| {
            match (old.is_some_and(checked), checked(value)) {
                (false, true) => {
                    self.to_check.fetch_add(1, SeqCst);
                }
                (true, false) => {
                    self.to_check.fetch_sub(1, SeqCst);
                }
                _ => {}
            }
            value
        });
    }

    /// Whether any known size may need a read to look at it ([`KnownSizes::state`]); false
    /// means every size handed out was verified.
    pub fn any_to_check(&self) -> bool {
        self.to_check.load(SeqCst) != 0
    }

    /// The size of a column file, if known (the verified one when there are two).
    pub fn get(&self, sample: u64, col: ColumnNo) -> Option<u64> {
        self.state(sample, col).map(|s| match s {
            SizeState::Verified(n) | SizeState::Unverified(n) | SizeState::Forgetting(n) => n,
        })
    }

    /// What is known of a column file's size, if anything.
    pub fn state(&self, sample: u64, col: ColumnNo) -> Option<SizeState> {
        let v = Self::key(sample, col).and_then(|k| self.sizes.get(k))?;
        let n = v & Self::SIZE;
        Some(if v & Self::UNVERIFIED != 0 {
            SizeState::Unverified(n)
        } else if v & Self::FORGETTING != 0 {
            SizeState::Forgetting(n)
        } else {
            SizeState::Verified(n)
        })
    }
}

/// How far a known file size can be trusted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SizeState {
    /// Computed from verified bytes, and what the kernel was given.
    Verified(u64),
    /// Computed from bytes no hash covers (ranged reads); the file's first read checks it.
    Unverified(u64),
    /// The verified size, which differs from the unverified one the kernel was given; reads
    /// fail until the kernel has been told to forget that one.
    Forgetting(u64),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_latest_lookup_wins_and_old_ones_are_forgotten() {
        let names = RecentNames::default();
        assert_eq!(names.find(7), None);
        let at = |r, e, p| (LocalRank(r), Epoch(e), Position(p));
        names.record(7, at(3, 0, 41), Named::Listed);
        names.record(7, at(255, 4095, (1 << 32) - 1), Named::Lookup);
        assert_eq!(
            names.find(7),
            Some((at(255, 4095, (1 << 32) - 1), Named::Lookup))
        );
        // A lookup wins whatever the readers are doing.
        assert_eq!(
            names.pick(7, |_, _, _| false),
            Some(at(255, 4095, (1 << 32) - 1))
        );
        names.record(8, at(0, 4096, 0), Named::Lookup); // too wide: never resolved, never recorded
        assert_eq!(names.find(8), None);
        // Fill sample 7's shard with other samples: after two generations it is gone, and
        // the map never held more than its capacity.
        let per_shard = (RecentNames::CAPACITY / SHARDS) as u64;
        let home = BoundedMap::<NamedAt>::shard_of(7);
        let neighbours = (8u64..)
            .filter(|&k| BoundedMap::<NamedAt>::shard_of(k) == home)
            .take(per_shard as usize);
        for (i, k) in neighbours.enumerate() {
            names.record(k, at(0, 0, i as u64), Named::Listed);
        }
        assert_eq!(names.find(7), None);
        let g = names.0.shard(7);
        assert!(g.current.len() + g.previous.len() <= per_shard as usize);
    }

    #[test]
    fn a_listing_of_another_folder_keeps_the_position_being_read() {
        let names = RecentNames::default();
        let at = |r, e, p| (LocalRank(r), Epoch(e), Position(p));
        // Rank 0 listed epoch 0; then rank 1 listed epoch 1, which also holds sample 5.
        names.record(5, at(0, 0, 10), Named::Listed);
        names.record(5, at(1, 1, 3), Named::Listed);
        assert_eq!(names.find(5), Some((at(1, 1, 3), Named::Listed)));
        // Rank 0 reads epoch 0, rank 1 has not started epoch 1: the read is rank 0's.
        let reading = |r: LocalRank, e: Epoch, _: Position| (r.0, e.0) == (0, 0);
        assert_eq!(names.pick(5, reading), Some(at(0, 0, 10)));
        // Rank 1 reading epoch 1 (and rank 0 too far from position 10): the newest.
        let reading = |r: LocalRank, e: Epoch, _: Position| (r.0, e.0) == (1, 1);
        assert_eq!(names.pick(5, reading), Some(at(1, 1, 3)));
        // Nobody reading either folder (a first read): the newest.
        assert_eq!(names.pick(5, |_, _, _| false), Some(at(1, 1, 3)));
        // Listing the same folder again moves the position, keeping the other folder's.
        names.record(5, at(1, 1, 4), Named::Listed);
        let reading = |r: LocalRank, e: Epoch, _: Position| (r.0, e.0) == (0, 0);
        assert_eq!(names.pick(5, reading), Some(at(0, 0, 10)));
        // A third folder pushes out the oldest.
        names.record(5, at(2, 2, 0), Named::Listed);
        assert_eq!(names.pick(5, reading), Some(at(2, 2, 0)));
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
        let m = BoundedMap::<u64>::new(64);
        for round in 0..10 {
            for k in 0..32u64 {
                m.update(k, |_| round);
            }
        }
        assert!((0..32u64).all(|k| m.get(k) == Some(9)));
    }

    #[test]
    fn reads_need_the_map_only_while_some_size_is_unchecked() {
        let sizes = KnownSizes::default();
        sizes.record(1, ColumnNo(0), 10);
        assert!(!sizes.any_to_check());
        sizes.record_unverified(2, ColumnNo(0), 11);
        sizes.record_unverified(2, ColumnNo(0), 11); // again: counted once
        sizes.record_unverified(3, ColumnNo(1), 12);
        assert!(sizes.any_to_check());
        sizes.record(2, ColumnNo(0), 11);
        assert!(sizes.any_to_check(), "3 is still unchecked");
        sizes.record_forgetting(3, ColumnNo(1), 9);
        assert!(sizes.any_to_check(), "3 is being forgotten");
        assert_eq!(sizes.state(3, ColumnNo(1)), Some(SizeState::Forgetting(9)));
        sizes.record(3, ColumnNo(1), 9);
        assert!(!sizes.any_to_check());
        assert_eq!(sizes.state(3, ColumnNo(1)), Some(SizeState::Verified(9)));
    }

    #[test]
    fn a_verified_size_is_recorded_only_where_it_contradicts_no_size_handed_out() {
        let sizes = KnownSizes::default();
        let c = ColumnNo(1);
        // Nothing known, or the same size known: recorded (and checked).
        assert!(sizes.record_if_consistent(1, c, 10));
        assert_eq!(sizes.state(1, c), Some(SizeState::Verified(10)));
        assert!(sizes.record_if_consistent(1, c, 10));
        sizes.record_unverified(2, c, 20);
        assert!(sizes.any_to_check());
        assert!(sizes.record_if_consistent(2, c, 20));
        assert_eq!(sizes.state(2, c), Some(SizeState::Verified(20)));
        assert!(!sizes.any_to_check(), "the unverified size is checked now");
        // Another size handed out, verified or not, or being forgotten: left as it is.
        assert!(!sizes.record_if_consistent(1, c, 11));
        sizes.record_unverified(3, c, 30);
        assert!(!sizes.record_if_consistent(3, c, 31));
        assert_eq!(sizes.state(3, c), Some(SizeState::Unverified(30)));
        sizes.record_forgetting(4, c, 40);
        assert!(!sizes.record_if_consistent(4, c, 40));
        assert_eq!(sizes.state(4, c), Some(SizeState::Forgetting(40)));
    }

    #[test]
    fn a_one_column_dataset_can_use_the_whole_capacity() {
        // Every key has column 0: they must still spread over all shards, so that half the
        // capacity is always kept.
        let sizes = KnownSizes::default();
        let n = KnownSizes::CAPACITY as u64 / 2;
        for s in 0..n {
            sizes.record(s, ColumnNo(0), s);
        }
        let kept = (0..n)
            .filter(|&s| sizes.get(s, ColumnNo(0)) == Some(s))
            .count() as u64;
        assert!(kept * 10 >= n * 9, "{kept} of {n} sizes kept");
    }
}
