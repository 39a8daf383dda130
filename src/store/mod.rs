//! `store`: read objects of one dataset from any object store, behind one small trait.
//!
//! Everything above this module sees [`Store`]: `head`, ranged `get_range`, whole `get` and
//! `list`, with keys relative to the dataset root ([`ObjectKey`] refuses keys that escape it).
//! This is the only module that uses `object_store`; [`open`] turns a SOURCE string plus
//! [`StoreOptions`] into a ready store.
//!
//! The shape follows arrow-rs `object_store`: a narrow trait and decorators that wrap a store
//! in another store.
//! - [`ObjectStoreBackend`]: S3 (and S3-compatible endpoints, path-style), GCS, Azure, HTTP
//!   and local files through `object_store`, with its internal retries turned off so that
//!   one policy, ours, governs every backend.
//! - [`ResilientStore`]: per-request timeout, bounded concurrency (a semaphore), and retries
//!   with exponential backoff and full jitter on 5xx, throttling, timeouts, resets and short
//!   bodies. [`open`] always adds it.
//! - [`CountingStore`] and [`FaultyStore`]: request counting and fault injection for tests
//!   and benchmarks; they sit *under* `ResilientStore` so injected transient faults are
//!   retried exactly like real ones.
//! - [`get_in_parts`]: one object as parallel ranged GETs, assembled and checked to come
//!   from one version of the object.
//! - [`BlockingStore`]: a synchronous facade with its own small runtime, for FUSE threads.
//! - [`demand_scope`]: marks the downloads a reader waits for, which `ResilientStore` lets
//!   past the readahead's (an express lane of extra connections).
//!
//! Credentials come from the standard chains and are never logged: for S3, environment
//! (`AWS_ACCESS_KEY_ID`, ...), then the shared profile files (`AWS_PROFILE`), then web
//! identity, container and instance metadata (resolved inside `object_store`).

mod aws_profile;
mod backend;
mod blocking;
mod checksums;
mod counting;
mod error;
mod faults;
mod key;
mod options;
mod parts;
pub mod put;
mod resilient;
mod source;
mod urgency;

pub use backend::{etag_md5, etag_multipart, ObjectStoreBackend};
pub use blocking::BlockingStore;
pub use checksums::{ChecksumConnector, StoreChecksums};
pub use counting::{CountingStore, RequestCounts};
pub use error::{StoreError, TransientKind};
pub use faults::{Fault, FaultyStore};
pub use key::ObjectKey;
pub use options::{StaticCredentials, StoreOptions};
pub use parts::{get_in_parts, refetch_differing_parts, Landing, PartRepair};
pub use resilient::ResilientStore;
pub use source::{Source, SourceKind};
pub use urgency::{demand_scope, DemandScope};

use bytes::Bytes;
use futures::future::BoxFuture;
use std::ops::Range;
use std::sync::Arc;

/// The future every [`Store`] method returns.
pub type StoreFuture<'a, T> = BoxFuture<'a, Result<T, StoreError>>;

/// What `head` and `list` report about one object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectInfo {
    /// The key relative to the dataset root.
    pub key: ObjectKey,
    /// Size in bytes.
    pub size: u64,
    /// The entity tag, when the store has one.
    pub e_tag: Option<String>,
}

/// What an S3 ETag says about the object's bytes: its MD5 (a plain ETag), or the MD5 of its
/// parts' MD5s and the part count (a multipart ETag). See [`Fetched`].
pub type EtagMd5s = (Option<[u8; 16]>, Option<([u8; 16], u32)>);

/// A whole object, with the store's own checksum of it where the store vouches for one.
#[derive(Debug, Clone)]
pub struct Fetched {
    /// The object's bytes.
    pub bytes: Bytes,
    /// The MD5 of the bytes as the store recorded it: an S3 ETag that is a plain MD5 (a
    /// single-part upload without SSE-KMS/SSE-C). `None` where the store gives no MD5.
    pub md5: Option<[u8; 16]>,
    /// An S3 multipart ETag: the MD5 of the parts' MD5s and the number of parts. It checks
    /// the bytes once the part size is known (the cache tries the usual ones).
    pub multipart_md5: Option<([u8; 16], u32)>,
    /// Checksums the store sent in its response headers (GCS `x-goog-hash`, Azure
    /// `Content-MD5`, full-object `x-amz-checksum-crc32c`): unlike an ETag these are always a
    /// checksum of the object, so a mismatch is damage.
    pub store_sums: StoreChecksums,
}

/// Read access to the objects under one dataset root.
///
/// Implementations must return exactly the bytes asked for or an error: `get_range` yields
/// `range.end - range.start` bytes, never fewer.
pub trait Store: Send + Sync + std::fmt::Debug + 'static {
    /// The URL of `key`, for messages and logs (never contains credentials).
    fn url_of(&self, key: &ObjectKey) -> String;
    /// Size (and e-tag) of one object.
    fn head<'a>(&'a self, key: &'a ObjectKey) -> StoreFuture<'a, ObjectInfo>;
    /// The bytes `range` of one object.
    fn get_range<'a>(&'a self, key: &'a ObjectKey, range: Range<u64>) -> StoreFuture<'a, Bytes>;
    /// The whole object.
    fn get<'a>(&'a self, key: &'a ObjectKey) -> StoreFuture<'a, Bytes>;
    /// The whole object with the store's checksum of it ([`Fetched::md5`]); by default the
    /// bytes of [`Store::get`] and no checksum.
    fn get_fetched<'a>(&'a self, key: &'a ObjectKey) -> StoreFuture<'a, Fetched> {
        Box::pin(async move {
            Ok(Fetched {
                bytes: self.get(key).await?,
                md5: None,
                multipart_md5: None,
                store_sums: StoreChecksums::default(),
            })
        })
    }
    /// Bytes `range` of one object, written into `dest` (exactly as long as the range) as
    /// they arrive, with what the object's ETag says of the whole object (an S3 ETag: see
    /// [`Fetched::md5`], [`Fetched::multipart_md5`]). A range's checksum headers are not the
    /// object's and are not used. `dest` is borrowed, not taken, so a retry fills the same
    /// bytes again. By default the bytes of [`Store::get_range`], copied, and no checksum.
    fn get_part_into<'a>(
        &'a self,
        key: &'a ObjectKey,
        range: Range<u64>,
        dest: &'a mut [u8],
    ) -> StoreFuture<'a, EtagMd5s> {
        Box::pin(async move {
            let bytes = self.get_range(key, range).await?;
            if bytes.len() != dest.len() {
                return Err(StoreError::ShortBody {
                    url: self.url_of(key),
                    expected: dest.len() as u64,
                    got: bytes.len() as u64,
                });
            }
            dest.copy_from_slice(&bytes);
            Ok((None, None))
        })
    }
    /// The checksums the store keeps for the whole object now, asked for apart from a
    /// download (S3's `x-amz-checksum-*`, which AWS sends only when asked with checksum
    /// mode): for a download whose ETag settles nothing. By default none; a store that
    /// refuses the question also gives none.
    fn checksums<'a>(&'a self, key: &'a ObjectKey) -> StoreFuture<'a, StoreChecksums> {
        let _ = key;
        Box::pin(async { Ok(StoreChecksums::default()) })
    }
    /// Every object under `prefix` (all of the dataset when `None`), in no particular order.
    fn list<'a>(&'a self, prefix: Option<&'a ObjectKey>) -> StoreFuture<'a, Vec<ObjectInfo>>;
}

/// Opens `source` with retries, timeouts and bounded concurrency from `options`.
pub fn open(source: &str, options: &StoreOptions) -> Result<Arc<dyn Store>, StoreError> {
    let backend = ObjectStoreBackend::open(&Source::parse(source)?, options)?;
    Ok(Arc::new(ResilientStore::new(Arc::new(backend), options)))
}
