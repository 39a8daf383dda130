//! Shard headers made ready for a listing: a file's size known without a request per file.
//!
//! A listing (READDIRPLUS) that gives an entry its real size with a long TTL spares the
//! loader one LOOKUP round trip per file when it opens it; an entry without one is looked up
//! on open. When a sample's only variable-size column is stored as is, its file's size follows
//! from the sample's length, which the shard's header gives. So a listing asks for the
//! headers of the shards its first positions use ([`ShardCache::ready_headers`]), fetched
//! side by side (two ranged GETs each for an uncompressed remote shard, read from the file
//! for a cached one), and waits a bounded time for them; each entry then takes its size from
//! a header in memory ([`ShardCache::sample_len_now`]) or goes without.

use std::collections::{HashSet, VecDeque};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use super::ShardCache;

/// Threads fetching headers for one call at most (each waits on one header at a time).
const FETCHERS: usize = 8;

/// The headers being fetched for listings, shared by the listings that wait for them.
#[derive(Debug, Default)]
pub(super) struct HeaderFetches {
    in_flight: Mutex<HashSet<usize>>,
    /// Notified whenever a header fetch ends (fetched or failed).
    ended: Condvar,
}

impl HeaderFetches {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashSet<usize>> {
        self.in_flight.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl ShardCache {
    /// The stored length of sample `i` of `shard` when its shard's header is in memory now,
    /// and whether it comes from verified bytes; never reads the disk or the store. `None`
    /// otherwise.
    pub fn sample_len_now(&self, shard: usize, i: u32) -> Option<(u64, bool)> {
        let (header, verified) = match self.memory.header(shard) {
            Some(h) => (h, true),
            None => (self.memory.header_any(shard)?, false),
        };
        let r = header.sample_range(i).ok()?;
        Some((r.end.saturating_sub(r.start), verified))
    }

    /// Brings the headers of `shards` into memory, the first first: those not there yet are
    /// fetched on up to `FETCHERS` (8) threads of their own, as a reader's requests (see
    /// [`crate::store::demand_scope`]). Waits until none of them is being fetched any more
    /// or `wait` has passed; fetches still under way go on. A shard whose header only its
    /// whole download would give (compressed, not cached) is left out; a failed fetch is
    /// logged and leaves the shard's files to be sized when looked up.
    pub fn ready_headers(self: &Arc<Self>, shards: &[usize], wait: Duration) {
        let deadline = Instant::now() + wait;
        let wanted: Vec<usize> = shards
            .iter()
            .copied()
            .filter(|&s| self.memory.header_any(s).is_none() && self.header_is_cheap(s))
            .collect();
        if wanted.is_empty() {
            return;
        }
        let mine: Vec<usize> = {
            let mut in_flight = self.header_fetches.lock();
            wanted
                .iter()
                .copied()
                .filter(|&s| in_flight.insert(s))
                .collect()
        };
        if !mine.is_empty() {
            self.fetch_headers(mine);
        }
        let mut in_flight = self.header_fetches.lock();
        while wanted.iter().any(|s| in_flight.contains(s)) {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            in_flight = self
                .header_fetches
                .ended
                .wait_timeout(in_flight, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    /// Whether `shard`'s header can be had without downloading the whole shard: it is on
    /// disk, or uncompressed (ranged GETs). (A shard whose fill has passed its check has its
    /// verified header in memory already.)
    fn header_is_cheap(&self, shard: usize) -> bool {
        self.is_resident(shard) || self.dataset.fetcher().is_ranged(shard).unwrap_or(false)
    }

    /// Fetches the headers of `shards` (marked in flight by the caller) on threads of their
    /// own, each unmarked and announced as it ends.
    fn fetch_headers(self: &Arc<Self>, shards: Vec<usize>) {
        let queue = Arc::new(Mutex::new(VecDeque::from(shards)));
        let threads = queue
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .len()
            .min(FETCHERS);
        for _ in 0..threads {
            let cache = Arc::clone(self);
            let shared = Arc::clone(&queue);
            let spawned = std::thread::Builder::new()
                .name("shardfs-headers".into())
                .spawn(move || cache.fetch_queued_headers(&shared));
            if let Err(e) = spawned {
                tracing::debug!(error = %e, "cannot start a thread to fetch shard headers");
                // The caller's thread does the work rather than leave shards marked forever.
                self.fetch_queued_headers(&queue);
                return;
            }
        }
    }

    fn fetch_queued_headers(self: &Arc<Self>, queue: &Mutex<VecDeque<usize>>) {
        let _demand = crate::store::demand_scope(true);
        loop {
            let next = queue.lock().unwrap_or_else(|p| p.into_inner()).pop_front();
            let Some(shard) = next else {
                return;
            };
            // Checked again: the shard may have left the disk since it was queued (one that
            // leaves between this check and the read is downloaded by it: rare, and its files
            // are read soon anyway).
            if self.header_is_cheap(shard) {
                if let Err(e) = self.header(shard) {
                    tracing::debug!(shard, error = %e, "cannot fetch a shard header for a listing; its files are sized when opened");
                }
            }
            self.header_fetches.lock().remove(&shard);
            self.header_fetches.ended.notify_all();
        }
    }
}
