//! The readahead's part of `status.json`: stalls, fetches, plans and each rank's cursor.

use super::{Readahead, NO_POSITION};
use crate::status::{RankStatus, ReadaheadStatus};
use std::sync::atomic::Ordering::Relaxed;

impl Readahead {
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
