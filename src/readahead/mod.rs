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
//! normal and ignored, and so is a read of a position still unread up to [`MAX_SPREAD`] behind
//! (a slower worker). A read in another epoch, or [`RESTART_READS`] reads far behind
//! ([`JUMP_BACK`] positions) of positions read before with none near the cursor between, mean
//! the reader restarted elsewhere (a new epoch, a resumed job), and the cursor jumps there.
//! Reads only touch atomics; when a cursor has moved a [`REPLAN_FRACTION`]th of its last window
//! (at least [`REPLAN_STEP`] positions) since the last plan, the planner thread is woken and
//! recomputes the plan for all ranks at once. So a plan costs a fixed share of the reads however
//! long the window is: a window over a whole epoch is not walked again every few samples, and a
//! walk stops early in an epoch once it has met every shard left in it (`reach.rs`).
//!
//! # One cache for the node
//! The plan merges all ranks: a shard's *next use* is the smallest distance (in positions of
//! the rank that needs it first) at which any rank will read it. Fetches are issued nearest
//! first, deduplicated (a shard in flight is not asked for again), and bounded by
//! [`ReadaheadOptions::max_fetches`] worker threads. Because every rank's window is planned
//! against the same resident set, a shard read by several ranks in one epoch is fetched once
//! while it stays cached; the planner writes each shard's next use into the plan's
//! [`NextUse`] table, and the cache's eviction reads it there and drops the
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

mod advise;
mod cached;
mod cursor;
mod policy;
mod reach;
mod status;
mod walk;

pub use cached::CachedStreams;
pub use policy::FurthestNextUse;

use crate::cache::{Advice, CacheError};
use crate::plan::{NextUse, OrderCache, PlanError, RankOrder};
use cursor::Cursor;
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

thread_local! {
    /// Set on the readahead's fetch threads.
    static ON_FETCH_THREAD: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether the calling thread is one of the readahead's fetch threads: it answers no reader,
/// so work a download's landing hands on may make it wait (a reader's thread must not).
pub fn on_fetch_thread() -> bool {
    ON_FETCH_THREAD.with(|f| f.get())
}

/// Reads this many positions behind the cursor, of positions read before (or given up as
/// skipped, behind [`MAX_SPREAD`]), [`RESTART_READS`] of them with no read near the cursor
/// between, mean the reader restarted there.
pub const JUMP_BACK: u64 = 4096;
/// See [`JUMP_BACK`]. One such read is not enough: a slower worker far behind reads the
/// other files of the sample it just read (its position read before) while the other
/// workers read near the cursor, and moving the cursor back and forth between them made the
/// planner plan again at every read (the bench's readers: 5,356 plans in a run).
pub const RESTART_READS: u64 = 32;
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
/// The advice is topped up when the cursor has eaten this many of its positions, or at every
/// this-many-th read of the rank that falls behind the cursor.
pub const ADVISE_STEP: u64 = 32;
/// Unread positions behind the cursor, from the lowest one on, whose samples are kept advised
/// too: a slower worker's next reads. The advice ahead of the cursor passed them long before
/// that worker comes (workers that nothing keeps in step drift thousands of positions apart),
/// and what was read ahead for them is dropped once stale or never fit; without this the
/// slowest worker reads from the disk one sample at a time and falls further behind, and a
/// pass lasts as long as its slowest worker.
pub const ADVISE_BEHIND: u64 = 256;
/// Unread positions at most this far behind the cursor are still planned for (slower workers
/// will read them); further back, a position is taken as skipped. Larger than [`JUMP_BACK`]:
/// workers that drift apart (the bench's readers, whose workers nothing keeps in step, were
/// seen 4,141 positions apart) read unread positions, and must not move the cursor back.
pub const MAX_SPREAD: u64 = 4 * JUMP_BACK;

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
    /// `urgent`: a reader is about to block on it, or at a cold start is blocked on it (see
    /// `Plan::urgent`), so its download goes first, as a read's would.
    fn fetch(&self, shard: u32, urgent: bool) -> Result<(), CacheError>;
    /// Starts loading global sample `sample` from local disk into memory when its shard is
    /// resident (a hint: never blocks, never fetches). [`Advice::Full`] asks to be asked again
    /// later: the rank's advice stops there until readers have taken some.
    fn advise(&self, _sample: u64) -> Advice {
        Advice::Skipped
    }
}

/// At a cold start the urgent fetches (the shard of each rank's lowest position a reader
/// waits for) run alone until the first of them ends, at most this long: on a host whose cores
/// are busy receiving, four shards started at once each arrive four times later, and the first
/// file waits for all of them instead of one. Reads that would fetch other shards (a loader's
/// other workers, a batch further on) are held as long ([`Readahead::hold_for_first_fetch`]).
pub const FIRST_FETCHES_ALONE: std::time::Duration = std::time::Duration::from_secs(2);

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
            last_epoch: None,
        }
    }
}

const NO_POSITION: u64 = u64::MAX;

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
    /// Pending shards a reader is about to block on.
    urgent: HashSet<u32>,
    /// A fetch has ended (or a plan had nothing urgent): prefetches may start. Until then
    /// only urgent fetches run (see [`FIRST_FETCHES_ALONE`]).
    first_done: bool,
    in_flight: HashSet<u32>,
    stop: bool,
}

/// What one plan decided: each planned shard's next use, the shards to fetch (nearest
/// first), and which of those are first needed in a later epoch than their rank's.
struct Plan {
    next_use: HashMap<u32, u64>,
    wanted: Vec<u32>,
    later: HashSet<u32>,
    /// Wanted shards a reader is about to block on: the shard of each rank's next position
    /// still to be read; at a cold start, the shard of its lowest position a reader is
    /// blocked on (later, the positions being read are not counted: their readers fill their
    /// shards themselves). Only that one: in a fully shuffled epoch each position's sample is
    /// in another shard, and more urgent shards would share the link as prefetches do.
    urgent: HashSet<u32>,
}

struct Inner {
    orders: Arc<OrderCache>,
    shards: Arc<dyn ShardSource>,
    cursors: Vec<Cursor>,
    opts: ReadaheadOptions,
    queue: Mutex<Queue>,
    wake_planner: Condvar,
    wake_fetchers: Condvar,
    /// The plan's next-use table, which this scheduler's planner keeps and eviction reads.
    next_use: Arc<NextUse>,
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
    /// Distinct shards left in each walked (epoch, rank) order, so walks stop early.
    reach: reach::OrderReach,
}

/// The node's readahead scheduler: rank orders, cursors, the plan and the fetch workers.
pub struct Readahead {
    inner: Arc<Inner>,
    threads: Vec<JoinHandle<()>>,
}

impl Readahead {
    /// Starts the scheduler for `ranks` local ranks, walking the rank orders of `orders`
    /// and keeping `next_use` (the plan's table, which eviction reads) up to date.
    pub fn new(
        orders: Arc<OrderCache>,
        next_use: Arc<NextUse>,
        shards: Arc<dyn ShardSource>,
        ranks: usize,
        opts: ReadaheadOptions,
    ) -> Self {
        let inner = Arc::new(Inner {
            orders,
            shards,
            cursors: (0..ranks).map(|_| Cursor::new()).collect(),
            opts: opts.clone(),
            queue: Mutex::new(Queue::default()),
            wake_planner: Condvar::new(),
            wake_fetchers: Condvar::new(),
            next_use,
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
            reach: reach::OrderReach::default(),
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
                .spawn(move || {
                    ON_FETCH_THREAD.with(|f| f.set(true));
                    i.fetch_loop()
                })
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
    pub fn order(&self, epoch: u64, rank: usize) -> Result<RankOrder, PlanError> {
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
        let reads = c.reads.fetch_add(1, Relaxed) + 1;
        let cur_epoch = c.epoch.load(Relaxed);
        let cur = c.position.load(Relaxed);
        // Far behind the cursor, a slower worker reads positions still unread (and the other
        // files of a sample it just read), while the others read near the cursor; a reader
        // that restarted reads positions read before, and nothing is read near the cursor.
        let far = position.saturating_add(JUMP_BACK) < cur && cur != NO_POSITION;
        if !far && c.far_reads.load(Relaxed) != 0 {
            // Only when set: every read writing it would pass its cache line between cores.
            c.far_reads.store(0, Relaxed);
        }
        let restarted = || {
            far && (position < c.low.load(Relaxed) || c.was_read(position))
                && c.far_reads.fetch_add(1, Relaxed) + 1 >= RESTART_READS
        };
        let moved = if cur == NO_POSITION || cur_epoch != epoch || restarted() {
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
        } else if (position.saturating_add(ADVISE_AHEAD)
            >= c.advised_to.load(Relaxed).saturating_add(ADVISE_STEP)
            // Every ADVISE_STEP-th read, when it is behind the cursor: a slower worker left
            // reading alone asks for its own advice (see ADVISE_BEHIND).
            || (position < cur && reads % ADVISE_STEP == 0))
            && !c.advice_due.swap(true, Relaxed)
        {
            let mut q = self.inner.queue.lock().unwrap_or_else(|e| e.into_inner());
            q.advice += 1;
            self.inner.wake_planner.notify_one();
        }
    }

    /// At a cold start, holds a read about to fetch `shard` (its sample neither on disk nor
    /// in memory) until the first fetch has ended, at most [`FIRST_FETCHES_ALONE`], unless
    /// `shard` is one that fetch is for (the shard a rank's lowest waiting read needs). The
    /// first file then has the link and the CPUs to itself: a loader's workers start at
    /// positions a batch apart, each in another shard, and their reads would otherwise fetch
    /// those shards side by side and all get them late. Returns at once after the first fetch.
    pub fn hold_for_first_fetch(&self, shard: u32) {
        let q = self.inner.queue.lock().unwrap_or_else(|e| e.into_inner());
        if q.first_done {
            return;
        }
        let _ = self
            .inner
            .wake_fetchers
            .wait_timeout_while(q, FIRST_FETCHES_ALONE, |q| {
                !q.first_done && !q.stop && !q.urgent.contains(&shard)
            })
            .unwrap_or_else(|e| e.into_inner());
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
            && position.saturating_add(MAX_SPREAD) >= cur
    }

    /// Where local rank `rank`'s reader is: (epoch, highest position read), `None` before
    /// its first read.
    pub fn cursor(&self, rank: usize) -> Option<(u64, u64)> {
        let c = self.inner.cursors.get(rank)?;
        let position = c.position.load(Relaxed);
        (position != NO_POSITION).then(|| (c.epoch.load(Relaxed), position))
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
        self.inner.next_use.get(shard)
    }

    /// The next-use table this scheduler keeps (the one handed to it).
    pub fn next_use_table(&self) -> &Arc<NextUse> {
        &self.inner.next_use
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
    /// Waits until the first fetch has ended, at most [`FIRST_FETCHES_ALONE`] (see there).
    fn wait_for_the_first_fetch(&self) {
        let q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
        let (mut q, waited) = self
            .wake_fetchers
            .wait_timeout_while(q, FIRST_FETCHES_ALONE, |q| !q.first_done && !q.stop)
            .unwrap_or_else(|e| e.into_inner());
        if waited.timed_out() {
            q.first_done = true;
        }
    }

    fn plan_loop(&self) {
        loop {
            let (generation, asked, cold_start) = {
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
                (q.generation, q.advice, !q.first_done)
            };
            let Plan {
                next_use,
                wanted,
                later,
                urgent,
            } = self.plan(cold_start);
            self.next_use.replace(next_use);
            let mut q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
            let pending: VecDeque<u32> = wanted
                .into_iter()
                .filter(|s| !q.in_flight.contains(s))
                .collect();
            q.pending = pending;
            q.later_epoch = later;
            // Nothing to wait for: prefetches go at once.
            q.first_done |= urgent.is_empty();
            q.urgent = urgent;
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

    fn fetch_loop(&self) {
        loop {
            let (shard, for_later_epoch, urgent) = {
                let mut q = self.queue.lock().unwrap_or_else(|e| e.into_inner());
                loop {
                    if q.stop {
                        return;
                    }
                    if let Some(s) = q.pending.pop_front() {
                        if q.in_flight.insert(s) {
                            break (s, q.later_epoch.contains(&s), q.urgent.contains(&s));
                        }
                        continue;
                    }
                    q = self
                        .wake_fetchers
                        .wait(q)
                        .unwrap_or_else(|e| e.into_inner());
                }
            };
            if !urgent {
                self.wait_for_the_first_fetch();
            }
            if !self.shards.is_resident(shard) {
                self.prefetches.fetch_add(1, Relaxed);
                match self.shards.fetch(shard, urgent) {
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
            if !q.first_done {
                // The first fetch has ended: the prefetches held back may go, and the plan
                // is made again without the cold start's blocked positions.
                q.first_done = true;
                q.generation += 1;
                self.wake_fetchers.notify_all();
                self.wake_planner.notify_one();
            }
        }
    }
}

#[cfg(test)]
mod tests;
