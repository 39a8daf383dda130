//! `ShardCache`: the disk tier (budget, pins, one download per shard) with the memory tier
//! in front of it. See the module notes in `cache/mod.rs`. Each file here holds one job:
//!
//! - `open.rs`: opening the folder and adopting the shards earlier runs left;
//! - `read.rs`: reads (a pinned handle, a header, a sample), from memory, a fill in progress
//!   or the disk; `handle.rs`: the pinned handle;
//! - `fill.rs`: one download per shard (`flight.rs`: its waiters) into the disk tier;
//! - `room.rs`: the disk budget and eviction;
//! - `trust.rs`: which cached files are trusted as they are, and re-hashing the others;
//! - `headers.rs`: headers made ready for a listing, which then gives files their sizes;
//! - `admission.rs`: what the memory tier may take while downloads borrow its share;
//! - `advise.rs`: the readahead's advice (page-cache hints, or samples read ahead);
//! - `stats.rs`: the counters' snapshot.

mod admission;
mod advise;
mod fill;
mod flight;
mod handle;
mod headers;
mod open;
mod read;
mod room;
mod stats;
mod trust;

pub use handle::ShardHandle;

use super::dataset::Dataset;
use super::download_budget::{DownloadBudget, IdleFreeing};
use super::io::{DirectPath, FileReader};
use super::layout::Layout;
use super::memory::MemoryTier;
use super::policy::EvictionPolicy;
use super::preloader::Preloader;
use super::stats::Counters;
use super::{CacheError, CacheOptions};
use crate::fetch::ShardFault;
use crate::store::ObjectKey;
use flight::Flight;
use std::collections::HashMap;
use std::fs::File;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use trust::Trust;

#[derive(Debug, Clone)]
enum Slot {
    Absent,
    Filling(Arc<Flight>),
    Resident {
        bytes: u64,
        pins: u32,
        last_use: u64,
        /// The cached file, opened on first read and kept open while the shard is resident
        /// (a read then costs no open/close).
        file: Option<Arc<File>>,
    },
}

#[derive(Debug)]
struct State {
    slots: Vec<Slot>,
    usage: u64,
    reserved: u64,
    clock: u64,
}

/// Shards of one dataset on local disk within a byte budget, with a memory tier in front.
///
/// All methods are blocking and safe to call from many threads (FUSE worker threads); do not
/// call them from inside a tokio runtime.
pub struct ShardCache {
    dataset: Arc<Dataset>,
    layout: Layout,
    keys: Vec<ObjectKey>,
    limit: u64,
    opts: CacheOptions,
    state: Mutex<State>,
    /// Notified whenever room may have appeared: a fill finished or failed, a reader unpinned,
    /// a shard was evicted or forgotten.
    room: Condvar,
    policy: Arc<dyn EvictionPolicy>,
    reader: Arc<dyn FileReader>,
    /// Cached shard files are written and read past the page cache (`O_DIRECT`), and how
    /// (io_uring or pread/pwrite): the mount's own files hold the bytes readers read in RAM,
    /// once (see `io::direct`). `None`: through the page cache, with `reader`.
    direct: Option<DirectPath>,
    memory: MemoryTier,
    /// Samples the readahead asked for, read from direct-I/O files ahead of their reader.
    preloader: Preloader,
    counters: Arc<Counters>,
    /// What each resident shard's bytes must hash to, and the file state last found to match.
    trust: Mutex<HashMap<usize, Trust>>,
    /// Serializes checksum verifications, so a shard is hashed once however many readers wait.
    verifying: Mutex<()>,
    /// Bounds the bytes of shards downloading at once.
    downloads: Arc<DownloadBudget>,
    /// Bytes of the largest stored shard file: the buffer a download may need.
    largest_download: u64,
    /// Told of every shard that lands from the store, with its verified bytes
    /// ([`ShardCache::on_landed`]).
    landed: std::sync::OnceLock<OnLanded>,
    /// Headers being fetched for listings ([`ShardCache::ready_headers`]).
    header_fetches: headers::HeaderFetches,
    /// Frees the budget's idle buffers while the cache is open.
    _idle_freeing: IdleFreeing,
    _lock: File,
}

/// Called with a shard's index and its verified bytes when it lands from the store, before
/// it is on disk. Must not block: it runs on the thread of the fill, which may be a reader's.
pub type OnLanded = Box<dyn Fn(usize, &bytes::Bytes) + Send + Sync>;

impl std::fmt::Debug for ShardCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShardCache")
            .field("dir", &self.layout.root)
            .field("limit", &self.limit)
            .finish_non_exhaustive()
    }
}

impl ShardCache {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The dataset this cache serves.
    pub fn dataset(&self) -> &Arc<Dataset> {
        &self.dataset
    }

    /// The dataset's cache folder (`<cache-dir>/v1/<dataset key>`).
    pub fn dir(&self) -> &std::path::Path {
        &self.layout.root
    }

    /// Where shard `shard` lives (or would live) on disk.
    pub fn shard_path(&self, shard: usize) -> Result<std::path::PathBuf, CacheError> {
        Ok(self.layout.shard_path(self.key(shard)?))
    }

    fn key(&self, shard: usize) -> Result<&ObjectKey, CacheError> {
        self.keys.get(shard).ok_or(
            ShardFault::NoSuchShard {
                shard,
                shards: self.keys.len(),
            }
            .into(),
        )
    }

    /// Whether `shard` is complete on disk right now.
    pub fn is_resident(&self, shard: usize) -> bool {
        matches!(self.lock().slots.get(shard), Some(Slot::Resident { .. }))
    }

    /// Whether sample `i` of `shard` can be read now without waiting for the store: the
    /// sample in memory (not counted as a use), or the shard on disk.
    pub fn can_read_now(&self, shard: usize, i: u32) -> bool {
        self.memory.contains_sample(shard, i) || self.is_resident(shard)
    }
}
