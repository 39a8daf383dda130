//! `fetch`: a shard's bytes from the store, checked, repaired and decompressed.
//!
//! One public type, [`Fetcher`], does it for one dataset. Two ways in:
//! - **A whole shard** ([`Fetcher::fetch_shard`], `whole.rs`): downloaded in one GET, or as
//!   parallel ranged parts into memory the caller hands over ([`PartBuffer`]: the cache's
//!   download budget, so the fetch keeps no memory policy of its own); its size and cheapest
//!   known hash checked, else the store's own check (`transfer_check.rs`: the ETag's MD5,
//!   computed while the parts land, `etag_digest.rs`, or the checksum S3 keeps); a download
//!   in parts that fails its check repaired part by part; then decompressed to exactly the
//!   size index.json gives and its header checked against the index. Corrupt bytes never
//!   leave it.
//! - **Ranges of an uncompressed shard** (`ranged.rs`): its header or one sample, for random
//!   access without downloading the shard. No checksum covers a range, so each is read twice
//!   at once and a third read decides when they differ.
//!
//! It knows nothing of the cache: the cache hands it the buffers to download into and,
//! optionally, a sink that writes the bytes to disk while they are checked.
//! Dependencies: `store` and `mds` only.

mod error;
mod etag_digest;
mod ranged;
mod transfer_check;
mod whole;

pub use error::{FetchError, ShardFault};
pub use transfer_check::multipart_part_size;
pub use whole::{FetchedShard, PartBuffer, PartSink, StagedParts, Stager};

use crate::mds::{Index, ShardEntry};
use crate::store::{BlockingStore, ObjectKey, StoreOptions};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

/// Downloads, checks and decompresses the shards of one dataset (see the module notes).
#[derive(Debug)]
pub struct Fetcher {
    store: BlockingStore,
    index: Arc<Index>,
    /// The dataset's canonical source URL (which store it is decides which checks apply).
    source: String,
    counters: Counters,
    /// Some shard's ETag has matched the MD5 of its bytes: this store's ETags are MD5s, so a
    /// mismatch is damage, never an SSE-KMS/SSE-C ETag.
    etags_are_md5: AtomicBool,
    /// Whether the store has given a checksum of an object when asked.
    store_checksums_seen: AtomicBool,
    /// Times it gave none, while it never gave one: past a few, downloads whose ETag says
    /// nothing no longer ask (see `transfer_check.rs`).
    store_checksums_missing: AtomicU32,
    /// The part size that last matched a multipart ETag (0: none yet); tried first next time.
    part_size: AtomicU64,
    /// Shards larger than this are downloaded as parallel ranged parts of this size (0: never).
    fetch_part_size: u64,
}

/// What the fetches of one [`Fetcher`] cost and found so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FetchStats {
    /// Bytes downloaded (stored form), ranged reads included.
    pub bytes_fetched: u64,
    /// Ranged requests for headers or samples.
    pub ranged_fetches: u64,
    /// Downloads that failed their checks.
    pub verify_failures: u64,
    /// Downloads in parts made whole by fetching their parts again.
    pub repaired_downloads: u64,
    /// Parts fetched again for those repairs.
    pub parts_refetched: u64,
    /// Times the store was asked for its own checksum of a shard (S3 checksum mode).
    pub checksum_questions: u64,
    /// Those answered with a checksum (the check then needs no MD5).
    pub checksum_answers: u64,
}

#[derive(Debug, Default)]
struct Counters {
    bytes_fetched: AtomicU64,
    ranged_fetches: AtomicU64,
    verify_failures: AtomicU64,
    repaired_downloads: AtomicU64,
    parts_refetched: AtomicU64,
    checksum_questions: AtomicU64,
    checksum_answers: AtomicU64,
}

fn add(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Relaxed);
}

impl Fetcher {
    /// Fetches the shards `index` lists through `store` (rooted at the dataset), whose
    /// canonical URL is `source`. Shards are downloaded in parts of the store options'
    /// default size until [`Fetcher::with_part_size`] says otherwise.
    pub fn new(store: BlockingStore, index: Arc<Index>, source: &str) -> Self {
        Fetcher {
            store,
            index,
            source: source.to_string(),
            counters: Counters::default(),
            etags_are_md5: AtomicBool::new(false),
            store_checksums_seen: AtomicBool::new(false),
            store_checksums_missing: AtomicU32::new(0),
            part_size: AtomicU64::new(0),
            fetch_part_size: StoreOptions::default().part_size,
        }
    }

    /// Downloads shards larger than `part_size` as parallel ranged GETs of that size
    /// (0: one GET per shard). See [`Fetcher::fetch_shard`] for when parts are used.
    pub fn with_part_size(mut self, part_size: u64) -> Self {
        self.fetch_part_size = part_size;
        self
    }

    /// The store (blocking facade).
    pub fn store(&self) -> &BlockingStore {
        &self.store
    }

    /// The index entry of `shard`.
    pub fn shard(&self, shard: usize) -> Result<&ShardEntry, FetchError> {
        let shards = self.index.shards();
        shards.get(shard).ok_or(
            ShardFault::NoSuchShard {
                shard,
                shards: shards.len(),
            }
            .into(),
        )
    }

    fn raw_key(&self, shard: usize) -> Result<(ObjectKey, &ShardEntry), FetchError> {
        let entry = self.shard(shard)?;
        Ok((ObjectKey::new(entry.raw.basename.clone())?, entry))
    }

    /// True when the shard is stored uncompressed, so ranged reads can serve it.
    pub fn is_ranged(&self, shard: usize) -> Result<bool, FetchError> {
        Ok(self.shard(shard)?.zip.is_none())
    }

    /// True when the dataset is on a local file system, where reading a whole shard (and so
    /// verifying its hash) costs little.
    pub fn is_local(&self) -> bool {
        self.source.starts_with("file://")
    }

    /// True when the store is S3 (its ETags and kept checksums apply).
    fn is_s3(&self) -> bool {
        self.source.starts_with("s3://")
    }

    /// The counters so far.
    pub fn stats(&self) -> FetchStats {
        let c = &self.counters;
        FetchStats {
            bytes_fetched: c.bytes_fetched.load(Relaxed),
            ranged_fetches: c.ranged_fetches.load(Relaxed),
            verify_failures: c.verify_failures.load(Relaxed),
            repaired_downloads: c.repaired_downloads.load(Relaxed),
            parts_refetched: c.parts_refetched.load(Relaxed),
            checksum_questions: c.checksum_questions.load(Relaxed),
            checksum_answers: c.checksum_answers.load(Relaxed),
        }
    }
}
