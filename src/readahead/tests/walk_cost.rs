//! The planner's own cost: a walk that stops once it has met every shard left in an epoch
//! (and plans exactly what a whole walk plans), and a slower worker far behind that does not
//! move the cursor back and forth (each move was a plan).

use super::*;

/// Even epochs read the first orders, odd ones the second.
struct Alternating([Vec<Vec<u64>>; 2]);

impl OrderSource for Alternating {
    fn node_orders(&self, epoch: u64) -> Result<Vec<Vec<u64>>, OrderError> {
        Ok(self.0[(epoch % 2) as usize].clone())
    }
}

/// `n` samples drawn from `0..samples` by a fixed generator (a shuffled-looking order).
fn scrambled(seed: u64, n: usize, samples: u64) -> Vec<u64> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % samples
        })
        .collect()
}

/// Each rank's replan step, as the last plan left it.
fn replan_steps(ra: &Readahead) -> Vec<u64> {
    ra.inner
        .cursors
        .iter()
        .map(|c| c.replan_step.load(Relaxed))
        .collect()
}

#[test]
fn a_walk_that_stops_once_it_has_met_every_shard_left_plans_the_same() {
    // Two ranks, 3,000 positions an epoch over 40 shards: every shard is met within the first
    // few hundred positions of a walk.
    let same = vec![scrambled(1, 3000, 400), scrambled(2, 3000, 400)];
    // Epochs that read other shards: even ones shards 0..8, odd ones shards 8..40. A walk
    // whose window has ended counts the shards it meets again in epoch 0 against its limit
    // past the window, and one whose stream's share is full may end its window on a shard it
    // meets again: either decides what it plans in epoch 1 (the early stop waits for neither;
    // each of the last cases below fails without that).
    let apart = [
        vec![scrambled(3, 3000, 80), scrambled(4, 3000, 80)],
        vec![
            scrambled(5, 3000, 320)
                .into_iter()
                .map(|s| s + 80)
                .collect(),
            scrambled(6, 3000, 320)
                .into_iter()
                .map(|s| s + 80)
                .collect(),
        ],
    ];
    // Windows that end early, late and never; with two streams, shares that fill.
    let cases = [
        (500, vec![], false),
        (1_500, vec![], false),
        (2_000, vec![], false),
        (1 << 30, vec![], false),
        (3_000, vec![0, 20], false),
        (1 << 30, vec![0, 20], false),
        (1_000, vec![], true),
        (1_200, vec![0, 4], true),
        (1_300, vec![0, 4, 8], true),
        (1 << 30, vec![], true),
    ];
    for (budget, starts, epochs_apart) in cases {
        let orders: Box<dyn OrderSource> = if epochs_apart {
            Box::new(Alternating(apart.clone()))
        } else {
            Box::new(Fixed(same.clone(), Arc::new(AtomicU64::new(0))))
        };
        let (ra, src) = setup_source(orders, 2, budget, starts.clone());
        src.resident.lock().unwrap().extend([3, 17, 22]);
        let mut read_to = [0u64; 2];
        // (rank, read up to, skipping the positions between): a skip leaves unread positions
        // behind the cursor, which the walk must still cover.
        for (r, to, skip) in [
            (0, 0, false),
            (1, 0, false),
            (0, 700, false),
            (1, 40, false),
            (0, 2_990, false),
            (1, 2_000, true),
        ] {
            let from = if skip { to } else { read_to[r] };
            for p in from..=to {
                ra.on_read(r, 0, p);
            }
            read_to[r] = to;
            settle(&ra);
            for cold_start in [false, true] {
                let before = src.lookups.load(Relaxed);
                let stopped = ra.inner.plan(cold_start);
                let looked_up = src.lookups.load(Relaxed) - before;
                let steps = replan_steps(&ra);
                ra.inner.reach.set_stop_early(false);
                let full = ra.inner.plan(cold_start);
                ra.inner.reach.set_stop_early(true);
                let at = format!(
                    "budget {budget}, streams from {starts:?}, epochs apart {epochs_apart}, \
                     rank {r} read to {to}, cold start {cold_start}"
                );
                assert_eq!(stopped.next_use, full.next_use, "{at}");
                assert_eq!(stopped.wanted, full.wanted, "{at}");
                assert_eq!(stopped.later, full.later, "{at}");
                assert_eq!(stopped.urgent, full.urgent, "{at}");
                let full_steps = replan_steps(&ra);
                assert_eq!(steps, full_steps, "replan steps, {at}");
                // Whole walks within the budget look up 6,000-12,000 positions (two ranks, to
                // the end of the next epoch). Stopped ones: each rank's positions read just
                // behind its cursor, then until every shard left in an epoch is met (~200
                // positions of 40 shards).
                if !skip && budget == 1 << 30 {
                    assert!(looked_up < 2_500, "{looked_up} look-ups, {at}");
                }
            }
        }
    }
}

#[test]
fn a_worker_far_behind_reading_unread_positions_does_not_move_the_cursor() {
    // Workers that drift apart: one at 6,000, another still reading positions 1,000 on (more
    // than JUMP_BACK behind, within MAX_SPREAD), which nobody has read.
    let (ra, src) = setup(vec![(0..20_000).collect()], 1 << 30);
    for p in 0..1_000 {
        ra.on_read(0, 0, p);
    }
    ra.on_read(0, 0, 6_000);
    settle(&ra);
    let plans = ra.inner.plans.load(Relaxed);
    for p in 1_000..1_100 {
        ra.on_read(0, 0, p);
        ra.on_read(0, 0, 6_000 + p - 999);
    }
    settle(&ra);
    assert_eq!(ra.status().ranks[0].cursor, Some(6_100));
    // One plan for the move forward past the replan step and the one `settle` asks for; the
    // slow worker's reads made none (each was a restart, and a plan, before).
    assert!(ra.inner.plans.load(Relaxed) - plans <= 3);
    // The slow worker's next positions are still planned: shard 110 (positions 1,100..1,110)
    // was fetched.
    assert!(src.fetches.lock().unwrap().contains(&110));
    // Its sample's other files (a position it read), again and again, between the other
    // workers' reads near the cursor: still a slower worker.
    for _ in 0..2 * RESTART_READS {
        ra.on_read(0, 0, 1_099);
        ra.on_read(0, 0, 6_050);
    }
    ra.on_read(0, 0, 1_100);
    assert_eq!(ra.status().ranks[0].cursor, Some(6_100));
}
