//! `CacheError`: why a shard could not be served, naming the shard, file or path.
//!
//! It is `Clone` because single flight hands one fill's outcome to every waiter.

use crate::fetch::{FetchError, ShardFault};
use crate::store::StoreError;
use std::path::PathBuf;
use std::sync::Arc;

/// An error from the `cache` module.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum CacheError {
    /// Fetching from the object store failed (after its retries).
    #[error(transparent)]
    Store(#[from] StoreError),
    /// `index.json` could not be parsed.
    #[error("{url}: invalid index.json: {reason}")]
    Index {
        /// Where the index came from.
        url: String,
        /// The parser's message.
        reason: String,
    },
    /// The shard's bytes (downloaded, after re-downloads, or cached) do not check out, or the
    /// shard or range asked for does not exist. Nothing was cached.
    #[error(transparent)]
    Shard(#[from] ShardFault),
    /// A local file operation failed.
    #[error("{op} {}: {source}", path.display())]
    Io {
        /// What we were doing ("write", "rename", ...).
        op: &'static str,
        /// The path concerned.
        path: PathBuf,
        /// The OS error.
        source: Arc<std::io::Error>,
    },
    /// The byte budget cannot hold even the largest shard.
    #[error("cache limit {limit} bytes is smaller than shard {shard} ({basename}, {bytes} bytes uncompressed); raise --cache-limit to at least {bytes}")]
    BudgetTooSmall {
        /// The configured limit.
        limit: u64,
        /// The largest shard.
        shard: usize,
        /// Its basename.
        basename: String,
        /// Its uncompressed size.
        bytes: u64,
    },
    /// Every resident shard is pinned by open readers; there is no room for another.
    #[error("cache is full: {need} more bytes needed for shard {shard}, limit {limit}, {pinned} bytes pinned by open readers and {filling} bytes being filled")]
    Full {
        /// The shard that needs room.
        shard: usize,
        /// Its size.
        need: u64,
        /// The limit.
        limit: u64,
        /// Bytes held by pinned shards.
        pinned: u64,
        /// Bytes reserved by fills in progress.
        filling: u64,
    },
    /// A fill ended without a result (its thread panicked); the next request refetches.
    #[error("the download of shard {shard} was aborted (the filling thread panicked)")]
    FillAborted {
        /// Shard number.
        shard: usize,
    },
    /// The cache is not usable as configured (no cache dir, bad options).
    #[error("cache configuration: {0}")]
    Config(String),
}

impl CacheError {
    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        CacheError::Io {
            op,
            path: path.into(),
            source: Arc::new(source),
        }
    }
}

impl From<FetchError> for CacheError {
    /// The same error as the cache names it (the messages are the same).
    fn from(e: FetchError) -> Self {
        match e {
            FetchError::Store(e) => CacheError::Store(e),
            FetchError::Shard(e) => CacheError::Shard(e),
        }
    }
}
