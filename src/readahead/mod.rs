//! `readahead`: exact readahead from the known future of every rank this node serves.
//!
//! # Why exact
//! A training job reads its rank folder in sorted order, and that order is fixed by the
//! sampling plan before the first byte is read. So unlike a kernel or an object-store client,
//! which must *guess* the next read from the last few, we can *look it up*: position `p` of rank
//! `r` in epoch `e` is sample `order[e][r][p]`, which lives in one known shard. The scheduler
//! walks each rank's order forward from where its reader is and fetches the shards it meets, in
//! the order they will be needed, until the walk has covered the cache budget. Nothing is fetched
//! that is not needed soon, and nothing needed soon is missing unless the store is slower than
//! the reader.
//!
//! # Following readers
//! Each served rank has a cursor: its epoch and the highest position read so far. DataLoader
//! workers read a few batches concurrently and out of order, so a read behind the cursor is
//! normal and ignored; a read far behind ([`JUMP_BACK`] positions) or in another epoch means the
//! reader restarted elsewhere (a resumed job, a new epoch), and the cursor jumps there. Reads only
//! touch atomics; when a cursor has moved a [`REPLAN_FRACTION`]th of its last window (at least
//! [`REPLAN_STEP`] positions) since the last plan, the planner thread is woken and recomputes the
//! plan for all ranks at once. So a plan costs a fixed share of the reads however long the
//! window is: a window over a whole epoch is not walked again every few samples.
//!
//! # One cache for the node
//! The plan merges all ranks: a shard's *next use* is the smallest distance (in positions of
//! the rank that needs it first) at which any rank will read it. Fetches are issued nearest
//! first, deduplicated (a shard in flight is not asked for again), and bounded by
//! [`ReadaheadOptions::max_fetches`] worker threads. Because every rank's window is planned
//! against the same resident set, a shard read by several ranks in one epoch is fetched once
//! while it stays cached; the cache's eviction asks [`Readahead::next_use`] and drops the
//! resident, unpinned shard whose next use is furthest away (Belady's rule, which is optimal
//! when the future is known; L. A. Belady, "A study of replacement algorithms for a
//! virtual-storage computer", IBM Systems Journal 5(2), 1966). Past its window each rank's walk
//! goes on for eviction only ([`BEYOND_WINDOWS`] times its share of the budget in further
//! shards), so shards the windows do not reach are still ranked by their next use; shards no
//! walk meets have no next use and go first.
//!
//! # Budget
//! Each rank's walk stops after it has met `budget_bytes / ranks` bytes of distinct shards (or
//! [`ReadaheadOptions::max_lookahead`] positions), and all walks stop when the distinct shards
//! they met together reach `budget_bytes`, so the window of all ranks together fits in the
//! cache and prefetching never evicts a shard needed before the one being fetched. The walk
//! continues into the next epoch when the current one ends, so epoch boundaries do not stall.
//!
//! # Stalls
//! A read whose shard was not resident when it arrived had to wait for a fetch: the caller
//! reports it with [`Readahead::record_stall`], and `status.json` shows the count and time.

mod orders;
mod policy;

pub use orders::{EpochOrders, OrderCache, OrderSource, RankOrder, MIN_KEEP_EPOCHS};
pub use policy::FurthestNextUse;

use crate::cache::{Advice, CacheError};
use crate::status::{RankStatus, ReadaheadStatus};
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Condvar, Mutex, OnceLock, RwLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// A read this many positions behind the cursor means the reader restarted there.
pub const JUMP_BACK: u64 = 4096;
/// Past its window, a rank's walk goes on, for eviction only, until it has met this many times
/// its share of the budget in further shards (see [`Readahead::next_use`]).
pub const BEYOND_WINDOWS: u64 = 2;
/// The planner is woken when a cursor moved at least this many positions since the last plan.
pub const REPLAN_STEP: u64 = 16;
/// ... and at least this fraction (1/N) of the positions its last window covered.
pub const REPLAN_FRACTION: u64 = 32;
/// Shards of positions read this recently (behind the cursor) are kept while resident: a
/// worker may still be reading the sample's other files.
pub const BACK_MARGIN: u64 = 256;
/// Positions ahead of each cursor whose samples are kept advised: a resident shard's bytes
/// for them are asked into the page cache ([`ShardSource::advise`]) before the reader comes,
/// so a cached shard read with a cold page cache waits for the disk in parallel, not one
/// sample at a time.
pub const ADVISE_AHEAD: u64 = 256;
/// The advice is topped up when the cursor has eaten this many of its positions.
pub const ADVISE_STEP: u64 = 32;
/// Unread positions at most this far behind the cursor are still planned for (slower workers
/// will read them); further back, a position is taken as skipped.
pub const MAX_SPREAD: u64 = JUMP_BACK;

/// Errors of the readahead module.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReadaheadError {
    /// The sampling plan of an epoch could not be computed.
    #[error("cannot compute the order of epoch {epoch}: {why}")]
    Order {
        /// The epoch.
        epoch: u64,
        /// Why.
        why: String,
    },
    /// A local rank this node does not serve.
    #[error("local rank {0} is not served by this node")]
    NoSuchRank(usize),
}

/// What the scheduler needs from the shard cache.
pub trait ShardSource: Send + Sync {
    /// The shard holding global sample `sample`.
    fn shard_of(&self, sample: u64) -> Option<u32>;
    /// Bytes the shard takes in the cache (its decompressed size).
    fn shard_bytes(&self, shard: u32) -> u64;
    /// Whether the shard can be read now without waiting for the store.
    fn is_resident(&self, shard: u32) -> bool;
    /// Makes the shard resident, blocking until it is (does not keep it pinned); may return
    /// `Ok` without fetching when the cache has no room for it now (a prefetch never waits).
    fn fetch(&self, shard: u32) -> Result<(), CacheError>;
    /// Starts loading global sample `sample` from local disk into memory when its shard is
    /// resident (a hint: never blocks, never fetches). [`Advice::Full`] asks to be asked again
    /// later: the rank's advice stops there until readers have taken some.
    fn advise(&self, _sample: u64) -> Advice {
        Advice::Skipped
    }
}

/// Tuning of the scheduler.
#[derive(Clone, Debug)]
pub struct ReadaheadOptions {
    /// Bytes of shards the windows of all ranks may cover together (part of the cache limit).
    pub budget_bytes: u64,
    /// Concurrent fetches.
    pub max_fetches: usize,
    /// Longest walk per rank, in positions.
    pub max_lookahead: u64,
    /// First shard id of each stream after the first, in increasing order (empty for one
    /// stream). Each stream's cache has its own share of the limit, so the window covers at
    /// most `budget_bytes / streams` of each stream's shards.
    pub stream_starts: Vec<u32>,
    /// Epochs whose orders are kept in memory (at least [`MIN_KEEP_EPOCHS`]; epochs a reader
    /// is in are kept beyond it).
    pub keep_epochs: usize,
    /// The last epoch the job will read, when known: walks stop at its end instead of
    /// fetching the first shards of an epoch nobody reads.
    pub last_epoch: Option<u64>,
}

impl Default for ReadaheadOptions {
    fn default() -> Self {
        Self {
            budget_bytes: 1 << 30,
            max_fetches: 8,
            max_lookahead: 1 << 20,
            stream_starts: Vec::new(),
            keep_epochs: MIN_KEEP_EPOCHS,
            last_epoch: None,
        }
    }
}

const NO_POSITION: u64 = u64::MAX;

/// One served rank's reader, as seen from its reads.
struct Cursor {
    epoch: AtomicU64,
    position: AtomicU64,
    planned_at: AtomicU64,
    /// Positions the cursor may move before the next plan (from the last window's length).
    replan_step: AtomicU64,
    reads: AtomicU64,
    bytes: AtomicU64,
    /// Positions of the current epoch read or opened so far, one bit each (grown on demand).
    read: RwLock<Vec<AtomicU64>>,
    /// No position below this one is still to be read (kept by the planner).
    low: AtomicU64,
    first_read: OnceLock<Instant>,
    /// When the current epoch's first read came and at which position (for samples/s).
    epoch_start: Mutex<Option<(u64, Instant, u64)>>,
    /// The first position not advised yet, as (epoch, position); kept by the planner.
    advised: Mutex<(u64, u64)>,
    /// Position of the cursor's epoch up to which advice reaches (`u64::MAX` when it
    /// reaches into the next epoch): the reads compare against it without a lock.
    advised_to: AtomicU64,
    /// Set by a read when the advice runs short, cleared by the planner.
    advice_due: std::sync::atomic::AtomicBool,
}

impl Cursor {
    fn new() -> Self {
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
        }
    }

    /// Forgets what was read: the reader starts over at `position`.
    fn restart_at(&self, position: u64) {
        let map = self.read.write().unwrap_or_else(|e| e.into_inner());
        for w in map.iter() {
            w.store(0, Relaxed);
        }
        self.low.store(position, Relaxed);
    }

    /// Records that `position` was read.
    fn mark_read(&self, position: u64) {
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

    /// Which positions in `from..to` were read, as a bitmap starting at `from` (positions
    /// below `low` count as read).
    fn read_between(&self, from: u64, to: u64) -> ShardSet {
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

    /// Moves `low` up past the positions read, but never further back than [`MAX_SPREAD`]
    /// behind the cursor `pos`; returns it.
    fn advance_low(&self, pos: u64) -> u64 {
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

#[derive(Default)]
struct Queue {
    generation: u64,
    planned: u64,
    /// Requests for advice (a cursor's ran short, see [`ADVISE_STEP`]) ...
    advice: u64,
    /// ... and how many of them the planner has answered.
    advice_done: u64,
    /// The planner is topping up the advice after a plan (for [`Readahead::wait_idle`]).
    advising: bool,
    pending: VecDeque<u32>,
    /// Shards of the last plan whose nearest use is in a later epoch than their rank's.
    later_epoch: HashSet<u32>,
    in_flight: HashSet<u32>,
    stop: bool,
}

/// What one plan decided: each planned shard's next use, the shards to fetch (nearest
/// first), and which of those are first needed in a later epoch than their rank's.
struct Plan {
    next_use: HashMap<u32, u64>,
    wanted: Vec<u32>,
    later: HashSet<u32>,
}

struct Inner {
    orders: OrderCache,
    shards: Arc<dyn ShardSource>,
    cursors: Vec<Cursor>,
    opts: ReadaheadOptions,
    queue: Mutex<Queue>,
    wake_planner: Condvar,
    wake_fetchers: Condvar,
    next_use: RwLock<HashMap<u32, u64>>,
    stalls: AtomicU64,
    stall_ns: AtomicU64,
    prefetches: AtomicU64,
    /// Shards in the last plan's windows (wanted or resident), beside those only ranked for
    /// eviction past them.
    window_shards: AtomicU64,
    /// Prefetches (and their shards' bytes) for a use in a later epoch than their rank's:
    /// the next epoch's first shards, fetched while the current one ends.
    prefetches_for_later_epoch: AtomicU64,
    prefetched_bytes_for_later_epoch: AtomicU64,
    prefetch_errors: AtomicU64,
    plans: AtomicU64,
    advised: AtomicU64,
    /// The rank the next advice pass starts with (see `advise`).
    advise_first: AtomicU64,
}

/// The node's readahead scheduler: rank orders, cursors, the plan and the fetch workers.
pub struct Readahead {
    inner: Arc<Inner>,
    threads: Vec<JoinHandle<()>>,
}

impl Readahead {
    /// Starts the scheduler for `ranks` local ranks.
    pub fn new(
        orders: Box<dyn OrderSource>,
        shards: Arc<dyn ShardSource>,
        ranks: usize,
        opts: ReadaheadOptions,
    ) -> Self {
        let inner = Arc::new(Inner {
            orders: OrderCache::new(orders, opts.keep_epochs),
            shards,
            cursors: (0..ranks).map(|_| Cursor::new()).collect(),
            opts: opts.clone(),
            queue: Mutex::new(Queue::default()),
            wake_planner: Condvar::new(),
            wake_fetchers: Condvar::new(),
            next_use: RwLock::new(HashMap::new()),
            stalls: AtomicU64::new(0),
            stall_ns: AtomicU64::new(0),
            prefetches: AtomicU64::new(0),
            window_shards: AtomicU64::new(0),
            prefetches_for_later_epoch: AtomicU64::new(0),
            prefetched_bytes_for_later_epoch: AtomicU64::new(0),
            prefetch_errors: AtomicU64::new(0),
            plans: AtomicU64::new(0),
            advised: AtomicU64::new(0),
            advise_first: AtomicU64::new(0),
        });
        let mut threads = Vec::new();
        let i = inner.clone();
        if let Ok(t) = std::thread::Builder::new()
            .name("readahead-plan".into())
            .spawn(move || i.plan_loop())
        {
            threads.push(t);
        }
        for n in 0..opts.max_fetches.max(1) {
            let i = inner.clone();
            if let Ok(t) = std::thread::Builder::new()
                .name(format!("readahead-fetch-{n}"))
                .spawn(move || i.fetch_loop())
            {
                threads.push(t);
            }
        }
        Self { inner, threads }
    }

    /// Number of local ranks followed.
    pub fn ranks(&self) -> usize {
        self.inner.cursors.len()
    }

    /// The order of local rank `rank` in `epoch` (computed on first use, cached for a few epochs).
    pub fn order(&self, epoch: u64, rank: usize) -> Result<RankOrder, ReadaheadError> {
        self.inner.orders.rank(epoch, rank)
    }

    /// Adds `bytes` delivered to local rank `rank` (for its throughput).
    pub fn count_bytes(&self, rank: usize, bytes: u64) {
        if let Some(c) = self.inner.cursors.get(rank) {
            c.bytes.fetch_add(bytes, Relaxed);
        }
    }

    /// Tells the scheduler that local rank `rank` is reading `position` of `epoch` (called
    /// before the read waits for its shard, so a jump starts fetching at once).
    pub fn on_read(&self, rank: usize, epoch: u64, position: u64) {
        let Some(c) = self.inner.cursors.get(rank) else {
            return;
        };
        let _ = c.first_read.get_or_init(Instant::now);
        c.reads.fetch_add(1, Relaxed);
        let cur_epoch = c.epoch.load(Relaxed);
        let cur = c.position.load(Relaxed);
        let moved = if cur == NO_POSITION || cur_epoch != epoch || position + JUMP_BACK < cur {
            if cur == NO_POSITION || cur_epoch != epoch {
                *c.epoch_start.lock().unwrap_or_else(|e| e.into_inner()) =
                    Some((epoch, Instant::now(), position));
            }
            c.restart_at(position);
            c.epoch.store(epoch, Relaxed);
            c.position.store(position, Relaxed);
            true
        } else if position > cur {
            c.position.fetch_max(position, Relaxed);
            let planned = c.planned_at.load(Relaxed);
            planned == NO_POSITION
                || position >= planned.saturating_add(c.replan_step.load(Relaxed))
                || position < planned
        } else {
            false
        };
        c.mark_read(position);
        if moved {
            let mut q = self.inner.queue.lock().unwrap_or_else(|e| e.into_inner());
            q.generation += 1;
            self.inner.wake_planner.notify_one();
        } else if position.saturating_add(ADVISE_AHEAD)
            >= c.advised_to.load(Relaxed).saturating_add(ADVISE_STEP)
            && !c.advice_due.swap(true, Relaxed)
        {
            let mut q = self.inner.queue.lock().unwrap_or_else(|e| e.into_inner());
            q.advice += 1;
            self.inner.wake_planner.notify_one();
        }
    }

    /// Tells the scheduler that local rank `rank` opened (looked up) `position` of `epoch`.
    ///
    /// A sample file is one inode wherever it appears, so the kernel may serve a reopened
    /// sample from its page cache and no read ever reaches us. The position still counts as
    /// consumed once the cursor has passed it: the plan no longer waits for it, and a later read
    /// elsewhere does not bring its shard back for nothing. A lookup never moves the cursor
    /// (`ls -l` of a folder looks up every name) and is ignored outside the cursor's epoch.
    pub fn on_lookup(&self, rank: usize, epoch: u64, position: u64) {
        let Some(c) = self.inner.cursors.get(rank) else {
            return;
        };
        if c.position.load(Relaxed) != NO_POSITION && c.epoch.load(Relaxed) == epoch {
            c.mark_read(position);
        }
    }

    /// True when local rank `rank` is reading `epoch` and `position` is not far behind its
    /// cursor (a read there would be one of its own, not a jump): tells which of a sample's
    /// recent names a read of its shared inode is for.
    pub fn is_reading_near(&self, rank: usize, epoch: u64, position: u64) -> bool {
        let Some(c) = self.inner.cursors.get(rank) else {
            return false;
        };
        let cur = c.position.load(Relaxed);
        cur != NO_POSITION
            && c.epoch.load(Relaxed) == epoch
            && position.saturating_add(JUMP_BACK) >= cur
    }

    /// Records a read that waited `waited` for its shard to arrive.
    pub fn record_stall(&self, waited: Duration) {
        self.inner.stalls.fetch_add(1, Relaxed);
        self.inner
            .stall_ns
            .fetch_add(waited.as_nanos() as u64, Relaxed);
    }

    /// Distance (in positions) to the next use of `shard` by any rank, within its window or
    /// past it (see [`BEYOND_WINDOWS`]); `u64::MAX` when no rank's walk met it. Eviction drops
    /// the largest first.
    pub fn next_use(&self, shard: u32) -> u64 {
        self.inner
            .next_use
            .read()
            .map(|m| m.get(&shard).copied().unwrap_or(u64::MAX))
            .unwrap_or(u64::MAX)
    }

    /// Makes the planner plan again at the cursors as they are now (tests: the planner runs
    /// beside the reads, so a test's last read may fall within a replan step of the last plan).
    #[cfg(test)]
    fn replan_now(&self) {
        let mut q = self.inner.queue.lock().unwrap_or_else(|e| e.into_inner());
        q.generation += 1;
        self.inner.wake_planner.notify_one();
    }

    /// Blocks until the planner has seen every read reported so far and its fetches are done
    /// (for tests and benchmarks).
    pub fn wait_idle(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            {
                let q = self.inner.queue.lock().unwrap_or_else(|e| e.into_inner());
                if q.planned == q.generation
                    && q.advice == q.advice_done
                    && !q.advising
                    && q.pending.is_empty()
                    && q.in_flight.is_empty()
                {
                    return true;
                }
            }
            if Instant::now() > deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Live counters for `status.json`.
    pub fn status(&self) -> ReadaheadStatus {
        let i = &self.inner;
        let ranks = i
            .cursors
            .iter()
            .enumerate()
            .map(|(n, c)| {
                let pos = c.position.load(Relaxed);
                let bytes = c.bytes.load(Relaxed);
                let reads = c.reads.load(Relaxed);
                let secs = c
                    .first_read
                    .get()
                    .map(|t| t.elapsed().as_secs_f64())
                    .unwrap_or(0.0);
                let epoch_rate = match *c.epoch_start.lock().unwrap_or_else(|e| e.into_inner()) {
                    Some((_, at, from))
                        if pos != NO_POSITION && at.elapsed().as_secs_f64() > 0.0 =>
                    {
                        ((pos.saturating_sub(from) + 1) as f64 / at.elapsed().as_secs_f64() * 10.0)
                            .round()
                            / 10.0
                    }
                    _ => 0.0,
                };
                let started = pos != NO_POSITION;
                RankStatus {
                    local_rank: n as u64,
                    epoch: c.epoch.load(Relaxed),
                    cursor: started.then_some(pos),
                    lowest_unread: started.then(|| c.low.load(Relaxed)),
                    requests: reads,
                    bytes_read: bytes,
                    bytes_per_second: if secs > 0.0 {
                        (bytes as f64 / secs).round()
                    } else {
                        0.0
                    },
                    requests_per_second: if secs > 0.0 {
                        (reads as f64 / secs * 10.0).round() / 10.0
                    } else {
                        0.0
                    },
                    samples_per_second: epoch_rate,
                    epoch_samples: None,
                }
            })
            .collect();
        let (pending, in_flight) = {
            let q = i.queue.lock().unwrap_or_else(|e| e.into_inner());
            (q.pending.len(), q.in_flight.len())
        };
        ReadaheadStatus {
            stalls: i.stalls.load(Relaxed),
            stall_seconds: i.stall_ns.load(Relaxed) as f64 / 1e9,
            prefetches: i.prefetches.load(Relaxed),
            prefetches_for_next_epoch: i.prefetches_for_later_epoch.load(Relaxed),
            prefetched_bytes_for_next_epoch: i.prefetched_bytes_for_later_epoch.load(Relaxed),
            prefetch_errors: i.prefetch_errors.load(Relaxed),
            plans: i.plans.load(Relaxed),
            window_shards: i.window_shards.load(Relaxed),
            samples_advised: i.advised.load(Relaxed),
            fetches_pending: pending as u64,
            fetches_in_flight: in_flight as u64,
            ranks,
        }
    }
}

impl Drop for Readahead {
    fn drop(&mut self) {
        {
            let mut q = self.inner.queue.lock().unwrap_or_else(|e| e.into_inner());
            q.stop = true;
        }
        self.inner.wake_planner.notify_all();
        self.inner.wake_fetchers.notify_all();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Inner {
    fn plan_loop(&self) {
        loop {
            let (generation, asked) = {
                let mut q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
                while !q.stop && q.planned == q.generation && q.advice == q.advice_done {
                    q = self.wake_planner.wait(q).unwrap_or_else(|e| e.into_inner());
                }
                if q.stop {
                    return;
                }
                if q.planned == q.generation {
                    // Only the advice ran short: top it up without a new plan.
                    let asked = q.advice;
                    drop(q);
                    self.advise();
                    let mut q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
                    q.advice_done = q.advice_done.max(asked);
                    continue;
                }
                (q.generation, q.advice)
            };
            let Plan {
                next_use,
                wanted,
                later,
            } = self.plan();
            if let Ok(mut m) = self.next_use.write() {
                *m = next_use;
            }
            let mut q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
            let pending: VecDeque<u32> = wanted
                .into_iter()
                .filter(|s| !q.in_flight.contains(s))
                .collect();
            q.pending = pending;
            q.later_epoch = later;
            q.planned = generation;
            q.advising = true;
            self.plans.fetch_add(1, Relaxed);
            self.wake_fetchers.notify_all();
            drop(q);
            // After the fetches are queued: they must not wait for the advice.
            self.advise();
            let mut q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
            q.advising = false;
            q.advice_done = q.advice_done.max(asked);
        }
    }

    /// Keeps the samples of the next [`ADVISE_AHEAD`] positions of every rank advised (into
    /// the page cache, where their shards are on disk), each position once, continuing into
    /// the next epoch near the end of one. Cheap: a few lookups and one `posix_fadvise` per
    /// position, so it runs more often than a plan.
    ///
    /// When the room for samples read ahead runs out ([`Advice::Full`]), the ranks after the
    /// one that filled it get nothing in that pass; the next pass starts with the rank after
    /// the one that filled it, so on a node of many ranks no rank keeps the room to itself
    /// (also when the others had no position yet when it filled the room).
    fn advise(&self) {
        let ranks = self.cursors.len();
        let first = (self.advise_first.load(Relaxed) as usize).min(ranks.saturating_sub(1));
        // The last rank in this pass that got advice until the room ran out.
        let mut filled_by = None;
        for r in (first..ranks).chain(0..first) {
            let c = &self.cursors[r];
            c.advice_due.store(false, Relaxed);
            let pos = c.position.load(Relaxed);
            if pos == NO_POSITION {
                continue;
            }
            let epoch = c.epoch.load(Relaxed);
            let mut mark = c.advised.lock().unwrap_or_else(|e| e.into_inner());
            // Positions in the cursor's epoch (for the distance to the next one's).
            let mut epoch_len = None;
            let mut len_of_epoch = || {
                *epoch_len.get_or_insert_with(|| {
                    self.orders
                        .epoch(epoch)
                        .ok()
                        .and_then(|o| o.get(r).map(|o| o.len() as u64))
                        .unwrap_or(0)
                })
            };
            // A mark the last pass left (one past its last position) or nearer.
            let near = |ahead: u64| ahead <= ADVISE_AHEAD + 1;
            let (mut e, mut p) = match *mark {
                (e, p) if e == epoch && p > pos && near(p - pos) => (e, p),
                (e, p)
                    if e == epoch.saturating_add(1)
                        && near(len_of_epoch().saturating_sub(pos).saturating_add(p)) =>
                {
                    (e, p)
                }
                _ => (epoch, pos.saturating_add(1)),
            };
            let mut orders: Option<(u64, Option<RankOrder>)> = None;
            let (mut full, mut started) = (false, false);
            loop {
                let ahead = if e == epoch {
                    p.saturating_sub(pos)
                } else {
                    // Positions left in the cursor's epoch, then those of the next one.
                    len_of_epoch().saturating_sub(pos).saturating_add(p)
                };
                if ahead > ADVISE_AHEAD || e > epoch.saturating_add(1) {
                    break;
                }
                if self.opts.last_epoch.is_some_and(|last| e > last) {
                    break;
                }
                if orders.as_ref().is_none_or(|(oe, _)| *oe != e) {
                    let o = self.orders.epoch(e).ok().and_then(|o| o.get(r).cloned());
                    orders = Some((e, o));
                }
                let Some((_, Some(order))) = &orders else {
                    break;
                };
                let Some(sample) = usize::try_from(p).ok().and_then(|i| order.get(i)) else {
                    e += 1;
                    p = 0;
                    continue;
                };
                match self.shards.advise(sample) {
                    Advice::Started => {
                        self.advised.fetch_add(1, Relaxed);
                        started = true;
                    }
                    Advice::Skipped => {}
                    // This position again on the next pass.
                    Advice::Full => {
                        full = true;
                        break;
                    }
                }
                p += 1;
            }
            *mark = (e, p);
            // When full, the next pass comes after as many reads as a full window's would
            // (not on the next read), from where this one stopped.
            let to = if full {
                pos.saturating_add(ADVISE_AHEAD)
            } else if e == epoch {
                p
            } else {
                u64::MAX
            };
            c.advised_to.store(to, Relaxed);
            if full && started {
                filled_by = Some(r);
            }
        }
        // A pass in which no rank got advice keeps the order: its first rank was not served.
        if let Some(r) = filled_by {
            self.advise_first.store(((r + 1) % ranks) as u64, Relaxed);
        }
    }

    /// Walks every rank's order from its cursor; returns each shard's next use and the shards
    /// to fetch, nearest first.
    ///
    /// Each epoch's orders are looked up once per plan (not once per rank), and the epochs
    /// readers are in are marked so the order cache never drops them. The window is bounded
    /// twice: each rank's walk by its share of the budget (so one rank cannot take it all) and
    /// all walks together by one running total of distinct shards per stream, stopping at the
    /// stream's share of the budget, so the plan never covers more than the budget (nor any
    /// stream's cache more than its part), however many ranks there are. A rank whose first
    /// shard alone is larger than its share may still take it, if the total allows.
    fn plan(&self) -> Plan {
        let ranks = self.cursors.len().max(1) as u64;
        let budget = self.opts.budget_bytes;
        let per_rank = budget / ranks;
        let starts = &self.opts.stream_starts;
        let per_stream = budget / (starts.len() as u64 + 1);
        let stream_of = |shard: u32| starts.partition_point(|&f| f <= shard);
        let mut next_use = ShardDistances::default();
        let in_use: HashSet<u64> = self
            .cursors
            .iter()
            .filter(|c| c.position.load(Relaxed) != NO_POSITION)
            .flat_map(|c| {
                let e = c.epoch.load(Relaxed);
                [e, e.saturating_add(1)]
            })
            .collect();
        self.orders.set_in_use(in_use);
        let mut epochs: HashMap<u64, Option<EpochOrders>> = HashMap::new();
        // Past the window, the walk goes on for eviction only: later uses of shards outside
        // the window, so the cache drops the one needed last, not the least recently used
        // of all those the window does not reach (a shard just finished this epoch is
        // recent, one whose samples come back after the window is not).
        let mut beyond = ShardDistances::default();
        let mut planned = ShardSet::default();
        let mut totals = vec![0u64; starts.len() + 1];
        let mut full = vec![false; starts.len() + 1];
        for (r, c) in self.cursors.iter().enumerate() {
            let pos = c.position.load(Relaxed);
            if pos == NO_POSITION {
                continue;
            }
            let epoch = c.epoch.load(Relaxed);
            c.planned_at.store(pos, Relaxed);
            let mut seen = ShardSet::default();
            let mut bytes = 0u64;
            // The walk starts at the lowest position still to be read (slower workers) or
            // BACK_MARGIN behind the cursor, whichever is further back. Positions read are
            // passed over (their shards are kept while recent and resident); `distance`
            // counts the positions still to be read.
            let low = c.advance_low(pos);
            let start0 = low.min(pos.saturating_sub(BACK_MARGIN));
            let read = c.read_between(start0, pos.saturating_add(1));
            let mut walked = 0u64;
            let mut distance = 0u64;
            let mut start = start0;
            // Set once the window is full: the rest of the walk only records `beyond`.
            let mut window_end: Option<u64> = None;
            let mut beyond_bytes = 0u64;
            let mut beyond_seen = ShardSet::default();
            let end = match self.opts.last_epoch {
                Some(last) => last
                    .saturating_add(1)
                    .clamp(epoch + 1, epoch.saturating_add(2)),
                None => epoch.saturating_add(2),
            };
            'epochs: for e in epoch..end {
                let orders = epochs
                    .entry(e)
                    .or_insert_with(|| self.orders.epoch(e).ok())
                    .clone();
                let Some(order) = orders.and_then(|o| o.get(r).cloned()) else {
                    break;
                };
                let from = usize::try_from(start).unwrap_or(usize::MAX);
                for sample in order.iter_from(from) {
                    let here = walked;
                    walked += 1;
                    // Only positions up to the cursor count: one opened ahead of it (a listing
                    // with `stat`) is still to be read.
                    let done = e == epoch
                        && u32::try_from(here).is_ok_and(|i| read.contains(i))
                        && start0.saturating_add(here) <= pos;
                    let Some(shard) = self.shards.shard_of(sample) else {
                        continue;
                    };
                    if done {
                        // Read already: a worker may still be reading its other files.
                        if start0.saturating_add(here).saturating_add(BACK_MARGIN) >= pos
                            && self.shards.is_resident(shard)
                        {
                            next_use.at_most(shard, 0, false);
                        }
                        continue;
                    }
                    if window_end.is_some() {
                        if !beyond_seen.contains(shard) {
                            beyond_bytes =
                                beyond_bytes.saturating_add(self.shards.shard_bytes(shard));
                            if beyond_bytes > per_rank.saturating_mul(BEYOND_WINDOWS) {
                                break 'epochs;
                            }
                            beyond_seen.insert(shard);
                        }
                        beyond.at_most(shard, distance, e > epoch);
                        distance += 1;
                        if distance > self.opts.max_lookahead {
                            break 'epochs;
                        }
                        continue;
                    }
                    if !seen.contains(shard) {
                        let size = self.shards.shard_bytes(shard);
                        if !seen.is_empty() && bytes.saturating_add(size) > per_rank {
                            window_end = Some(distance);
                            beyond.at_most(shard, distance, e > epoch);
                            distance += 1;
                            continue;
                        }
                        if !planned.contains(shard) {
                            let stream = stream_of(shard);
                            let (Some(total), Some(is_full)) =
                                (totals.get_mut(stream), full.get_mut(stream))
                            else {
                                break 'epochs;
                            };
                            if *is_full || total.saturating_add(size) > per_stream {
                                // This stream's share is covered: plan none of its later
                                // shards, but keep walking for the other streams.
                                *is_full = true;
                                if full.iter().all(|&f| f) {
                                    window_end = Some(distance);
                                }
                                beyond.at_most(shard, distance, e > epoch);
                                distance += 1;
                                continue;
                            }
                            *total = total.saturating_add(size);
                            planned.insert(shard);
                        }
                        bytes = bytes.saturating_add(size);
                        seen.insert(shard);
                    }
                    next_use.at_most(shard, distance, e > epoch);
                    distance += 1;
                    if distance > self.opts.max_lookahead {
                        break 'epochs;
                    }
                }
                start = 0;
            }
            let window = window_end.unwrap_or(distance);
            c.replan_step
                .store((window / REPLAN_FRACTION).max(REPLAN_STEP), Relaxed);
        }
        let later = next_use.later_epoch();
        let next_use = next_use.into_map();
        let mut wanted: Vec<(u64, u32)> = next_use
            .iter()
            .filter(|(s, _)| !self.shards.is_resident(**s))
            .map(|(s, d)| (*d, *s))
            .collect();
        wanted.sort_unstable();
        // For eviction: the window's distances, and past it the later uses it does not cover.
        let mut evict_order = beyond.into_map();
        evict_order.extend(next_use.iter().map(|(s, d)| (*s, *d)));
        self.window_shards.store(next_use.len() as u64, Relaxed);
        Plan {
            next_use: evict_order,
            wanted: wanted.into_iter().map(|(_, s)| s).collect(),
            later,
        }
    }

    fn fetch_loop(&self) {
        loop {
            let (shard, for_later_epoch) = {
                let mut q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
                loop {
                    if q.stop {
                        return;
                    }
                    if let Some(s) = q.pending.pop_front() {
                        if q.in_flight.insert(s) {
                            break (s, q.later_epoch.contains(&s));
                        }
                        continue;
                    }
                    q = self
                        .wake_fetchers
                        .wait(q)
                        .unwrap_or_else(|e| e.into_inner());
                }
            };
            if !self.shards.is_resident(shard) {
                self.prefetches.fetch_add(1, Relaxed);
                match self.shards.fetch(shard) {
                    Ok(()) if for_later_epoch => {
                        self.prefetches_for_later_epoch.fetch_add(1, Relaxed);
                        self.prefetched_bytes_for_later_epoch
                            .fetch_add(self.shards.shard_bytes(shard), Relaxed);
                    }
                    Ok(()) => {}
                    Err(why) => {
                        self.prefetch_errors.fetch_add(1, Relaxed);
                        tracing::warn!(shard, %why, "readahead fetch failed");
                    }
                }
            }
            let mut q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
            q.in_flight.remove(&shard);
        }
    }
}

/// A set of shard ids as a bitmap: a plan asks it once per walked position, so it must cost
/// less than hashing.
#[derive(Default)]
struct ShardSet(Vec<u64>);

impl ShardSet {
    fn is_empty(&self) -> bool {
        self.0.iter().all(|&w| w == 0)
    }

    fn contains(&self, shard: u32) -> bool {
        let i = shard as usize;
        self.0.get(i / 64).is_some_and(|w| w & (1 << (i % 64)) != 0)
    }

    fn insert(&mut self, shard: u32) {
        let i = shard as usize;
        if self.0.len() <= i / 64 {
            self.0.resize(i / 64 + 1, 0);
        }
        if let Some(w) = self.0.get_mut(i / 64) {
            *w |= 1 << (i % 64);
        }
    }
}

/// Each shard's smallest distance so far, indexed by shard id (`u64::MAX`: not met), and
/// whether that nearest use is in a later epoch than its rank's current one.
#[derive(Default)]
struct ShardDistances(Vec<(u64, bool)>);

impl ShardDistances {
    /// Lowers `shard`'s distance to `d` if it is larger; `later`: that use is in a later
    /// epoch than the rank's.
    fn at_most(&mut self, shard: u32, d: u64, later: bool) {
        let i = shard as usize;
        if self.0.len() <= i {
            self.0.resize(i + 1, (u64::MAX, false));
        }
        if let Some(x) = self.0.get_mut(i) {
            if d < x.0 {
                *x = (d, later);
            }
        }
    }

    /// The shards whose nearest use is in a later epoch than their rank's.
    fn later_epoch(&self) -> HashSet<u32> {
        self.0
            .iter()
            .enumerate()
            .filter(|(_, (d, later))| *later && *d != u64::MAX)
            .map(|(s, _)| s as u32)
            .collect()
    }

    /// The shards met, with their distances.
    fn into_map(self) -> HashMap<u32, u64> {
        self.0
            .into_iter()
            .enumerate()
            .filter(|(_, (d, _))| *d != u64::MAX)
            .map(|(s, (d, _))| (s as u32, d))
            .collect()
    }
}

#[cfg(test)]
mod tests;
