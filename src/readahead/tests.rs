//! The scheduler with a counting shard source.

use super::*;
use std::sync::atomic::AtomicU64;
use std::sync::OnceLock;

struct Counting {
    per_shard: u64,
    resident: Mutex<HashSet<u32>>,
    fetches: Mutex<Vec<u32>>,
}

impl ShardSource for Counting {
    fn shard_of(&self, sample: u64) -> Option<u32> {
        Some((sample / self.per_shard) as u32)
    }
    fn shard_bytes(&self, _shard: u32) -> u64 {
        100
    }
    fn is_resident(&self, shard: u32) -> bool {
        self.resident.lock().unwrap().contains(&shard)
    }
    fn fetch(&self, shard: u32) -> Result<(), String> {
        self.fetches.lock().unwrap().push(shard);
        self.resident.lock().unwrap().insert(shard);
        Ok(())
    }
}

struct Fixed(Vec<Vec<u64>>, Arc<AtomicU64>);

impl OrderSource for Fixed {
    fn node_orders(&self, _epoch: u64) -> Result<Vec<Vec<u64>>, String> {
        self.1.fetch_add(1, Relaxed);
        Ok(self.0.clone())
    }
}

fn setup(orders: Vec<Vec<u64>>, budget: u64) -> (Readahead, Arc<Counting>) {
    let (ra, src, _) = setup_counting(orders, budget, Vec::new());
    (ra, src)
}

/// Also returns how many times the node's orders were computed.
fn setup_counting(
    orders: Vec<Vec<u64>>,
    budget: u64,
    stream_starts: Vec<u32>,
) -> (Readahead, Arc<Counting>, Arc<AtomicU64>) {
    let computed = Arc::new(AtomicU64::new(0));
    let src = Arc::new(Counting {
        per_shard: 10,
        resident: Mutex::new(HashSet::new()),
        fetches: Mutex::new(Vec::new()),
    });
    let ranks = orders.len();
    let ra = Readahead::new(
        Box::new(Fixed(orders, computed.clone())),
        src.clone(),
        ranks,
        ReadaheadOptions {
            budget_bytes: budget,
            max_fetches: 2,
            max_lookahead: 1 << 20,
            stream_starts,
            keep_epochs: 2,
        },
    );
    (ra, src, computed)
}

#[test]
fn fetches_the_shards_ahead_of_the_reader_in_order_within_budget() {
    // one rank reading samples 0..100 (shards 0..10), budget = 3 shards.
    let (ra, src) = setup(vec![(0..100).collect()], 300);
    ra.on_read(0, 0, 0);
    assert!(ra.wait_idle(Duration::from_secs(5)));
    let mut f = src.fetches.lock().unwrap().clone();
    f.sort();
    assert_eq!(f, vec![0, 1, 2]);
    assert_eq!(ra.next_use(2), 20);
    assert_eq!(ra.next_use(7), u64::MAX);
    ra.on_read(0, 0, 55);
    assert!(ra.wait_idle(Duration::from_secs(5)));
    let f = src.fetches.lock().unwrap().clone();
    assert!(f.contains(&7) && !f.contains(&8), "{f:?}");
}

#[test]
fn two_ranks_sharing_shards_fetch_each_once() {
    let a: Vec<u64> = (0..100).collect();
    let b: Vec<u64> = (0..100).rev().collect();
    let (ra, src) = setup(vec![a, b], 10_000);
    ra.on_read(0, 0, 0);
    ra.on_read(1, 0, 0);
    assert!(ra.wait_idle(Duration::from_secs(5)));
    let mut f = src.fetches.lock().unwrap().clone();
    f.sort();
    assert_eq!(f, (0..10).collect::<Vec<u32>>());
    assert_eq!(ra.next_use(9), 0, "rank 1 reads shard 9 first");
    assert_eq!(ra.next_use(0), 0);
}

#[test]
fn out_of_order_reads_do_not_move_the_cursor_back_but_far_jumps_do() {
    let (ra, _src) = setup(vec![(0..10_000).collect()], 100);
    ra.on_read(0, 0, 5000);
    ra.on_read(0, 0, 4990);
    let s = ra.status();
    assert_eq!(s["ranks"][0]["cursor"], 5000);
    ra.on_read(0, 0, 10);
    assert_eq!(ra.status()["ranks"][0]["cursor"], 10);
    ra.on_read(0, 1, 3);
    assert_eq!(ra.status()["ranks"][0]["epoch"], 1);
    ra.record_stall(Duration::from_millis(3));
    assert_eq!(ra.status()["stalls"], 1);
}

#[test]
fn eviction_drops_the_shard_needed_furthest_away_never_a_pinned_one() {
    use crate::cache::{Candidate, EvictionContext, EvictionPolicy};
    // Reader at position 0 of samples 0..100 (shards 0..10); budget covers 4 shards.
    let (ra, _src) = setup(vec![(0..100).collect()], 400);
    ra.on_read(0, 0, 0);
    assert!(ra.wait_idle(Duration::from_secs(5)));
    let ra = Arc::new(ra);
    let slot = Arc::new(OnceLock::new());
    let policy = FurthestNextUse::new(slot.clone(), 0);
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
    };
    // Before the readahead is known: least recently used among the unplanned.
    assert_eq!(policy.choose_victim(&ctx(&[])), Some(2));
    let _ = slot.set(Arc::downgrade(&ra));
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
        assert!(ra.wait_idle(Duration::from_secs(5)));
        ra.on_read(1, 0, p);
        ra.order(0, 1).unwrap();
        assert!(ra.wait_idle(Duration::from_secs(5)));
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
    assert!(ra.wait_idle(Duration::from_secs(5)));
    let f = src.fetches.lock().unwrap().clone();
    assert!(!f.is_empty(), "nothing fetched");
    assert!(f.len() as u64 * 100 <= 250, "fetched {f:?}");
    let planned = (0..32u32).filter(|&s| ra.next_use(s) != u64::MAX).count() as u64;
    assert!(planned * 100 <= 250, "planned {planned} shards");
}

#[test]
fn each_stream_gets_its_share_of_the_budget() {
    // Two streams: shards 0..5 (samples 0..50) and 5..10 (samples 50..100). One rank reads
    // stream 0's samples first, then stream 1's; the budget covers 4 shards, 2 per stream.
    let (ra, src, _) = setup_counting(vec![(0..100).collect()], 400, vec![5]);
    ra.on_read(0, 0, 0);
    assert!(ra.wait_idle(Duration::from_secs(5)));
    let mut f = src.fetches.lock().unwrap().clone();
    f.sort();
    assert_eq!(f, vec![0, 1, 5, 6]);
}
