//! `Dataset`: a source opened: its parsed `index.json`, its identity (which keys its cache
//! folder), and the [`Fetcher`] that gets its shards' bytes from the store.

use super::CacheError;
use crate::fetch::Fetcher;
use crate::mds::{Index, ShardEntry};
use crate::store::{self, BlockingStore, ObjectKey, Source, StoreError, StoreOptions};
use bytes::Bytes;
use sha2::{Digest, Sha256};
use std::sync::Arc;

/// The name of the index object at the dataset root.
pub const INDEX_JSON: &str = "index.json";

/// A dataset's identity: where it lives and which `index.json` it has. Two mounts with the
/// same identity share cached shards; a rewritten dataset at the same URL gets a new one.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct DatasetId {
    /// The canonical source URL (see [`Source::canonical`]).
    pub source: String,
    /// Lowercase hex SHA-256 of the `index.json` bytes.
    pub index_sha256: String,
}

impl DatasetId {
    /// The identity of the dataset at `source` whose index.json is `index_bytes`.
    pub fn new(source: &str, index_bytes: &[u8]) -> Self {
        DatasetId {
            source: source.to_string(),
            index_sha256: hex::encode(Sha256::digest(index_bytes)),
        }
    }

    /// A file-name-safe key: 32 hex digits of SHA-256(source, NUL, index digest).
    pub fn key(&self) -> String {
        let mut h = Sha256::new();
        h.update(self.source.as_bytes());
        h.update([0u8]);
        h.update(self.index_sha256.as_bytes());
        hex::encode(&h.finalize()[..16])
    }
}

/// A dataset opened from a SOURCE: parsed index, identity, and its shards' fetcher.
#[derive(Debug)]
pub struct Dataset {
    index: Arc<Index>,
    index_bytes: Bytes,
    id: DatasetId,
    fetcher: Fetcher,
}

impl Dataset {
    /// Opens `source` with `opts`, then fetches and parses its `index.json`.
    pub fn load(source: &str, opts: &StoreOptions) -> Result<Dataset, CacheError> {
        let parsed = Source::parse(source)?;
        let store = match store::open(source, opts) {
            Ok(s) => s,
            // A missing local folder: say which index.json we were looking for.
            Err(StoreError::NotFound { detail, .. }) => {
                return Err(StoreError::NotFound {
                    url: format!("{}/{INDEX_JSON}", parsed.canonical()),
                    detail,
                }
                .into())
            }
            Err(e) => return Err(e.into()),
        };
        Ok(
            Self::from_store(BlockingStore::new(store, 2)?, parsed.canonical())?
                .with_part_size(opts.part_size),
        )
    }

    /// Downloads shards larger than `part_size` as parallel ranged GETs of that size
    /// (0: one GET per shard); see [`Fetcher::with_part_size`].
    pub fn with_part_size(mut self, part_size: u64) -> Self {
        self.fetcher = self.fetcher.with_part_size(part_size);
        self
    }

    /// Fetches and parses `index.json` through an already opened store rooted at the dataset;
    /// `source` is the canonical source URL used for the identity.
    pub fn from_store(store: BlockingStore, source: &str) -> Result<Dataset, CacheError> {
        let key = ObjectKey::new(INDEX_JSON)?;
        let index_bytes = store.get(&key)?;
        let index = Index::parse(&index_bytes).map_err(|e| CacheError::Index {
            url: store.url_of(&key),
            reason: e.to_string(),
        })?;
        let id = DatasetId::new(source, &index_bytes);
        let index = Arc::new(index);
        Ok(Dataset {
            fetcher: Fetcher::new(store, index.clone(), source),
            index,
            index_bytes,
            id,
        })
    }

    /// Gets the shards' bytes from the store.
    pub fn fetcher(&self) -> &Fetcher {
        &self.fetcher
    }

    /// The store (blocking facade).
    pub fn store(&self) -> &BlockingStore {
        self.fetcher.store()
    }

    /// The parsed index.
    pub fn index(&self) -> &Arc<Index> {
        &self.index
    }

    /// The index.json bytes as stored.
    pub fn index_bytes(&self) -> &Bytes {
        &self.index_bytes
    }

    /// The dataset's identity.
    pub fn id(&self) -> &DatasetId {
        &self.id
    }

    /// The index entry of `shard`.
    pub fn shard(&self, shard: usize) -> Result<&ShardEntry, CacheError> {
        Ok(self.fetcher.shard(shard)?)
    }
}
