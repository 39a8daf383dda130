//! The plan: every rank's order walked forward from its cursor, within the budget, giving
//! each shard's next use (for eviction) and the shards to fetch, nearest first.

use super::{Inner, Plan, BACK_MARGIN, BEYOND_WINDOWS, NO_POSITION, REPLAN_FRACTION, REPLAN_STEP};
use crate::plan::EpochOrders;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering::Relaxed;

impl Inner {
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
    pub(super) fn plan(&self, cold_start: bool) -> Plan {
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
        self.reach.keep_only(&in_use);
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
            let mut rank_blocked = false;
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
                // The rest of this epoch reads at least `reach` distinct shards: once that
                // many have been met in it, its later positions change nothing but the count
                // of positions walked, as long as every shard met is in the rank's window
                // (no window end yet, no stream's share full: past those, a shard met again
                // is counted against the walk's limits). See `reach`.
                let reach = self
                    .reach
                    .of(e, r, &order, &|s| self.shards.shard_of(s))
                    .from(from);
                let mut met_here = ShardSet::default();
                let mut met_count = 0u32;
                for (i, sample) in order.iter_from(from).enumerate() {
                    let here = walked;
                    walked += 1;
                    // Only positions up to the cursor count: one opened ahead of it (a listing
                    // with `stat`) is still to be read.
                    let behind = e == epoch && start0.saturating_add(here) <= pos;
                    let done = behind && u32::try_from(here).is_ok_and(|i| read.contains(i));
                    let all_met = met_count > 0
                        && met_count >= reach
                        && window_end.is_none()
                        && !full.iter().any(|&f| f);
                    if all_met && !behind {
                        // Each position left would have counted one more distance.
                        let left = order.len().saturating_sub(from.saturating_add(i));
                        distance = distance.saturating_add(left as u64);
                        if distance > self.opts.max_lookahead {
                            distance = self.opts.max_lookahead.saturating_add(1);
                            break 'epochs;
                        }
                        break;
                    }
                    if all_met && !done {
                        // Unread, behind the cursor (a slower worker's): counted, no more.
                        distance += 1;
                        if distance > self.opts.max_lookahead {
                            break 'epochs;
                        }
                        continue;
                    }
                    if done && !cold_start && start0.saturating_add(here) + BACK_MARGIN < pos {
                        // Read long ago: nothing below looks at it (saves finding its shard).
                        continue;
                    }
                    let Some(shard) = self.shards.shard_of(sample) else {
                        continue;
                    };
                    // At a cold start (before the first fetch has ended), a rank's lowest
                    // position read but not on disk is one a reader is blocked on: it is
                    // planned as the rank's next position (distance 0, the urgent fetch),
                    // not passed over. Later such a shard may be one evicted after its reads,
                    // no reason to fetch it.
                    let blocked = done
                        && cold_start
                        && !rank_blocked
                        && c.was_read(start0.saturating_add(here))
                        && !self.shards.is_resident(shard);
                    if blocked {
                        rank_blocked = true;
                    } else if done {
                        // Read already: a worker may still be reading its other files.
                        if start0.saturating_add(here).saturating_add(BACK_MARGIN) >= pos
                            && self.shards.is_resident(shard)
                        {
                            next_use.at_most(shard, 0, false);
                        }
                        continue;
                    }
                    if met_here.insert(shard) {
                        met_count += 1;
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
        let urgent = wanted
            .iter()
            .take_while(|(d, _)| *d == 0)
            .map(|(_, s)| *s)
            .collect();
        // For eviction: the window's distances, and past it the later uses it does not cover.
        let mut evict_order = beyond.into_map();
        evict_order.extend(next_use.iter().map(|(s, d)| (*s, *d)));
        self.window_shards.store(next_use.len() as u64, Relaxed);
        Plan {
            next_use: evict_order,
            wanted: wanted.into_iter().map(|(_, s)| s).collect(),
            later,
            urgent,
        }
    }
}

/// A set of shard ids as a bitmap: a plan asks it once per walked position, so it must cost
/// less than hashing.
#[derive(Default)]
pub(super) struct ShardSet(Vec<u64>);

impl ShardSet {
    pub(super) fn is_empty(&self) -> bool {
        self.0.iter().all(|&w| w == 0)
    }

    pub(super) fn contains(&self, shard: u32) -> bool {
        let i = shard as usize;
        self.0.get(i / 64).is_some_and(|w| w & (1 << (i % 64)) != 0)
    }

    /// Adds `shard`; true if it was not in the set yet.
    pub(super) fn insert(&mut self, shard: u32) -> bool {
        let i = shard as usize;
        if self.0.len() <= i / 64 {
            self.0.resize(i / 64 + 1, 0);
        }
        let bit = 1 << (i % 64);
        self.0.get_mut(i / 64).is_some_and(|w| {
            let new = *w & bit == 0;
            *w |= bit;
            new
        })
    }
}

/// Each shard's smallest distance so far, indexed by shard id (`u64::MAX`: not met), and
/// whether that nearest use is in a later epoch than its rank's current one.
#[derive(Default)]
pub(super) struct ShardDistances(Vec<(u64, bool)>);

impl ShardDistances {
    /// Lowers `shard`'s distance to `d` if it is larger; `later`: that use is in a later
    /// epoch than the rank's.
    pub(super) fn at_most(&mut self, shard: u32, d: u64, later: bool) {
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
    pub(super) fn later_epoch(&self) -> HashSet<u32> {
        self.0
            .iter()
            .enumerate()
            .filter(|(_, (d, later))| *later && *d != u64::MAX)
            .map(|(s, _)| s as u32)
            .collect()
    }

    /// The shards met, with their distances.
    pub(super) fn into_map(self) -> HashMap<u32, u64> {
        self.0
            .into_iter()
            .enumerate()
            .filter(|(_, (d, _))| *d != u64::MAX)
            .map(|(s, (d, _))| (s as u32, d))
            .collect()
    }
}
