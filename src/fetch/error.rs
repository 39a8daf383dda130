//! `FetchError`: why a shard's bytes could not be had from the store, naming the shard and
//! object; `ShardFault`: what is wrong with a shard or a request for one, which the cache
//! reports too. The cache turns a `FetchError` into its own error (`CacheError`) with the
//! same message.

use crate::mds::MdsError;
use crate::store::{ChecksumMismatch, StoreError};
use std::sync::Arc;

/// An error from the `fetch` module.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum FetchError {
    /// The store failed (after its retries).
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The shard's bytes do not check out, or the shard or range asked for does not exist.
    #[error(transparent)]
    Shard(#[from] ShardFault),
}

/// What is wrong with a shard, or with a request for one: its bytes do not check out, or the
/// shard or range does not exist. `fetch` and `cache` both report it, each inside its own
/// error (`FetchError::Shard`, `CacheError::Shard`), with the same message.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum ShardFault {
    /// Bytes failed their size or hash check (after re-downloads), or do not decompress /
    /// parse as the shard the index describes.
    #[error("shard {shard} ({file}): {reason}")]
    Corrupt {
        /// Shard number in index.json.
        shard: usize,
        /// The object (URL) or cached file concerned.
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
    ShardFault::Corrupt {
        shard,
        file: file.to_string(),
        reason: e.to_string(),
    }
    .into()
}

/// Why one download of a shard was refused: its bytes are not the object the store or the
/// index describes.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum Rejected {
    /// The store's own checksum of the object (S3 checksum mode, GCS, Azure) differs.
    #[error(transparent)]
    Checksum(#[from] ChecksumMismatch),
    /// The MD5 of the bytes differs from the store's plain ETag.
    #[error("MD5 {got} differs from the store's ETag {want}", got = hex::encode(got), want = hex::encode(want))]
    EtagMd5 {
        /// The bytes' MD5.
        got: [u8; 16],
        /// The ETag's.
        want: [u8; 16],
    },
    /// No usual part size makes the bytes' multipart MD5 the store's multipart ETag.
    #[error(
        "the bytes match the store's multipart ETag {}-{parts} for no usual part size",
        hex::encode(want)
    )]
    MultipartEtag {
        /// The ETag's MD5 of part MD5s.
        want: [u8; 16],
        /// Its part count.
        parts: u32,
    },
    /// A hash index.json lists differs (or the size).
    #[error(transparent)]
    Hash(Arc<MdsError>),
    /// The stored bytes do not decompress.
    #[error("decompressing: {0}")]
    Decompress(Arc<MdsError>),
    /// index.json names a compressed file but no compression.
    #[error("index.json lists a compressed file without a compression")]
    NoCompression,
    /// The shard's header does not match the index.
    #[error("{0}")]
    Header(String),
    /// The store failed during a repair of the download's parts.
    #[error(transparent)]
    Store(#[from] StoreError),
}
