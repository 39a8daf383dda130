//! `cache`: shard bytes on local disk within a byte budget, with a memory tier in front.
//!
//! The cache keeps the tiers (disk, memory), one download per shard, the download budget and
//! eviction; getting a shard's bytes from the store, checked and decompressed, is `fetch`'s
//! job (a [`crate::fetch::Fetcher`] per dataset), which downloads into buffers of this
//! cache's download budget.
//!
//! Why it is shaped this way:
//! - **A reader never sees a partial shard.** A fill has the fetcher download the stored file,
//!   check its size and its cheapest known hash from index.json (re-downloading on mismatch),
//!   decompress it to exactly the raw size and check the header against the index; then it
//!   writes a temp file and
//!   renames it into place, with its checksum recorded beside it (an xxh3, or the CRC64NVME
//!   the store keeps when that vouched for the download: `file_sum.rs`). Corrupt or short
//!   data never reaches `shards/`; the write is not fsynced (the read path does not wait for
//!   the disk), and a file torn by a crash fails its checksum when adopted and is fetched
//!   again. See
//!   `layout.rs` for the folder layout.
//! - **Restarts keep everything verified.** The folder is keyed by the dataset identity
//!   (canonical source URL + index.json digest), so datasets never collide and a remount
//!   adopts every complete file (its existence under the final name with the right size
//!   *is* the completeness record) and deletes leftovers of interrupted fills.
//! - **The budget is a hard bound on disk bytes.** Before a fill reserves room, resident
//!   shards are evicted by an [`EvictionPolicy`] (LRU by default; readahead plugs in
//!   furthest-next-use). Shards pinned by a live [`ShardHandle`] are never evicted. A budget
//!   smaller than the largest shard is refused at open with the size it needs.
//! - **One download per shard.** Concurrent `get`s of an absent shard share one fill (single
//!   flight); waiters get the fill's result, error included. A sample read that waits on a
//!   fill is answered from the fill's bytes as soon as they are verified, before the disk
//!   write; a fill a read waits for goes before the readahead's (download memory, and an
//!   express lane of connections in the store).
//! - **Reads of cached files use io_uring** (one ring per reading thread by default; the
//!   dedicated ring threads of `io/uring.rs` on request), with `pread` as the fallback when
//!   io_uring is unavailable (see `io/`).
//! - **Hot headers and samples stay in memory** (moka, bounded in bytes by its share of
//!   `--memory-limit`, which also bounds the shards being downloaded),
//!   and `header()` of an uncompressed remote shard costs one ranged GET, not a download.
//! - **What the readahead says comes next is read ahead.** Its advice becomes a
//!   `posix_fadvise` for files read through the page cache, or a read into memory on a few
//!   threads of our own for files read past it (`preload.rs`).
//!
//! The API is blocking because its callers are FUSE worker threads; store I/O runs on the
//! store's own runtime.

mod dataset;
mod download_budget;
mod error;
mod file_sum;
mod io;
mod layout;
mod memory;
mod options;
mod policy;
mod preload;
mod preloader;
pub mod process_memory;
mod shard_cache;
mod stats;

pub use dataset::{Dataset, DatasetId, INDEX_JSON};
pub use error::CacheError;
pub use layout::LAYOUT_VERSION;
pub use options::{default_cache_dir, CacheOptions, IoMode};
pub use policy::{Candidate, EvictionContext, EvictionPolicy, LruPolicy};
pub use preload::Advice;
pub use shard_cache::{OnLanded, ShardCache, ShardHandle};
pub use stats::CacheStats;
