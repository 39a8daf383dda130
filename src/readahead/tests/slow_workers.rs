//! Advice for slower workers: the unread positions behind the cursor.

use super::*;

/// The positions (of a 4,000-position epoch whose samples run in reverse) `advised` names.
fn positions(advised: &[u64]) -> Vec<u64> {
    advised.iter().map(|s| 3999 - s).collect()
}

#[test]
fn a_slower_workers_next_positions_are_advised_also_when_it_reads_alone() {
    // One rank, two workers reading alternate batches of 32 (every shard on disk, samples in
    // reverse): the fast one reads its batches up to position 2,016, the slow one only up to
    // 544, while there is no room for advice at all.
    let order: Vec<u64> = (0..4000).rev().collect();
    let (ra, src) = setup(vec![order], 1 << 40);
    src.resident.lock().unwrap().extend(0..400);
    *src.room.lock().unwrap() = Some(0);
    for k in 0..32u64 {
        for p in 64 * k..64 * k + 32 {
            ra.on_read(0, 0, p);
        }
        if k < 8 {
            for p in 64 * k + 32..64 * k + 64 {
                ra.on_read(0, 0, p);
            }
        }
    }
    settle(&ra);
    assert!(src.advised.lock().unwrap().is_empty());
    // Room again. The fast worker is done; the slow one reads its next four batches, alone,
    // and nothing plans again in between: its own reads must ask for the advice.
    *src.room.lock().unwrap() = None;
    for k in 8..12u64 {
        for p in 64 * k + 32..64 * k + 64 {
            ra.on_read(0, 0, p);
        }
        assert!(ra.wait_idle(Duration::from_secs(5)));
    }
    let advised = positions(&src.advised.lock().unwrap());
    let behind: Vec<u64> = advised.iter().copied().filter(|&p| p < 2016).collect();
    let slow_batch = |p: u64| p % 64 >= 32;
    // Only positions still unread when advised (the slow worker's batches past the one it
    // read first), each once, none past the first ADVISE_BEHIND unread ones of the last pass.
    assert!(
        behind
            .iter()
            .all(|&p| slow_batch(p) && (608..1280).contains(&p)),
        "{behind:?}"
    );
    let mut once = behind.clone();
    once.sort_unstable();
    once.dedup();
    assert_eq!(once.len(), behind.len(), "a position advised twice");
    // The last pass (low at 800) covered the next ADVISE_BEHIND unread positions.
    let window: Vec<u64> = (800..1280).filter(|&p| slow_batch(p)).collect();
    assert_eq!(window.len() as u64, ADVISE_BEHIND);
    assert!(window.iter().all(|p| behind.contains(p)), "{behind:?}");
    // The advice ahead of the cursor went on too.
    assert!(advised.iter().any(|&p| p > 2016));
}
