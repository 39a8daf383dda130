//! The scheduler with a counting shard source.

use super::*;
use crate::order::OrderError;
use crate::plan::{OrderSource, MIN_KEEP_EPOCHS};
use std::sync::atomic::AtomicU64;
use std::sync::OnceLock;

struct Counting {
    per_shard: u64,
    resident: Mutex<HashSet<u32>>,
    fetches: Mutex<Vec<u32>>,
    advised: Mutex<Vec<u64>>,
    /// Advice taken at most (then `Full`), when set.
    room: Mutex<Option<usize>>,
    /// How long each fetch takes.
    fetch_delay: Mutex<Duration>,
    /// Calls of `shard_of` so far.
    lookups: AtomicU64,
}

impl Counting {
    /// Ten samples a shard, none on disk, nothing fetched or advised yet, room unlimited.
    fn empty() -> Arc<Counting> {
        Arc::new(Counting {
            per_shard: 10,
            resident: Mutex::new(HashSet::new()),
            fetches: Mutex::new(Vec::new()),
            advised: Mutex::new(Vec::new()),
            room: Mutex::new(None),
            fetch_delay: Mutex::new(Duration::ZERO),
            lookups: AtomicU64::new(0),
        })
    }
}

impl ShardSource for Counting {
    fn shard_of(&self, sample: u64) -> Option<u32> {
        self.lookups.fetch_add(1, Relaxed);
        Some((sample / self.per_shard) as u32)
    }
    fn shard_bytes(&self, _shard: u32) -> u64 {
        100
    }
    fn is_resident(&self, shard: u32) -> bool {
        self.resident.lock().unwrap().contains(&shard)
    }
    fn fetch(&self, shard: u32, _urgent: bool) -> Result<(), crate::cache::CacheError> {
        let delay = *self.fetch_delay.lock().unwrap();
        std::thread::sleep(delay);
        self.fetches.lock().unwrap().push(shard);
        self.resident.lock().unwrap().insert(shard);
        Ok(())
    }
    fn advise(&self, sample: u64) -> Advice {
        if !self.is_resident((sample / self.per_shard) as u32) {
            return Advice::Skipped;
        }
        let mut advised = self.advised.lock().unwrap();
        if self
            .room
            .lock()
            .unwrap()
            .is_some_and(|n| advised.len() >= n)
        {
            return Advice::Full;
        }
        advised.push(sample);
        Advice::Started
    }
}

struct Fixed(Vec<Vec<u64>>, Arc<AtomicU64>);

impl OrderSource for Fixed {
    fn node_orders(&self, _epoch: u64) -> Result<Vec<Vec<u64>>, OrderError> {
        self.1.fetch_add(1, Relaxed);
        Ok(self.0.clone())
    }
}

/// Plans once more at the cursors as they are, then waits for the planner and its fetches:
/// the planner runs beside the test's reads, so without it the last plan may have been made a
/// few positions back (within a replan step) and what was fetched would depend on timing.
fn settle(ra: &Readahead) {
    ra.replan_now();
    assert!(ra.wait_idle(Duration::from_secs(5)));
}

fn setup(orders: Vec<Vec<u64>>, budget: u64) -> (Readahead, Arc<Counting>) {
    let (ra, src, _) = setup_counting(orders, budget, Vec::new());
    (ra, src)
}

/// One rank reading samples 0..100 (shards 0..10) in order under `budget`, its first read
/// made and its first fetches settled.
fn reading_from_the_start(budget: u64) -> (Readahead, Arc<Counting>) {
    let (ra, src) = setup(vec![(0..100).collect()], budget);
    ra.on_read(0, 0, 0);
    settle(&ra);
    (ra, src)
}

/// One rank reading 600 positions per epoch (samples in reverse, so a position is not its
/// sample), every shard on disk, `room` for samples read ahead: its first read made and
/// settled. Also returns the order.
fn advising_from_the_start(room: Option<usize>) -> (Readahead, Arc<Counting>, Vec<u64>) {
    let order: Vec<u64> = (0..600).rev().collect();
    let (ra, src) = setup(vec![order.clone()], 1 << 40);
    src.resident.lock().unwrap().extend(0..60);
    *src.room.lock().unwrap() = room;
    ra.on_read(0, 0, 0);
    settle(&ra);
    (ra, src, order)
}

/// Also returns how many times the node's orders were computed.
fn setup_counting(
    orders: Vec<Vec<u64>>,
    budget: u64,
    stream_starts: Vec<u32>,
) -> (Readahead, Arc<Counting>, Arc<AtomicU64>) {
    let computed = Arc::new(AtomicU64::new(0));
    let ranks = orders.len();
    let (ra, src) = setup_source(
        Box::new(Fixed(orders, computed.clone())),
        ranks,
        budget,
        stream_starts,
    );
    (ra, src, computed)
}

/// `ranks` ranks reading the orders of `orders` under `budget`, nothing read yet.
fn setup_source(
    orders: Box<dyn OrderSource>,
    ranks: usize,
    budget: u64,
    stream_starts: Vec<u32>,
) -> (Readahead, Arc<Counting>) {
    let src = Counting::empty();
    let ra = Readahead::new(
        // Two epochs asked for: the order cache keeps at least three.
        Arc::new(OrderCache::new(orders, 2)),
        Arc::new(NextUse::new()),
        src.clone(),
        ranks,
        ReadaheadOptions {
            budget_bytes: budget,
            max_fetches: 2,
            max_lookahead: 1 << 20,
            stream_starts,
            last_epoch: None,
        },
    );
    (ra, src)
}

#[test]
fn at_a_cold_start_a_read_of_another_shard_waits_for_the_first_fetch() {
    let (ra, src) = setup(vec![(0..100).collect()], 300);
    *src.fetch_delay.lock().unwrap() = Duration::from_secs(1);
    let t0 = Instant::now();
    ra.on_read(0, 0, 0);
    // The shard the reader at position 0 waits for goes once the plan names it.
    ra.hold_for_first_fetch(0);
    assert!(t0.elapsed() < Duration::from_millis(800));
    assert!(!src.is_resident(0));
    // Another shard's read waits until that fetch has ended, not for the time limit.
    ra.hold_for_first_fetch(5);
    assert!(src.is_resident(0));
    assert!(t0.elapsed() < FIRST_FETCHES_ALONE);
    // After the first fetch nothing waits.
    let t1 = Instant::now();
    ra.hold_for_first_fetch(7);
    assert!(t1.elapsed() < Duration::from_millis(500));
}

#[test]
fn at_a_cold_start_the_shard_a_reader_is_blocked_on_comes_first() {
    // Position p holds sample 99 - p: positions 0..10 in shard 9, 10..20 in shard 8, 35 in 6.
    let (ra, src) = setup(vec![(0..100).rev().collect()], 1 << 20);
    *src.fetch_delay.lock().unwrap() = Duration::from_secs(5);
    for p in (0..10).chain([35]) {
        ra.on_read(0, 0, p);
    }
    // Readers wait at positions 0..10 and 35 (none of their shards is on disk): the first of
    // them, not the next unread position (10, shard 8), is what comes first at a cold start.
    assert_eq!(ra.inner.plan(true).urgent, HashSet::from([9]));
    // After the start, the next unread position's shard.
    assert_eq!(ra.inner.plan(false).urgent, HashSet::from([8]));
}

#[test]
fn fetches_the_shards_ahead_of_the_reader_in_order_within_budget() {
    // one rank reading samples 0..100 (shards 0..10), budget = 3 shards.
    let (ra, src) = reading_from_the_start(300);
    let mut f = src.fetches.lock().unwrap().clone();
    f.sort();
    assert_eq!(f, vec![0, 1, 2]);
    // Position 0 is read: 19 positions still to read come before position 20.
    assert_eq!(ra.next_use(2), 19);
    // Past the window (shards 0..3), shards 3..9 are ranked for eviction, not fetched.
    assert_eq!(ra.next_use(7), 69);
    assert_eq!(ra.next_use(9), u64::MAX);
    assert_eq!(ra.status().window_shards, 3);
    for p in 1..=55 {
        ra.on_read(0, 0, p);
    }
    settle(&ra);
    let f = src.fetches.lock().unwrap().clone();
    assert!(f.contains(&7) && !f.contains(&8), "{f:?}");
}

#[test]
fn a_slower_worker_keeps_the_shards_it_has_still_to_read() {
    // Two workers of one rank over samples 0..1000 (shards 0..100): one read 0..10 and
    // stopped, the other ran ahead to 600. Positions 10..20 are still to be read by the
    // slow one, so its shard 1 is needed first, then the fast one's 60 and 61 (3 shards).
    let (ra, src) = setup(vec![(0..1000).collect()], 300);
    for p in (0..10).chain(20..=600) {
        ra.on_read(0, 0, p);
    }
    // Earlier plans (a few positions back) may also have fetched 59, never beyond 61.
    settle(&ra);
    assert_eq!(ra.next_use(1), 0, "the slow worker reads shard 1 next");
    assert_eq!(ra.status().ranks[0].lowest_unread, Some(10));
    let f = src.fetches.lock().unwrap().clone();
    assert!(
        f.contains(&1) && f.contains(&60) && f.contains(&61),
        "{f:?}"
    );
    assert!(!f.contains(&62), "nothing beyond the budget: {f:?}");
    assert_eq!(ra.next_use(3), u64::MAX, "shard 3 (30..40) was read");
    // The slow worker catches up: the window moves to the cursor.
    for p in 10..20 {
        ra.on_read(0, 0, p);
    }
    ra.on_read(0, 0, 601);
    for p in 602..640 {
        ra.on_read(0, 0, p);
    }
    settle(&ra);
    let f = src.fetches.lock().unwrap().clone();
    assert!(f.contains(&64) && f.contains(&65), "{f:?}");
    assert_eq!(ra.next_use(1), u64::MAX);
}

#[test]
fn positions_opened_behind_the_cursor_count_as_read_but_opened_ahead_do_not() {
    // Positions 10..20 were opened but served by the page cache (no read came); the reader
    // went on to 600. They are consumed: shard 1 is not planned. Positions 700..800 were
    // opened ahead of the cursor (a `stat` of the folder) and are still to be read, and a
    // lookup in another epoch is ignored.
    let (ra, src) = setup(vec![(0..1000).collect()], 300);
    ra.on_lookup(0, 0, 5); // before any read: nothing to record against
    for p in 0..10 {
        ra.on_read(0, 0, p);
    }
    // The plan at cursor 9 fetches shard 1 (positions 10..20, next): settle it and start
    // over with nothing on disk, so only later plans show below (no race with the planner).
    settle(&ra);
    src.fetches.lock().unwrap().clear();
    src.resident.lock().unwrap().clear();
    for p in 10..20 {
        ra.on_lookup(0, 0, p);
    }
    for p in 700..800 {
        ra.on_lookup(0, 0, p);
        ra.on_lookup(0, 1, p - 690);
    }
    for p in 20..=600 {
        ra.on_read(0, 0, p);
    }
    settle(&ra);
    assert_eq!(
        ra.next_use(1),
        u64::MAX,
        "opened behind the cursor: consumed"
    );
    assert_eq!(
        ra.status().ranks[0].lowest_unread,
        Some(600),
        "all up to the cursor"
    );
    let f = src.fetches.lock().unwrap().clone();
    assert!(!f.contains(&1), "{f:?}");
    assert!(
        f.contains(&60) && f.contains(&61) && f.contains(&62),
        "{f:?}"
    );
    // The reader reaches the positions opened ahead: they are planned like any other.
    for p in 601..=690 {
        ra.on_read(0, 0, p);
    }
    settle(&ra);
    assert_eq!(ra.next_use(70), 9, "positions 691..700 come first");
}

#[test]
fn positions_skipped_far_behind_the_cursor_are_not_waited_for() {
    // A reader that skipped position 1 and read on to MAX_SPREAD + 100: position 1 is
    // further back than any worker lags, so shard 0 is no longer planned.
    let n = MAX_SPREAD + 1000;
    let (ra, _src) = setup(vec![(0..n).collect()], 300);
    ra.on_read(0, 0, 0);
    for p in 2..MAX_SPREAD + 100 {
        ra.on_read(0, 0, p);
    }
    settle(&ra);
    assert_eq!(ra.next_use(0), u64::MAX);
}

#[test]
fn two_ranks_sharing_shards_fetch_each_once() {
    let a: Vec<u64> = (0..100).collect();
    let b: Vec<u64> = (0..100).rev().collect();
    let (ra, src) = setup(vec![a, b], 10_000);
    ra.on_read(0, 0, 0);
    ra.on_read(1, 0, 0);
    settle(&ra);
    let mut f = src.fetches.lock().unwrap().clone();
    f.sort();
    assert_eq!(f, (0..10).collect::<Vec<u32>>());
    assert_eq!(ra.next_use(9), 0, "rank 1 reads shard 9 first");
    assert_eq!(ra.next_use(0), 0);
}

#[test]
fn out_of_order_reads_do_not_move_the_cursor_back_but_far_jumps_do() {
    let (ra, _src) = setup(vec![(0..10_000).collect()], 100);
    for p in 0..100 {
        ra.on_read(0, 0, p);
    }
    ra.on_read(0, 0, 5000);
    ra.on_read(0, 0, 4990);
    let s = ra.status();
    assert_eq!(s.ranks[0].cursor, Some(5000));
    // Positions 10.. again, far behind, and nothing near the cursor: the reader started over
    // there (after RESTART_READS such reads; one read near the cursor counts them again).
    let again = 10..10 + RESTART_READS;
    for p in again.clone().take(RESTART_READS as usize - 1) {
        ra.on_read(0, 0, p);
    }
    assert_eq!(ra.status().ranks[0].cursor, Some(5000));
    ra.on_read(0, 0, 4995);
    for p in again.clone() {
        ra.on_read(0, 0, p);
    }
    assert_eq!(ra.status().ranks[0].cursor, Some(again.end - 1));
    ra.on_read(0, 1, 3);
    assert_eq!(ra.status().ranks[0].epoch, 1);
    ra.record_stall(Duration::from_millis(3));
    assert_eq!(ra.status().stalls, 1);
}

#[test]
fn eviction_drops_the_shard_needed_furthest_away_never_a_pinned_one() {
    use crate::cache::{Candidate, EvictionContext, EvictionPolicy};
    // Reader at position 0 of samples 0..100 (shards 0..10); budget covers 4 shards.
    let (ra, _src) = reading_from_the_start(400);
    let ra = Arc::new(ra);
    let policy = FurthestNextUse::new(Arc::new(NextUse::new()), 0);
    let cand = |shard: usize, last_use: u64| Candidate {
        shard,
        bytes: 100,
        last_use,
    };
    let candidates = [cand(0, 5), cand(2, 1), cand(3, 9), cand(8, 7), cand(9, 2)];
    let ctx = |pinned: &'static [usize]| EvictionContext {
        candidates: &candidates,
        pinned,
        incoming: 4,
        need: 100,
        usage: 500,
        limit: 500,
        prefetch: false,
    };
    // Before any plan: least recently used among the unplanned.
    assert_eq!(policy.choose_victim(&ctx(&[])), Some(2));
    let policy = FurthestNextUse::new(ra.next_use_table().clone(), 0);
    // 8 and 9 are not planned (no next use): the older of them goes first.
    assert_eq!(policy.choose_victim(&ctx(&[])), Some(9));
    assert_eq!(
        policy.choose_victim(&ctx(&[9, 8])),
        Some(3),
        "pinned shards are never chosen"
    );
    assert_eq!(policy.choose_victim(&ctx(&[9, 8, 3])), Some(2));
}

#[test]
fn a_prefetch_never_evicts_a_shard_needed_no_later_than_itself() {
    use crate::cache::{Candidate, EvictionContext, EvictionPolicy};
    // Reader at position 0 of samples 0..100 (shards 0..10); the window covers 4 shards.
    let (ra, _src) = reading_from_the_start(400);
    let ra = Arc::new(ra);
    let policy = FurthestNextUse::new(ra.next_use_table().clone(), 0);
    let cand = |shard: usize| Candidate {
        shard,
        bytes: 100,
        last_use: 1,
    };
    let ctx = |candidates: &'static [Candidate], incoming: usize, prefetch: bool| EvictionContext {
        candidates,
        pinned: &[],
        incoming,
        need: 100,
        usage: 300,
        limit: 300,
        prefetch,
    };
    static NEAR: OnceLock<[Candidate; 2]> = OnceLock::new();
    let near: &'static [Candidate] = NEAR.get_or_init(|| [cand(0), cand(1)]);
    // Shards 0 and 1 are needed before shard 3: a prefetch of 3 is refused ...
    assert_eq!(policy.choose_victim(&ctx(near, 3, true)), None);
    // ... a reader waiting for it evicts the furthest of them ...
    assert_eq!(policy.choose_victim(&ctx(near, 3, false)), Some(1));
    // ... and a prefetch of shard 1 may evict shard 2 (needed later) but not shard 0.
    static MID: OnceLock<[Candidate; 2]> = OnceLock::new();
    let mid: &'static [Candidate] = MID.get_or_init(|| [cand(0), cand(2)]);
    assert_eq!(policy.choose_victim(&ctx(mid, 1, true)), Some(2));
    static FIRST: OnceLock<[Candidate; 1]> = OnceLock::new();
    let first: &'static [Candidate] = FIRST.get_or_init(|| [cand(0)]);
    assert_eq!(policy.choose_victim(&ctx(first, 1, true)), None);
    // Past the window, shards are still ranked: a prefetch may evict shard 8 for shard 7,
    // not for shard 9 (needed after it) ...
    static BEYOND: OnceLock<[Candidate; 2]> = OnceLock::new();
    let beyond: &'static [Candidate] = BEYOND.get_or_init(|| [cand(0), cand(8)]);
    assert_eq!(policy.choose_victim(&ctx(beyond, 7, true)), Some(8));
    assert_eq!(policy.choose_victim(&ctx(beyond, 9, true)), None);
    // ... and a shard no rank reads may always go, even for a prefetch the plan has dropped.
    static UNREAD: OnceLock<[Candidate; 2]> = OnceLock::new();
    let unread: &'static [Candidate] = UNREAD.get_or_init(|| [cand(0), cand(12)]);
    assert_eq!(policy.choose_victim(&ctx(unread, 9, true)), Some(12));
}

#[test]
fn ranks_in_different_epochs_compute_each_epoch_once() {
    // Rank 0 in epoch 1 and rank 1 in epoch 0, read alternately (as their lookups are):
    // epochs 0, 1 and 2 are needed, each computed once, even with keep_epochs 2 asked for.
    // Orders are short and the budget large, so each walk runs into the next epoch.
    let (ra, _src, computed) = setup_counting(
        vec![(0..20).collect(), (0..20).collect()],
        100_000,
        Vec::new(),
    );
    for p in 0..50u64 {
        ra.on_read(0, 1, p);
        ra.order(1, 0).unwrap();
        settle(&ra);
        ra.on_read(1, 0, p);
        ra.order(0, 1).unwrap();
        settle(&ra);
    }
    let n = computed.load(Relaxed);
    assert!(n <= 3, "orders computed {n} times");
}

#[test]
fn the_window_of_many_ranks_never_exceeds_the_budget() {
    // 8 ranks, each reading its own 4 shards; shards are 100 bytes, the budget 250 bytes, so
    // each rank's share (31 bytes) is below one shard.
    let orders: Vec<Vec<u64>> = (0..8u64).map(|r| (r * 40..r * 40 + 40).collect()).collect();
    let (ra, src) = setup(orders, 250);
    for r in 0..8 {
        ra.on_read(r, 0, 0);
    }
    settle(&ra);
    let f = src.fetches.lock().unwrap().clone();
    assert!(!f.is_empty(), "nothing fetched");
    assert!(f.len() as u64 * 100 <= 250, "fetched {f:?}");
    let planned = ra.status().window_shards;
    assert!(planned * 100 <= 250, "planned {planned} shards");
}

#[test]
fn each_stream_gets_its_share_of_the_budget() {
    // Two streams: shards 0..5 (samples 0..50) and 5..10 (samples 50..100). One rank reads
    // stream 0's samples first, then stream 1's; the budget covers 4 shards, 2 per stream.
    let (ra, src, _) = setup_counting(vec![(0..100).collect()], 400, vec![5]);
    ra.on_read(0, 0, 0);
    settle(&ra);
    let mut f = src.fetches.lock().unwrap().clone();
    f.sort();
    assert_eq!(f, vec![0, 1, 5, 6]);
}

#[test]
fn the_walk_stops_at_the_last_epoch_the_job_reads() {
    // Samples 0..100 (shards 0..10) each epoch; the reader is in the last shard of epoch 0
    // and the window (3 shards) would reach shards 0 and 1 of epoch 1.
    for (last_epoch, want) in [(None, vec![0, 1, 9]), (Some(0), vec![9])] {
        let computed = Arc::new(AtomicU64::new(0));
        let src = Counting::empty();
        let ra = Readahead::new(
            Arc::new(OrderCache::new(
                Box::new(Fixed(vec![(0..100).collect()], computed)),
                MIN_KEEP_EPOCHS,
            )),
            Arc::new(NextUse::new()),
            src.clone(),
            1,
            ReadaheadOptions {
                budget_bytes: 300,
                max_fetches: 2,
                last_epoch,
                ..Default::default()
            },
        );
        for p in 90..=95 {
            ra.on_read(0, 0, p);
        }
        settle(&ra);
        let mut f = src.fetches.lock().unwrap().clone();
        f.sort();
        f.dedup();
        assert_eq!(f, want, "last epoch {last_epoch:?}");
    }
}

#[test]
fn samples_ahead_of_the_reader_are_advised_once_each_into_the_next_epoch() {
    // One rank, 600 positions per epoch (samples in reverse, so a position is not its
    // sample), every shard on disk: the next ADVISE_AHEAD positions are advised, each once,
    // topped up as the reader goes, and the advice runs on into the next epoch's first ones.
    let (ra, src, order) = advising_from_the_start(None);
    let advised = src.advised.lock().unwrap().clone();
    let ahead = ADVISE_AHEAD as usize;
    assert_eq!(
        advised,
        order[1..=ahead].to_vec(),
        "the positions after the cursor"
    );
    for p in 1..=500 {
        ra.on_read(0, 0, p);
        // A reader slower than the planner (one that outruns it skips positions passed).
        if p % 16 == 0 {
            settle(&ra);
        }
    }
    settle(&ra);
    let advised = src.advised.lock().unwrap().clone();
    // Each position once: 1..600 of epoch 0, then the next epoch's first ones (the same
    // order here), at most ADVISE_AHEAD past the cursor at 500.
    assert_eq!(advised.get(..599), Some(&order[1..600]));
    let next = advised.get(599..).unwrap_or_default();
    assert!(
        !next.is_empty() && next.len() <= ahead - 99,
        "{}",
        next.len()
    );
    assert_eq!(next, &order[..next.len()]);
    // The reader restarts elsewhere (epoch 2): the advice follows it there.
    ra.on_read(0, 2, 0);
    settle(&ra);
    let after = src.advised.lock().unwrap().clone();
    assert_eq!(after.get(advised.len()..), Some(&order[1..=ahead]));
}

#[test]
fn advice_that_finds_no_room_stops_there_and_goes_on_from_there_later() {
    // Room for 50 samples read ahead: the advice stops at position 50, skips nothing, and
    // picks up at 51 once there is room again and the reader has moved on.
    let (ra, src, order) = advising_from_the_start(Some(50));
    assert_eq!(src.advised.lock().unwrap().clone(), order[1..=50].to_vec());
    // Room again; the reader moves on a step.
    *src.room.lock().unwrap() = Some(100);
    for p in 1..=ADVISE_STEP {
        ra.on_read(0, 0, p);
    }
    settle(&ra);
    let advised = src.advised.lock().unwrap().clone();
    assert_eq!(advised, order[1..=100].to_vec(), "on from position 51");
}

/// Two ranks (samples 0..600 and 1000..1600, all on disk) and room for 50 samples read ahead.
fn two_ranks_with_room_for_50() -> (Readahead, Arc<Counting>) {
    let orders: Vec<Vec<u64>> = vec![(0..600).collect(), (1000..1600).collect()];
    let (ra, src) = setup(orders, 1 << 40);
    src.resident.lock().unwrap().extend(0..160);
    *src.room.lock().unwrap() = Some(50);
    (ra, src)
}

#[test]
fn when_advice_runs_out_of_room_the_next_pass_starts_with_another_rank() {
    // Two ranks, room for 50 samples read ahead: the first pass fills it for one rank; once
    // there is room again, the other rank is advised first.
    let (ra, src) = two_ranks_with_room_for_50();
    ra.on_read(0, 0, 0);
    ra.on_read(1, 0, 0);
    settle(&ra);
    let of_rank =
        |advised: &[u64], r: u64| advised.iter().filter(|&&s| (s >= 1000) == (r == 1)).count();
    let first = src.advised.lock().unwrap().clone();
    assert_eq!(first.len(), 50);
    *src.room.lock().unwrap() = Some(100);
    for p in 1..=ADVISE_STEP {
        ra.on_read(0, 0, p);
        ra.on_read(1, 0, p);
    }
    settle(&ra);
    let after = src.advised.lock().unwrap().clone();
    assert_eq!(after.len(), 100);
    for r in 0..2 {
        assert!(of_rank(&after, r) > 0, "rank {r} got no advice: {after:?}");
    }
}

#[test]
fn a_rank_that_arrives_after_another_filled_the_room_is_advised_first_next_time() {
    // The same, with rank 1 reading only after rank 0's advice filled the room (the order in
    // which the previous test's two first reads may also reach the planner).
    let (ra, src) = two_ranks_with_room_for_50();
    ra.on_read(0, 0, 0);
    settle(&ra);
    ra.on_read(1, 0, 0);
    settle(&ra);
    let first = src.advised.lock().unwrap().clone();
    assert_eq!(first, (1..=50).collect::<Vec<u64>>());
    *src.room.lock().unwrap() = Some(100);
    for p in 1..=ADVISE_STEP {
        ra.on_read(0, 0, p);
        ra.on_read(1, 0, p);
    }
    settle(&ra);
    let after = src.advised.lock().unwrap().clone();
    // The 50 new places all go to rank 1, from wherever its cursor was when advised.
    let new = &after[50..];
    assert_eq!(new.len(), 50);
    assert!(new[0] > 1000, "{after:?}");
    assert!(new.windows(2).all(|w| w[1] == w[0] + 1), "{after:?}");
}

#[test]
fn samples_of_shards_not_on_disk_are_not_advised() {
    let (ra, src) = reading_from_the_start(0);
    assert!(src.advised.lock().unwrap().is_empty());
    assert_eq!(ra.status().samples_advised, 0);
}

#[test]
fn prefetches_for_the_next_epoch_are_counted_apart() {
    // One rank, samples 0..100 (shards 0..10) every epoch, budget = 3 shards. Near the end
    // of epoch 0 the window runs into epoch 1, whose first shard was evicted meanwhile.
    let (ra, src) = reading_from_the_start(300);
    for p in 1..=85 {
        ra.on_read(0, 0, p);
    }
    settle(&ra);
    // Shard 0 is still cached from the start of epoch 0: nothing fetched for epoch 1.
    assert_eq!(ra.status().prefetches_for_next_epoch, 0);
    src.resident.lock().unwrap().retain(|&s| s >= 8);
    settle(&ra);
    let st = ra.status();
    assert_eq!(st.prefetches_for_next_epoch, 1, "{st:?}");
    assert_eq!(st.prefetched_bytes_for_next_epoch, 100, "{st:?}");
    let f = src.fetches.lock().unwrap().clone();
    assert_eq!(f.iter().filter(|&&s| s == 0).count(), 2, "{f:?}");
}

mod slow_workers;
mod walk_cost;
