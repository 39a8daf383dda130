//! `Cursor`: one served rank's reader as its reads show it: epoch, furthest position, the
//! positions read (a bitmap), and how far the advice reaches. Reads touch only atomics.

use super::walk::ShardSet;
use super::{MAX_SPREAD, NO_POSITION, REPLAN_STEP};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Mutex, OnceLock, RwLock};
use std::time::Instant;

/// One served rank's reader, as seen from its reads.
pub(super) struct Cursor {
    pub(super) epoch: AtomicU64,
    pub(super) position: AtomicU64,
    pub(super) planned_at: AtomicU64,
    /// Positions the cursor may move before the next plan (from the last window's length).
    pub(super) replan_step: AtomicU64,
    pub(super) reads: AtomicU64,
    pub(super) bytes: AtomicU64,
    /// Positions of the current epoch read or opened so far, one bit each (grown on demand).
    pub(super) read: RwLock<Vec<AtomicU64>>,
    /// No position below this one is still to be read (kept by the planner).
    pub(super) low: AtomicU64,
    pub(super) first_read: OnceLock<Instant>,
    /// When the current epoch's first read came and at which position (for samples/s).
    pub(super) epoch_start: Mutex<Option<(u64, Instant, u64)>>,
    /// The first position not advised yet, as (epoch, position); kept by the planner.
    pub(super) advised: Mutex<(u64, u64)>,
    /// Position of the cursor's epoch up to which advice reaches (`u64::MAX` when it
    /// reaches into the next epoch): the reads compare against it without a lock.
    pub(super) advised_to: AtomicU64,
    /// Set by a read when the advice runs short, cleared by the planner.
    pub(super) advice_due: std::sync::atomic::AtomicBool,
    /// Reads far behind the cursor, of positions read before, since the last read near it.
    pub(super) far_reads: AtomicU64,
    /// Where the advice for slower workers stopped, as (epoch, position): the unread positions
    /// from `low` up to it were advised (see `advise.rs`).
    pub(super) behind: Mutex<(u64, u64)>,
}

impl Cursor {
    pub(super) fn new() -> Self {
        Self {
            epoch: AtomicU64::new(0),
            position: AtomicU64::new(NO_POSITION),
            planned_at: AtomicU64::new(NO_POSITION),
            replan_step: AtomicU64::new(REPLAN_STEP),
            reads: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            read: RwLock::new(Vec::new()),
            low: AtomicU64::new(0),
            first_read: OnceLock::new(),
            epoch_start: Mutex::new(None),
            advised: Mutex::new((0, 0)),
            advised_to: AtomicU64::new(0),
            advice_due: std::sync::atomic::AtomicBool::new(false),
            far_reads: AtomicU64::new(0),
            behind: Mutex::new((NO_POSITION, 0)),
        }
    }

    /// Forgets what was read: the reader starts over at `position`.
    pub(super) fn restart_at(&self, position: u64) {
        // Before the bitmap's lock, never while holding it: the advice holds `behind` while
        // it reads the bitmap.
        *self.behind.lock().unwrap_or_else(|e| e.into_inner()) = (NO_POSITION, 0);
        let map = self.read.write().unwrap_or_else(|e| e.into_inner());
        for w in map.iter() {
            w.store(0, Relaxed);
        }
        self.low.store(position, Relaxed);
        self.far_reads.store(0, Relaxed);
    }

    /// Records that `position` was read.
    pub(super) fn mark_read(&self, position: u64) {
        if position < self.low.load(Relaxed) {
            return;
        }
        let Ok(word) = usize::try_from(position / 64) else {
            return;
        };
        let bit = 1u64 << (position % 64);
        {
            let map = self.read.read().unwrap_or_else(|e| e.into_inner());
            if let Some(w) = map.get(word) {
                w.fetch_or(bit, Relaxed);
                return;
            }
        }
        let mut map = self.read.write().unwrap_or_else(|e| e.into_inner());
        if map.len() <= word {
            let len = word
                .saturating_add(1)
                .max(map.len().saturating_mul(2))
                .max(64);
            map.resize_with(len, || AtomicU64::new(0));
        }
        if let Some(w) = map.get(word) {
            w.fetch_or(bit, Relaxed);
        }
    }

    /// Whether `position` itself was read in this epoch (its bit; positions below `low`
    /// that were skipped, not read, say no).
    pub(super) fn was_read(&self, position: u64) -> bool {
        let map = self.read.read().unwrap_or_else(|e| e.into_inner());
        usize::try_from(position / 64)
            .ok()
            .and_then(|w| map.get(w))
            .is_some_and(|w| w.load(Relaxed) & (1 << (position % 64)) != 0)
    }

    /// Which positions in `from..to` were read, as a bitmap starting at `from` (positions
    /// below `low` count as read).
    pub(super) fn read_between(&self, from: u64, to: u64) -> ShardSet {
        let low = self.low.load(Relaxed);
        let map = self.read.read().unwrap_or_else(|e| e.into_inner());
        let mut out = ShardSet::default();
        for p in from..to {
            let done = p < low
                || usize::try_from(p / 64)
                    .ok()
                    .and_then(|w| map.get(w))
                    .is_some_and(|w| w.load(Relaxed) & (1 << (p % 64)) != 0);
            if done {
                if let Ok(i) = u32::try_from(p - from) {
                    out.insert(i);
                }
            }
        }
        out
    }

    /// The first `max` positions in `from..to` not read (nor opened) yet, in order.
    pub(super) fn unread_between(&self, from: u64, to: u64, max: usize) -> Vec<u64> {
        let mut out = Vec::new();
        self.each_unread(from, to, |p| {
            out.push(p);
            out.len() < max
        });
        out
    }

    /// How many positions in `from..to` were not read (nor opened) yet.
    pub(super) fn count_unread(&self, from: u64, to: u64) -> u64 {
        let mut n = 0;
        self.each_unread(from, to, |_| {
            n += 1;
            true
        });
        n
    }

    /// Calls `f` with each position in `from..to` whose bit is clear (positions past the
    /// bitmap's end included), in order, while it returns true; a word of the bitmap at a
    /// time.
    fn each_unread(&self, from: u64, to: u64, mut f: impl FnMut(u64) -> bool) {
        let map = self.read.read().unwrap_or_else(|e| e.into_inner());
        let mut p = from;
        while p < to {
            let base = p - p % 64;
            let read = usize::try_from(p / 64)
                .ok()
                .and_then(|w| map.get(w))
                .map_or(0, |w| w.load(Relaxed));
            // Unread bits of this word from `p` on, below `to`.
            let mut unread = !read >> (p % 64) << (p % 64);
            if to - base < 64 {
                unread &= (1u64 << (to - base)) - 1;
            }
            while unread != 0 {
                let at = base + u64::from(unread.trailing_zeros());
                if !f(at) {
                    return;
                }
                unread &= unread - 1;
            }
            p = base + 64;
        }
    }

    /// Moves `low` up past the positions read, but never further back than [`MAX_SPREAD`]
    /// behind the cursor `pos`; returns it.
    pub(super) fn advance_low(&self, pos: u64) -> u64 {
        let mut low = self.low.load(Relaxed).max(pos.saturating_sub(MAX_SPREAD));
        {
            let map = self.read.read().unwrap_or_else(|e| e.into_inner());
            while low < pos {
                let Some(w) = usize::try_from(low / 64).ok().and_then(|w| map.get(w)) else {
                    break;
                };
                let rest = w.load(Relaxed) >> (low % 64);
                let run = u64::from((!rest).trailing_zeros()).min(64 - low % 64);
                if run == 0 {
                    break;
                }
                low += run;
            }
        }
        let low = low.min(pos);
        self.low.fetch_max(low, Relaxed);
        self.low.load(Relaxed)
    }
}
