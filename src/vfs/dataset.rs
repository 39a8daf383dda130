//! The mounted dataset: one or more MDS streams behind the shard cache, seen as global
//! sample ids with column files ([`SampleSource`]) and shards ([`ShardSource`]).
//!
//! Global sample ids number the streams' samples one stream after the other, as
//! StreamingDataset does; global shard numbers do the same for shards. A read is arithmetic
//! plus table look-ups: sample → (stream, shard, index) by binary search over shard ends, then
//! the shard header's offsets and the column sizes give the column's bytes, which `mds::render`
//! turns into the file's bytes.

use std::sync::Arc;

use bytes::Bytes;

use super::source::{ColumnFile, SampleSource, SourceError};
use crate::cache::{Advice, CacheError, ShardCache};
use crate::mds;
use crate::readahead::ShardSource;
use crate::status::StreamCacheStatus;

/// Samples of one stream's shards: what the vfs needs from the cache.
pub trait ShardStore: Send + Sync {
    /// The raw bytes of sample `i` of shard `shard`, fetching the shard if needed (blocks).
    fn sample(&self, shard: usize, i: u32) -> Result<Bytes, CacheError>;
    /// Like [`ShardStore::sample`], but may avoid downloading the whole shard (ranged reads
    /// of an uncompressed remote shard), for `stat` of files not read yet.
    fn sample_for_size(&self, shard: usize, i: u32) -> Result<Bytes, CacheError> {
        self.sample(shard, i)
    }
    /// The stored length of sample `i` from the shard's header alone, for `stat` of files
    /// whose length follows from it; `None` when this store cannot tell it cheaply.
    fn sample_len_for_size(&self, _shard: usize, _i: u32) -> Result<Option<u64>, CacheError> {
        Ok(None)
    }
    /// Makes the shard resident without keeping it pinned (blocks).
    fn ensure(&self, shard: usize) -> Result<(), CacheError>;
    /// For readahead: like [`ShardStore::ensure`], but returns at once (fetching nothing)
    /// instead of waiting when the cache has no room now.
    fn prefetch(&self, shard: usize) -> Result<(), CacheError> {
        self.ensure(shard)
    }
    /// Whether the shard can be read now without waiting for the store.
    fn is_resident(&self, shard: usize) -> bool;
    /// Whether sample `i` of the shard can be read now without waiting for the store (the
    /// shard resident, or the sample held in memory).
    fn can_read_now(&self, shard: usize, _i: u32) -> bool {
        self.is_resident(shard)
    }
    /// For readahead: starts loading sample `i` of a resident shard from local disk into
    /// memory (the page cache, or samples read ahead); never blocks.
    fn advise(&self, _shard: usize, _i: u32) -> Advice {
        Advice::Skipped
    }
    /// Live counters for `status.json`.
    fn status(&self) -> StreamCacheStatus;
    /// Where the shards come from (the dataset's URL), for error messages.
    fn source(&self) -> String {
        String::new()
    }
}

/// The disk cache as a [`ShardStore`].
pub struct CachedShards(pub Arc<ShardCache>);

impl ShardStore for CachedShards {
    fn sample(&self, shard: usize, i: u32) -> Result<Bytes, CacheError> {
        // Verified bytes only: the memory tier's verified samples, else the filled shard.
        self.0.sample(shard, i)
    }
    fn sample_for_size(&self, shard: usize, i: u32) -> Result<Bytes, CacheError> {
        self.0.sample_direct(shard, i)
    }
    fn sample_len_for_size(&self, shard: usize, i: u32) -> Result<Option<u64>, CacheError> {
        self.0.sample_len(shard, i).map(Some)
    }
    fn ensure(&self, shard: usize) -> Result<(), CacheError> {
        self.0.ensure(shard)
    }
    fn prefetch(&self, shard: usize) -> Result<(), CacheError> {
        if !self.0.ensure_if_room(shard)? {
            tracing::debug!(shard, "readahead skipped: no room in the cache now");
        }
        Ok(())
    }
    fn is_resident(&self, shard: usize) -> bool {
        self.0.is_resident(shard)
    }
    fn can_read_now(&self, shard: usize, i: u32) -> bool {
        self.0.can_read_now(shard, i)
    }
    fn advise(&self, shard: usize, i: u32) -> Advice {
        self.0.advise_sample(shard, i)
    }
    fn source(&self) -> String {
        self.0.dataset().id().source.clone()
    }
    fn status(&self) -> StreamCacheStatus {
        StreamCacheStatus {
            stats: self.0.stats(),
            source: self.0.dataset().id().source.clone(),
            dir: self.0.dir().display().to_string(),
            fetch_latency: self.0.fetch_latency(),
        }
    }
}

/// One stream of the mount.
pub struct Stream {
    index: mds::Index,
    shards: Arc<dyn ShardStore>,
    first_sample: u64,
    first_shard: u32,
    /// Column files and encodings per shard (shards of one writer share them; kept per shard
    /// since the format allows differences).
    columns: Vec<Arc<(Vec<ColumnFile>, Vec<mds::Encoding>)>>,
}

/// All streams of the mount, in global-id order.
pub struct MdsDataset {
    streams: Vec<Stream>,
    num_samples: u64,
}

impl MdsDataset {
    /// Builds the dataset from each stream's index and shard store, in stream order.
    pub fn new(parts: Vec<(mds::Index, Arc<dyn ShardStore>)>) -> Self {
        let mut streams = Vec::new();
        let mut first_sample = 0u64;
        let mut first_shard = 0u32;
        for (index, shards) in parts {
            let mut columns: Vec<Arc<(Vec<ColumnFile>, Vec<mds::Encoding>)>> = Vec::new();
            for s in index.shards() {
                let files: Vec<ColumnFile> = s
                    .columns
                    .iter()
                    .map(|c| ColumnFile::new(&c.name, mds::extension(&c.encoding)))
                    .collect();
                let encs: Vec<mds::Encoding> =
                    s.columns.iter().map(|c| c.encoding.clone()).collect();
                match columns.last() {
                    Some(prev) if prev.0 == files && prev.1 == encs => {
                        let p = prev.clone();
                        columns.push(p)
                    }
                    _ => columns.push(Arc::new((files, encs))),
                }
            }
            let n = index.num_samples();
            let k = index.shards().len() as u32;
            streams.push(Stream {
                index,
                shards,
                first_sample,
                first_shard,
                columns,
            });
            first_sample += n;
            first_shard += k;
        }
        Self {
            streams,
            num_samples: first_sample,
        }
    }

    /// (stream, shard in stream, sample in shard) of a global sample id.
    fn locate(&self, sample: u64) -> Option<(&Stream, usize, u32)> {
        let k = self
            .streams
            .partition_point(|s| s.first_sample <= sample)
            .checked_sub(1)?;
        let stream = self.streams.get(k)?;
        let (shard, i) = stream.index.locate(sample - stream.first_sample)?;
        Some((stream, shard, i))
    }

    /// Shards of every stream together (global shard numbers are `0..num_shards`).
    fn num_shards(&self) -> usize {
        self.streams
            .last()
            .map_or(0, |s| s.first_shard as usize + s.index.shards().len())
    }

    fn stream_of_shard(&self, shard: u32) -> Option<(&Stream, usize)> {
        let k = self
            .streams
            .partition_point(|s| s.first_shard <= shard)
            .checked_sub(1)?;
        let stream = self.streams.get(k)?;
        let local = (shard - stream.first_shard) as usize;
        (local < stream.index.shards().len()).then_some((stream, local))
    }

    /// Calls `f` with the stored bytes of column `column` of `sample` (a view of the cached
    /// sample, no copy) and its encoding; `for_size` allows a ranged read instead of a
    /// whole-shard fetch.
    fn with_column<T>(
        &self,
        sample: u64,
        column: u32,
        for_size: bool,
        f: impl Fn(&mds::Encoding, &Bytes) -> Result<T, mds::MdsError>,
    ) -> Result<T, SourceError> {
        let (stream, shard, i) = self.locate(sample).ok_or(SourceError::Missing)?;
        let entry = stream
            .index
            .shards()
            .get(shard)
            .ok_or(SourceError::Missing)?;
        let cols = stream.columns.get(shard).ok_or(SourceError::Missing)?;
        let enc = cols.1.get(column as usize).ok_or(SourceError::Missing)?;
        let name = entry.raw.basename.clone();
        let fail = |why: String| SourceError::Shard {
            store: stream.shards.source(),
            shard: name.clone(),
            why,
        };
        let split = |raw_sample: Bytes| -> Result<Bytes, SourceError> {
            let ranges = mds::split_sample(&entry.columns, &raw_sample)
                .map_err(|e| fail(format!("sample {i}: {e}")))?;
            let r = ranges
                .get(column as usize)
                .cloned()
                .ok_or(SourceError::Missing)?;
            if r.start > r.end || r.end > raw_sample.len() {
                return Err(fail(format!("column {column} of sample {i} out of bounds")));
            }
            Ok(raw_sample.slice(r))
        };
        let render =
            |raw: Bytes| f(enc, &raw).map_err(|e| fail(format!("sample {i} column {column}: {e}")));
        if for_size {
            // Ranged reads are not hash-checked: bytes that do not parse fall back to the
            // verified whole shard instead of failing `stat`.
            let ranged = stream
                .shards
                .sample_for_size(shard, i)
                .map_err(|e| fail(e.to_string()))
                .and_then(split)
                .and_then(render);
            match ranged {
                Ok(v) => return Ok(v),
                Err(e) => tracing::warn!(
                    shard = %name,
                    sample = i,
                    error = %e,
                    "ranged read for a file size failed; fetching the whole shard"
                ),
            }
        }
        let raw_sample = stream
            .shards
            .sample(shard, i)
            .map_err(|e| fail(e.to_string()))?;
        render(split(raw_sample)?)
    }

    /// The file size of column `column` of `sample` from its shard's header alone (no
    /// sample bytes), when the column is the samples' only variable-size one and its file is
    /// its stored bytes: one ranged GET per shard instead of one per file before a shard is
    /// read. `None` otherwise, or when the header cannot be had (the caller reads the sample).
    fn size_from_header(&self, sample: u64, column: u32) -> Option<u64> {
        let (stream, shard, i) = self.locate(sample)?;
        let cols = &stream.index.shards().get(shard)?.columns;
        let column = column as usize;
        let enc = &cols.get(column)?.encoding;
        if !mds::is_sole_variable_column(cols, column) || !mds::renders_as_stored(enc) {
            return None;
        }
        let len = match stream.shards.sample_len_for_size(shard, i) {
            Ok(len) => len?,
            Err(e) => {
                tracing::debug!(shard, sample = i, error = %e, "no header for a file size; reading the sample");
                return None;
            }
        };
        mds::column_len_from_sample_len(cols, len, column)
    }

    fn resident(&self, sample: u64) -> bool {
        self.locate(sample)
            .map(|(s, shard, _)| s.shards.is_resident(shard))
            .unwrap_or(false)
    }
}

impl ShardSource for MdsDataset {
    fn shard_of(&self, sample: u64) -> Option<u32> {
        self.locate(sample)
            .map(|(s, shard, _)| s.first_shard + shard as u32)
    }

    fn shard_bytes(&self, shard: u32) -> u64 {
        self.stream_of_shard(shard)
            .and_then(|(s, k)| s.index.shards().get(k))
            .map(|e| e.raw.bytes)
            .unwrap_or(0)
    }

    fn is_resident(&self, shard: u32) -> bool {
        self.stream_of_shard(shard)
            .map(|(s, k)| s.shards.is_resident(k))
            .unwrap_or(false)
    }

    fn advise(&self, sample: u64) -> Advice {
        self.locate(sample)
            .map_or(Advice::Skipped, |(s, shard, i)| s.shards.advise(shard, i))
    }

    fn fetch(&self, shard: u32) -> Result<(), CacheError> {
        let (s, k) = self
            .stream_of_shard(shard)
            .ok_or_else(|| CacheError::NoSuchShard {
                shard: shard as usize,
                shards: self.num_shards(),
            })?;
        s.shards.prefetch(k)
    }
}

impl SampleSource for MdsDataset {
    fn num_samples(&self) -> u64 {
        self.num_samples
    }

    fn columns(&self, sample: u64) -> Option<&[ColumnFile]> {
        let (stream, shard, _) = self.locate(sample)?;
        stream.columns.get(shard).map(|c| &c.0[..])
    }

    fn file_size(&self, sample: u64, column: u32) -> Result<u64, SourceError> {
        let for_size = !self.resident(sample);
        if for_size {
            if let Some(size) = self.size_from_header(sample, column) {
                return Ok(size);
            }
        }
        self.with_column(sample, column, for_size, |enc, raw| {
            mds::rendered_len(enc, raw)
        })
    }

    fn read(&self, sample: u64, column: u32, offset: u64, size: u32) -> Result<Bytes, SourceError> {
        self.with_column(sample, column, false, |enc, raw| {
            mds::render_range(enc, raw, offset, size as usize)
        })
    }

    fn read_with_size(
        &self,
        sample: u64,
        column: u32,
        offset: u64,
        size: u32,
    ) -> Result<(Bytes, u64), SourceError> {
        self.with_column(sample, column, false, |enc, raw| {
            Ok((
                mds::render_range(enc, raw, offset, size as usize)?,
                mds::rendered_len(enc, raw)?,
            ))
        })
    }

    fn can_read_now(&self, sample: u64) -> bool {
        self.locate(sample)
            .is_none_or(|(s, shard, i)| s.shards.can_read_now(shard, i))
    }

    fn status(&self) -> Vec<StreamCacheStatus> {
        self.streams.iter().map(|s| s.shards.status()).collect()
    }
}
