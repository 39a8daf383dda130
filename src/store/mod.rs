//! `store`: read objects of one dataset from any object store, behind one small trait.
//!
//! Everything above this module sees [`Store`]: `head`, one GET with options (`get_opts`: a
//! range or all, returned or written into a buffer), `checksums` and `list`, plus the
//! convenient forms of [`StoreExt`], with keys relative to the dataset root ([`ObjectKey`] refuses keys that escape it).
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
mod classify;
pub(crate) use classify::error_chain;
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
pub use checksums::{ChecksumConnector, ChecksumMismatch, StoreChecksums};
pub use counting::{CountingStore, RequestCounts};
pub use error::{StoreError, StoreErrorKind, TransientKind};
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

/// What one GET asks for (see [`Store::get_opts`]).
#[derive(Debug, Default)]
pub struct GetOptions<'a> {
    /// Bytes `range` of the object; all of it when `None`.
    pub range: Option<Range<u64>>,
    /// Where to write the body as it arrives (exactly as long as the range), instead of
    /// returning it in [`Fetched::bytes`] (then empty). Borrowed, not taken, so a retry fills
    /// the same bytes again.
    pub into: Option<&'a mut [u8]>,
}

impl<'a> GetOptions<'a> {
    /// The same request again, lending the same buffer (for a retry or a wrapper).
    pub fn reborrow(&mut self) -> GetOptions<'_> {
        GetOptions {
            range: self.range.clone(),
            into: self.into.as_deref_mut(),
        }
    }

    /// How many bytes the answer must have, when the request says (a range or a buffer).
    pub fn expected_len(&self) -> Option<u64> {
        match (&self.range, &self.into) {
            (Some(r), _) => Some(r.end.saturating_sub(r.start)),
            (None, Some(d)) => Some(d.len() as u64),
            (None, None) => None,
        }
    }

    /// Answers this request from a whole answer held in memory (for stores that have the
    /// bytes at hand, such as test doubles): `fetched.bytes` are the requested bytes; with a
    /// buffer they are copied into it and the answer's bytes left empty. A length that is not
    /// the one asked for is [`StoreError::ShortBody`].
    pub fn answer(
        self,
        mut fetched: Fetched,
        url: impl FnOnce() -> String,
    ) -> Result<Fetched, StoreError> {
        let got = fetched.bytes.len() as u64;
        if self.expected_len().is_some_and(|want| want != got) {
            return Err(StoreError::ShortBody {
                url: url(),
                expected: self.expected_len().unwrap_or(got),
                got,
            });
        }
        if let Some(dest) = self.into {
            dest.copy_from_slice(&fetched.bytes);
            fetched.bytes = Bytes::new();
        }
        Ok(fetched)
    }
}

impl Fetched {
    /// An answer of these bytes with no checksum of the store's.
    pub fn plain(bytes: Bytes) -> Fetched {
        Fetched {
            bytes,
            md5: None,
            multipart_md5: None,
            store_sums: StoreChecksums::default(),
        }
    }

    /// What the object's ETag says of it ([`Fetched::md5`], [`Fetched::multipart_md5`]).
    pub fn etag_md5s(&self) -> EtagMd5s {
        (self.md5, self.multipart_md5)
    }
}

/// Read access to the objects under one dataset root: five questions a store answers (the
/// last two with defaults), as
/// arrow-rs `object_store` keeps `ObjectStore::get_opts` the one GET and builds the rest on
/// it. A wrapper (retries, counting, faults) writes these and nothing else; the convenient
/// forms ([`StoreExt::get`], [`StoreExt::get_range`], [`StoreExt::get_part_into`], ...) are
/// built on [`Store::get_opts`] once for every store.
///
/// Implementations must return exactly the bytes asked for or an error: a ranged GET yields
/// `range.end - range.start` bytes, never fewer.
#[async_trait::async_trait]
pub trait Store: Send + Sync + std::fmt::Debug + 'static {
    /// The URL of `key`, for messages and logs (never contains credentials).
    fn url_of(&self, key: &ObjectKey) -> String;
    /// Size (and e-tag) of one object.
    async fn head(&self, key: &ObjectKey) -> Result<ObjectInfo, StoreError>;
    /// One GET of `key`: the whole object or a range, returned or written into the caller's
    /// buffer, with what the store says of the object's bytes (an S3 ETag's MD5s, on whole and
    /// ranged answers; checksum headers, on whole answers only, since a range's are not the
    /// object's).
    async fn get_opts(&self, key: &ObjectKey, opts: GetOptions<'_>) -> Result<Fetched, StoreError>;
    /// The checksums the store keeps for the whole object now, asked for apart from a
    /// download (S3's `x-amz-checksum-*`, which AWS sends only when asked with checksum
    /// mode): for a download whose ETag settles nothing. A store that keeps none, or
    /// refuses the question, gives none (the default; a wrapper forwards it).
    async fn checksums(&self, key: &ObjectKey) -> Result<StoreChecksums, StoreError> {
        let _ = key;
        Ok(StoreChecksums::default())
    }
    /// Every object under `prefix` (all of the dataset when `None`), in no particular order.
    async fn list(&self, prefix: Option<&ObjectKey>) -> Result<Vec<ObjectInfo>, StoreError>;
}

/// The convenient forms of [`Store::get_opts`], for every store (not overridden: a wrapper
/// changes `get_opts`, and these follow).
pub trait StoreExt: Store {
    /// The bytes `range` of one object (none for an empty range, without a request).
    fn get_range<'a>(&'a self, key: &'a ObjectKey, range: Range<u64>) -> StoreFuture<'a, Bytes> {
        Box::pin(async move {
            if range.start >= range.end {
                return Ok(Bytes::new());
            }
            let opts = GetOptions {
                range: Some(range),
                into: None,
            };
            Ok(self.get_opts(key, opts).await?.bytes)
        })
    }
    /// The whole object.
    fn get<'a>(&'a self, key: &'a ObjectKey) -> StoreFuture<'a, Bytes> {
        Box::pin(async move { Ok(self.get_opts(key, GetOptions::default()).await?.bytes) })
    }
    /// The whole object with the store's checksums of it ([`Fetched::md5`],
    /// [`Fetched::store_sums`]).
    fn get_fetched<'a>(&'a self, key: &'a ObjectKey) -> StoreFuture<'a, Fetched> {
        self.get_opts(key, GetOptions::default())
    }
    /// Bytes `range` of one object, written into `dest` (exactly as long as the range) as
    /// they arrive, with what the object's ETag says of the whole object. `dest` is borrowed,
    /// not taken, so a retry fills the same bytes again.
    fn get_part_into<'a>(
        &'a self,
        key: &'a ObjectKey,
        range: Range<u64>,
        dest: &'a mut [u8],
    ) -> StoreFuture<'a, EtagMd5s> {
        Box::pin(async move {
            if range.start >= range.end {
                return Ok((None, None));
            }
            let opts = GetOptions {
                range: Some(range),
                into: Some(dest),
            };
            Ok(self.get_opts(key, opts).await?.etag_md5s())
        })
    }
}

impl<T: Store + ?Sized> StoreExt for T {}

/// Opens `source` with retries, timeouts and bounded concurrency from `options`.
pub fn open(source: &str, options: &StoreOptions) -> Result<Arc<dyn Store>, StoreError> {
    let backend = ObjectStoreBackend::open(&Source::parse(source)?, options)?;
    Ok(Arc::new(ResilientStore::new(Arc::new(backend), options)))
}
