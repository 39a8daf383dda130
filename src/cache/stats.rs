//! Cache counters: cheap atomics bumped on the hot path, read as one [`CacheStats`] snapshot.

use std::borrow::Cow;
use std::sync::atomic::{AtomicU64, Ordering};

/// A snapshot of the cache's counters (what `.shardfs/status.json` shows).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct CacheStats {
    /// Bytes downloaded from the store (stored form: compressed when compressed), including
    /// ranged header/sample reads.
    pub bytes_fetched: u64,
    /// Whole shards downloaded and cached.
    pub shards_fetched: u64,
    /// Ranged requests made for headers or samples of shards not on disk.
    pub ranged_fetches: u64,
    /// Sample or header look-ups served from memory.
    pub memory_hits: u64,
    /// Look-ups that had to go to disk or the store.
    pub memory_misses: u64,
    /// `get` calls that found the shard on disk.
    pub disk_hits: u64,
    /// `get` calls that had to fetch (or wait for a fetch).
    pub disk_misses: u64,
    /// Shards evicted to stay within the budget.
    pub evictions: u64,
    /// Fills that failed (store error, corrupt bytes, disk error).
    pub fill_failures: u64,
    /// Downloads rejected by size/hash verification and re-fetched or abandoned.
    pub verify_failures: u64,
    /// Downloads in parts that failed verification and were made whole by fetching only
    /// their parts again (the differing ones replaced), not the whole shard.
    pub repaired_downloads: u64,
    /// Parts fetched again to repair downloads that failed verification.
    pub parts_refetched: u64,
    /// Times the store was asked for its own checksum of a shard (S3 checksum mode: a HEAD
    /// beside the first download of a shard index.json lists no hash for).
    pub store_checksum_questions: u64,
    /// Those answered with a checksum, which then checked the shard instead of the ETag's
    /// MD5.
    pub store_checksum_answers: u64,
    /// Verified shards that could not be written to the cache disk (full or failing).
    pub disk_write_failures: u64,
    /// Samples of cached shards the kernel was asked to read ahead into the page cache
    /// (the readahead's disk-tier advice).
    pub samples_advised: u64,
    /// Samples of direct-I/O cached files read into memory ahead of their reader (the same
    /// advice when the page cache is bypassed).
    pub samples_read_ahead: u64,
    /// Sample reads answered by a sample read ahead.
    pub read_ahead_hits: u64,
    /// Bytes of samples read ahead, or being read, not taken yet (within a share of the
    /// memory tier's part of `--memory-limit`).
    pub read_ahead_bytes: u64,
    /// Reads ahead not started for want of room (tried again later).
    pub read_ahead_full: u64,
    /// Reads ahead called off because their reader came first.
    pub read_ahead_late: u64,
    /// Samples read ahead that nobody took (dropped to make room).
    pub read_ahead_unused: u64,
    /// Bytes of shards currently on disk.
    pub usage_bytes: u64,
    /// The disk budget (`u64::MAX` when unlimited, written as `null`).
    #[serde(with = "unlimited_is_null")]
    pub limit_bytes: u64,
    /// Shards currently on disk.
    pub resident_shards: u64,
    /// Bytes the memory tier holds now (bounded by its share of `--memory-limit`).
    pub memory_tier_bytes: u64,
    /// Bytes of shards being downloaded now, held in memory until they are on disk (bounded
    /// by the other half of `--memory-limit`).
    pub downloading_bytes: u64,
    /// Bytes of buffers of finished downloads kept for the next ones (together with
    /// `downloading_bytes` within that half of `--memory-limit`; freed after 30 s unused).
    pub idle_download_buffer_bytes: u64,
    /// Downloads in parts that got a buffer of fresh memory (each page of it zeroed by the
    /// kernel on first touch).
    pub download_buffers_made: u64,
    /// Downloads in parts that got a kept buffer: an earlier download's, or one made ready
    /// ahead.
    pub download_buffers_reused: u64,
    /// Download buffers made ready ahead of a download (when a reader's folder is listed on
    /// a cold start), their pages mapped in before the download needs them.
    pub download_buffers_prepared: u64,
    /// Shards currently pinned by open handles.
    pub pinned_shards: u64,
    /// How cached files are read and written. Past the page cache (`O_DIRECT`, the default
    /// where the cache folder's file system takes it): "io_uring-direct" (io_uring, several
    /// reads or writes in flight; the default where the kernel has io_uring) or
    /// "pread-direct" (pread/pwrite: no io_uring, or `SHARDFS_IO=pread`). Through the page
    /// cache: "io_uring-inline", "io_uring" (ring threads) or "pread".
    pub io_backend: Cow<'static, str>,
}

/// `u64::MAX` (no limit) as JSON `null`, any other number as itself.
mod unlimited_is_null {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub fn serialize<S: Serializer>(v: &u64, s: S) -> Result<S::Ok, S::Error> {
        (*v != u64::MAX).then_some(*v).serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
        Ok(Option::<u64>::deserialize(d)?.unwrap_or(u64::MAX))
    }
}

#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub shards_fetched: AtomicU64,
    pub memory_hits: AtomicU64,
    pub memory_misses: AtomicU64,
    pub disk_hits: AtomicU64,
    pub disk_misses: AtomicU64,
    pub evictions: AtomicU64,
    pub fill_failures: AtomicU64,
    /// Cached files that failed their recorded checksum (downloads that failed their checks are the
    /// fetcher's).
    pub verify_failures: AtomicU64,
    pub disk_write_failures: AtomicU64,
    pub advised: AtomicU64,
    pub preloaded: AtomicU64,
    pub preload_hits: AtomicU64,
    /// How long whole-shard downloads (with verification) took.
    pub fetch_latency: crate::latency::LatencyHistogram,
}

impl Counters {
    pub fn add(c: &AtomicU64, n: u64) {
        c.fetch_add(n, Ordering::Relaxed);
    }

    pub fn load(c: &AtomicU64) -> u64 {
        c.load(Ordering::Relaxed)
    }
}
