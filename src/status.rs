//! `status`: the mount's live status as one typed tree, [`MountStatus`].
//!
//! The daemon builds it (the vfs from its own counters, the readahead's and each stream's
//! cache's), writes it as `.shardfs/status.json`, and encodes the same value for `/metrics`;
//! `shardfs status` reads the file back into it. One type for all three keeps the file, the
//! command and the endpoint from disagreeing about a field. Every field is `#[serde(default)]`,
//! so `shardfs status` still reads the file of a daemon that has fewer fields. Field names are
//! a contract (scripts, tests, docs/METRICS.md read them): rename none.

use serde::{Deserialize, Serialize};

use crate::cache::process_memory::ProcessMemory;
use crate::cache::CacheStats;
use crate::latency::LatencySnapshot;

/// Everything `.shardfs/status.json` holds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct MountStatus {
    /// The daemon's process id.
    pub pid: u32,
    /// When the mount started, in seconds since the Unix epoch.
    pub mounted_at_unix: u64,
    /// Seconds since the mount started.
    pub uptime_seconds: f64,
    /// The global ranks this node serves, in local-rank order.
    pub ranks: Vec<u64>,
    /// How many epoch folders a listing shows.
    pub epochs_listed: u64,
    /// Samples of the whole dataset (all streams).
    pub samples: u64,
    /// Shard failures that reached readers.
    pub errors: ErrorsStatus,
    /// The readahead scheduler's counters and each rank's progress.
    pub readahead: ReadaheadStatus,
    /// Each stream's cache, in stream order.
    pub cache: Vec<StreamCacheStatus>,
    /// How long reads of sample files took.
    pub read_latency: LatencySnapshot,
    /// Files handed to the kernel's page cache ahead of their reads.
    pub page_cache_pushes: PagePushStatus,
    /// Files of shards that landed from the store handed to the kernel's page cache before
    /// their readers asked for them.
    #[serde(default)]
    pub landed_pushes: PagePushStatus,
    /// Sample files that listings (READDIRPLUS) gave out, with their size or without it.
    pub listed_files: ListedFilesStatus,
    /// What the daemon's memory is made of.
    pub memory: ProcessMemory,
}

/// Files handed to the kernel's page cache ahead of their reads (a sample's other files when
/// its first was read, or a landed shard's files), so their reads never reach the daemon.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct PagePushStatus {
    /// Files handed over (in the page cache now).
    pub files: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Files not handed over because the queue to the kernel was full.
    pub dropped: u64,
    /// Files the kernel did not take (it no longer held the inode).
    pub refused: u64,
}

/// Sample files that listings (READDIRPLUS) gave out. One listed with its size is opened
/// without a request; one listed without it is looked up (one round trip) when opened.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ListedFilesStatus {
    /// Entries given with their size (known earlier, or from their shard's header).
    pub with_size: u64,
    /// Entries given without it (a placeholder the kernel looks up on open).
    pub without_size: u64,
}

/// Shard failures that reached readers: how many, the latest ones, and the answers they gave.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ErrorsStatus {
    /// Distinct failures so far (a repeat within seconds counts once).
    pub count: u64,
    /// The latest failures, most recent first.
    pub recent: Vec<ShardFailure>,
    /// Requests answered with an error, by kind (repeats included).
    pub answers: ErrorAnswers,
}

/// One shard failure seen by a reader.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ShardFailure {
    /// The dataset's URL.
    pub store: String,
    /// The shard's file name.
    pub shard: String,
    /// What went wrong, as the error and its causes say it.
    pub why: String,
    /// The errno the failed request was answered with (`EIO`, `ENOENT`, `EACCES`,
    /// `ETIMEDOUT`, `ENOSPC`).
    pub errno: String,
    /// When it happened (last seen), in seconds since the Unix epoch.
    pub unix_time: u64,
}

/// Requests answered with an error because of a shard failure, by kind.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ErrorAnswers {
    /// READs of sample files.
    pub read: u64,
    /// LOOKUPs or GETATTRs of sample files whose size was not known yet.
    pub size: u64,
}

/// The readahead scheduler's counters and each rank's progress.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ReadaheadStatus {
    /// Reads that had to wait for their shard.
    pub stalls: u64,
    /// Total time reads waited for their shards.
    pub stall_seconds: f64,
    /// Shards fetched ahead of their readers.
    pub prefetches: u64,
    /// Of those, shards fetched for a rank's next epoch.
    pub prefetches_for_next_epoch: u64,
    /// Bytes of the shards fetched for a rank's next epoch.
    pub prefetched_bytes_for_next_epoch: u64,
    /// Prefetches that failed.
    pub prefetch_errors: u64,
    /// Planning rounds run.
    pub plans: u64,
    /// Shards the last plan wanted resident ahead of the readers.
    pub window_shards: u64,
    /// Samples of cached shards asked into memory ahead of their readers.
    pub samples_advised: u64,
    /// Fetches planned and waiting for a slot.
    pub fetches_pending: u64,
    /// Fetches running now.
    pub fetches_in_flight: u64,
    /// Each local rank's progress, in local-rank order.
    pub ranks: Vec<RankStatus>,
}

/// One local rank's progress through its epoch.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct RankStatus {
    /// The rank's index among this node's ranks.
    pub local_rank: u64,
    /// The epoch it is reading.
    pub epoch: u64,
    /// The furthest position read in the epoch (`None` before the first read).
    pub cursor: Option<u64>,
    /// The lowest position its slowest worker has still to read (`None` before the first read).
    pub lowest_unread: Option<u64>,
    /// Read requests of sample files.
    pub requests: u64,
    /// Bytes of sample files delivered.
    pub bytes_read: u64,
    /// Bytes delivered per second since the first read.
    pub bytes_per_second: f64,
    /// Requests per second since the first read.
    pub requests_per_second: f64,
    /// Samples per second through the current epoch since its first read.
    pub samples_per_second: f64,
    /// Samples in the current epoch (absent when its order is unknown).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub epoch_samples: Option<u64>,
}

/// One stream's cache: its counters plus where it reads from and keeps its shards.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct StreamCacheStatus {
    /// The cache's counters (written inline, beside the fields below).
    #[serde(flatten)]
    pub stats: CacheStats,
    /// The stream's dataset URL.
    pub source: String,
    /// The cache folder of the stream.
    pub dir: String,
    /// How long whole-shard downloads (with verification) took.
    pub fetch_latency: LatencySnapshot,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_round_trips_and_an_unlimited_cache_is_null() {
        let status = MountStatus {
            pid: 7,
            ranks: vec![3],
            cache: vec![StreamCacheStatus {
                stats: CacheStats {
                    limit_bytes: u64::MAX,
                    io_backend: "pread".into(),
                    ..CacheStats::default()
                },
                source: "s3://b/p".into(),
                ..StreamCacheStatus::default()
            }],
            readahead: ReadaheadStatus {
                ranks: vec![RankStatus {
                    cursor: Some(4),
                    ..RankStatus::default()
                }],
                ..ReadaheadStatus::default()
            },
            ..MountStatus::default()
        };
        let text = serde_json::to_string(&status).unwrap();
        assert!(text.contains(r#""limit_bytes":null"#), "{text}");
        assert!(text.contains(r#""lowest_unread":null"#), "{text}");
        assert!(!text.contains("epoch_samples"), "{text}");
        assert!(text.contains(r#""io_backend":"pread""#), "{text}");
        assert_eq!(serde_json::from_str::<MountStatus>(&text).unwrap(), status);
        // A file with fewer fields (an older daemon) still reads.
        let old: MountStatus =
            serde_json::from_str(r#"{"pid": 9, "cache": [{"limit_bytes": 5}]}"#).unwrap();
        assert_eq!((old.pid, old.cache[0].stats.limit_bytes), (9, 5));
    }
}
