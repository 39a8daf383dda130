//! Loading a dataset for the one-shot commands (`inspect`, `cat`) from any SOURCE kind
//! (local path, `file://`, `s3://`, `gs://`, `az://`, `http(s)://`) through `store`.
//! Uncompressed shards are read by ranges (header, then one sample); compressed ones are
//! downloaded whole, verified and decompressed, without touching any cache folder.

use super::store_args::StoreArgs;
use crate::cache;
use crate::mds::Index;
use anyhow::{Context, Result};
use bytes::Bytes;
use std::sync::Arc;

/// A dataset whose `index.json` has been read and validated.
#[derive(Debug)]
pub struct Dataset {
    inner: cache::Dataset,
    /// The parsed index.
    pub index: Arc<Index>,
}

impl Dataset {
    /// Opens SOURCE and parses its `index.json`.
    pub fn open(source: &str, store: &StoreArgs) -> Result<Dataset> {
        let inner = cache::Dataset::load(source, &store.options())
            .with_context(|| format!("opening dataset {source}"))?;
        let index = inner.index().clone();
        Ok(Dataset { inner, index })
    }

    /// The stored bytes of sample `i` of shard `shard`: two ranged reads (header, sample)
    /// for an uncompressed shard, the whole verified and decompressed shard otherwise.
    pub fn sample(&self, shard: usize, i: u32) -> Result<Bytes> {
        Ok(self.inner.fetcher().fetch_sample(shard, i)?)
    }
}
