//! `FetchError`: why a shard's bytes could not be had from the store, naming the shard and
//! object. The cache turns it into its own error (`CacheError`) with the same message.

use crate::store::StoreError;

/// An error from the `fetch` module.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum FetchError {
    /// The store failed (after its retries).
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Downloaded bytes failed their size or hash check (after re-downloads), or do not
    /// decompress / parse as the shard the index describes.
    #[error("shard {shard} ({file}): {reason}")]
    Corrupt {
        /// Shard number in index.json.
        shard: usize,
        /// The object (URL) concerned.
        file: String,
        /// What did not match.
        reason: String,
    },
    /// A shard number beyond the index.
    #[error("shard {shard} does not exist (the index has {shards} shards)")]
    NoSuchShard {
        /// The number asked for.
        shard: usize,
        /// How many there are.
        shards: usize,
    },
    /// A range beyond a shard's end, or a sample number beyond its count.
    #[error("shard {shard} ({file}): {what}")]
    OutOfRange {
        /// Shard number.
        shard: usize,
        /// Its basename.
        file: String,
        /// What was asked.
        what: String,
    },
}

/// A shard whose bytes do not parse or check out.
pub(super) fn corrupt(shard: usize, file: &str, e: impl std::fmt::Display) -> FetchError {
    FetchError::Corrupt {
        shard,
        file: file.to_string(),
        reason: e.to_string(),
    }
}
