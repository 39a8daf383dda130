//! A snapshot of the cache's counters, its fetcher's and its budgets'.

use super::{ShardCache, Slot};
use crate::cache::stats::{CacheStats, Counters};

impl ShardCache {
    /// How long whole-shard downloads took so far.
    pub fn fetch_latency(&self) -> crate::latency::LatencySnapshot {
        self.counters.fetch_latency.snapshot()
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> CacheStats {
        let c = &self.counters;
        let st = self.lock();
        let (mut resident, mut pinned) = (0, 0);
        for s in &st.slots {
            if let Slot::Resident { pins, .. } = s {
                resident += 1;
                if *pins > 0 {
                    pinned += 1;
                }
            }
        }
        let read_ahead = self.preloader.stats();
        let fetched = self.dataset.fetcher().stats();
        let (buffers_made, buffers_reused) = self.downloads.buffers_handed_out();
        CacheStats {
            // index.json was fetched once, when the dataset was opened.
            bytes_fetched: fetched.bytes_fetched + self.dataset.index_bytes().len() as u64,
            shards_fetched: Counters::load(&c.shards_fetched),
            ranged_fetches: fetched.ranged_fetches,
            memory_hits: Counters::load(&c.memory_hits),
            memory_misses: Counters::load(&c.memory_misses),
            disk_hits: Counters::load(&c.disk_hits),
            disk_misses: Counters::load(&c.disk_misses),
            evictions: Counters::load(&c.evictions),
            fill_failures: Counters::load(&c.fill_failures),
            disk_write_failures: Counters::load(&c.disk_write_failures),
            samples_advised: Counters::load(&c.advised),
            samples_read_ahead: Counters::load(&c.preloaded),
            read_ahead_hits: Counters::load(&c.preload_hits),
            read_ahead_bytes: self.preloader.bytes(),
            read_ahead_full: read_ahead.full,
            read_ahead_late: read_ahead.late,
            read_ahead_unused: read_ahead.unused,
            verify_failures: Counters::load(&c.verify_failures) + fetched.verify_failures,
            repaired_downloads: fetched.repaired_downloads,
            parts_refetched: fetched.parts_refetched,
            store_checksum_questions: fetched.checksum_questions,
            store_checksum_answers: fetched.checksum_answers,
            usage_bytes: st.usage,
            limit_bytes: self.limit,
            resident_shards: resident,
            memory_tier_bytes: self.memory.bytes(),
            downloading_bytes: self.downloads.in_use(),
            idle_download_buffer_bytes: self.downloads.idle_buffer_bytes(),
            download_buffers_made: buffers_made,
            download_buffers_reused: buffers_reused,
            download_buffers_prepared: self.downloads.buffers_prepared(),
            pinned_shards: pinned,
            io_backend: match self.direct {
                Some(path) => path.name().into(),
                None => self.reader.name().into(),
            },
        }
    }
}
