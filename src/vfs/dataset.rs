//! The mounted dataset: one or more MDS streams behind the shard cache, seen as global
//! sample ids with column files ([`SampleSource`]).
//!
//! Global sample ids number the streams' samples one stream after the other, as
//! StreamingDataset does; the plan's [`SampleMap`] locates a sample (stream, shard, index) by
//! binary search over shard ends, once per read; then the shard header's offsets and the
//! column sizes give the column's bytes, which `mds::render` turns into the file's bytes. The
//! readahead does not come through here: it reaches the caches directly.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;

use super::source::{
    ColumnFile, ColumnRead, ColumnSet, LandedShard, Location, OnLanded, SampleSource, ShardError,
    SourceError,
};
use crate::cache::{CacheError, ShardCache};
use crate::mds;
use crate::plan::SampleMap;
use crate::status::StreamCacheStatus;

/// Most header bytes one listing has fetched to size its files (each header is read twice):
/// a dataset of many small samples has large headers, of which a listing's first positions
/// may touch many.
const LISTED_HEADER_BYTES: u64 = 8 << 20;

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
    /// The stored length of sample `i` when the shard's header is in memory now, and whether
    /// it comes from verified bytes (never reads the disk or the store).
    fn sample_len_now(&self, _shard: usize, _i: u32) -> Option<(u64, bool)> {
        None
    }
    /// Brings the headers of `shards` into memory where that needs no whole download,
    /// waiting up to `wait` (for a listing that will give its files' sizes).
    fn ready_headers(&self, _shards: &[usize], _wait: Duration) {}
    /// The verified bytes of sample `i` when they are in memory now (no disk, no store).
    fn sample_in_memory(&self, _shard: usize, _i: u32) -> Option<Bytes> {
        None
    }
    /// Whether the shard can be read now without waiting for the store.
    fn is_resident(&self, shard: usize) -> bool;
    /// Whether sample `i` of the shard can be read now without waiting for the store (the
    /// shard resident, or the sample held in memory).
    fn can_read_now(&self, shard: usize, _i: u32) -> bool {
        self.is_resident(shard)
    }
    /// A reader is about to read `shard`: make ready what its download will need.
    fn prepare_download(&self, _shard: usize) {}
    /// Calls `f` with each shard's number and verified bytes as it lands from the store.
    fn on_landed(&self, _f: crate::cache::OnLanded) {}
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
    fn sample_len_now(&self, shard: usize, i: u32) -> Option<(u64, bool)> {
        self.0.sample_len_now(shard, i)
    }
    fn ready_headers(&self, shards: &[usize], wait: Duration) {
        self.0.ready_headers(shards, wait)
    }
    fn is_resident(&self, shard: usize) -> bool {
        self.0.is_resident(shard)
    }
    fn sample_in_memory(&self, shard: usize, i: u32) -> Option<Bytes> {
        self.0.sample_in_memory(shard, i)
    }
    fn can_read_now(&self, shard: usize, i: u32) -> bool {
        self.0.can_read_now(shard, i)
    }
    fn prepare_download(&self, shard: usize) {
        self.0.prepare_download(shard)
    }
    fn on_landed(&self, f: crate::cache::OnLanded) {
        self.0.on_landed(f)
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

/// One stream of the mount: its shards and their column files.
pub struct Stream {
    shards: Arc<dyn ShardStore>,
    /// Column files and encodings per shard (shards of one writer share them; kept per shard
    /// since the format allows differences).
    columns: Vec<Arc<(Vec<ColumnFile>, Vec<mds::Encoding>)>>,
}

/// All streams of the mount, in global-id order.
pub struct MdsDataset {
    map: Arc<SampleMap>,
    streams: Vec<Stream>,
}

impl MdsDataset {
    /// Builds the dataset from each stream's index and shard store, in stream order.
    pub fn new(parts: Vec<(Arc<mds::Index>, Arc<dyn ShardStore>)>) -> Self {
        let mut indexes = Vec::with_capacity(parts.len());
        let mut streams = Vec::with_capacity(parts.len());
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
            indexes.push(index);
            streams.push(Stream { shards, columns });
        }
        Self {
            map: Arc::new(SampleMap::new(indexes)),
            streams,
        }
    }

    /// Where the samples and shards of every stream are (the plan's numbering).
    pub fn map(&self) -> &Arc<SampleMap> {
        &self.map
    }

    /// The stream, and its shard's index entry, of a located sample.
    fn entry(&self, at: &Location) -> Option<(&Stream, &mds::ShardEntry)> {
        let stream = self.streams.get(at.stream)?;
        let entry = self.map.index(at.stream)?.shards().get(at.shard)?;
        Some((stream, entry))
    }

    /// Calls `f` with the stored bytes of column `column` of the sample `at` (a view of the
    /// cached sample, no copy) and its encoding; `for_size` allows a ranged read instead of a
    /// whole-shard fetch.
    fn with_column<T>(
        &self,
        at: &Location,
        column: u32,
        for_size: bool,
        f: impl Fn(&mds::Encoding, &Bytes) -> Result<T, mds::MdsError>,
    ) -> Result<T, SourceError> {
        let (stream, entry) = self.entry(at).ok_or(SourceError::Missing)?;
        let (shard, i) = (at.shard, at.index);
        let cols = stream.columns.get(shard).ok_or(SourceError::Missing)?;
        let enc = cols.1.get(column as usize).ok_or(SourceError::Missing)?;
        let name = entry.raw.basename.clone();
        let fail = |source: ShardError| SourceError::Shard {
            store: stream.shards.source(),
            shard: name.clone(),
            source: Box::new(source),
        };
        let split = |raw_sample: Bytes| -> Result<Bytes, SourceError> {
            let ranges = mds::split_sample(&entry.columns, &raw_sample)
                .map_err(|source| fail(ShardError::Sample { index: i, source }))?;
            let r = ranges
                .get(column as usize)
                .cloned()
                .ok_or(SourceError::Missing)?;
            if r.start > r.end || r.end > raw_sample.len() {
                return Err(fail(ShardError::ColumnOutOfBounds { index: i, column }));
            }
            Ok(raw_sample.slice(r))
        };
        let render = |raw: Bytes| {
            f(enc, &raw).map_err(|source| {
                fail(ShardError::Column {
                    index: i,
                    column,
                    source,
                })
            })
        };
        if for_size {
            // Ranged reads are not hash-checked: bytes that do not parse fall back to the
            // verified whole shard instead of failing `stat`.
            let ranged = stream
                .shards
                .sample_for_size(shard, i)
                .map_err(|e| fail(e.into()))
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
        let raw_sample = stream.shards.sample(shard, i).map_err(|e| fail(e.into()))?;
        render(split(raw_sample)?)
    }

    /// The whole files of `columns` of the sample at `at` from its verified bytes `raw`; bytes
    /// that do not split or render are left to the read of that file, which says why.
    fn render_files(&self, at: &Location, raw: &Bytes, columns: ColumnSet) -> Vec<(u32, Bytes)> {
        let Some((stream, entry)) = self.entry(at) else {
            return Vec::new();
        };
        let Some(encodings) = stream.columns.get(at.shard).map(|c| &c.1) else {
            return Vec::new();
        };
        let Ok(ranges) = mds::split_sample(&entry.columns, raw) else {
            return Vec::new();
        };
        ranges
            .into_iter()
            .zip(encodings)
            .zip(0u32..)
            .filter(|(_, c)| columns.contains(*c))
            .filter_map(|((r, enc), c)| {
                if r.start > r.end || r.end > raw.len() {
                    return None;
                }
                let file = mds::render_range(enc, &raw.slice(r), 0, usize::MAX).ok()?;
                Some((c, file))
            })
            .collect()
    }

    /// The file size of column `column` of the sample `at` from its shard's header alone
    /// (no sample bytes), when the column is the samples' only variable-size one and its file
    /// is its stored bytes: one ranged GET per shard instead of one per file before a shard
    /// is read. `None` otherwise, or when the header cannot be had (the caller reads the
    /// sample).
    fn size_from_header(&self, at: &Location, column: u32) -> Option<u64> {
        let (stream, cols) = self.header_sized(at, column)?;
        let column = column as usize;
        let len = match stream.shards.sample_len_for_size(at.shard, at.index) {
            Ok(len) => len?,
            Err(e) => {
                tracing::debug!(shard = at.shard, sample = at.index, error = %e, "no header for a file size; reading the sample");
                return None;
            }
        };
        mds::column_len_from_sample_len(cols, len, column)
    }

    /// The stream and columns of the sample at `at` when its column `column` is sized by its
    /// shard's header ([`sized_by_header`]); `None` otherwise.
    fn header_sized(&self, at: &Location, column: u32) -> Option<(&Stream, &[mds::Column])> {
        let (stream, entry) = self.entry(at)?;
        sized_by_header(&entry.columns, column as usize).then_some((stream, &entry.columns[..]))
    }
}

/// Whether a file of column `column` has a size that follows from its sample's length, which
/// the shard's header gives: the samples' only variable-size column, served as stored.
fn sized_by_header(cols: &[mds::Column], column: usize) -> bool {
    mds::is_sole_variable_column(cols, column)
        && cols
            .get(column)
            .is_some_and(|c| mds::renders_as_stored(&c.encoding))
}

impl SampleSource for MdsDataset {
    fn num_samples(&self) -> u64 {
        self.map.num_samples()
    }

    fn locate(&self, sample: u64) -> Option<Location> {
        self.map.locate(sample)
    }

    fn columns(&self, sample: u64) -> Option<&[ColumnFile]> {
        let at = self.map.locate(sample)?;
        let stream = self.streams.get(at.stream)?;
        stream.columns.get(at.shard).map(|c| &c.0[..])
    }

    fn size_now(&self, at: &Location, column: u32) -> Option<(u64, bool)> {
        let (stream, cols) = self.header_sized(at, column)?;
        let (len, verified) = stream.shards.sample_len_now(at.shard, at.index)?;
        let size = mds::column_len_from_sample_len(cols, len, column as usize)?;
        Some((size, verified))
    }

    fn ready_sizes(&self, samples: &[Location], wait: Duration) {
        let deadline = Instant::now() + wait;
        // Per stream, in the order the samples come (the listing's first entries' first).
        let mut shards: Vec<Vec<usize>> = vec![Vec::new(); self.streams.len()];
        let mut header_bytes = 0u64;
        let mut seen = std::collections::HashSet::new();
        for at in samples {
            let Some((_, entry)) = self.entry(at) else {
                continue;
            };
            if !(0..entry.columns.len()).any(|c| sized_by_header(&entry.columns, c)) {
                continue;
            }
            let Some(list) = shards.get_mut(at.stream) else {
                continue;
            };
            if !seen.insert((at.stream, at.shard)) {
                continue;
            }
            header_bytes = header_bytes.saturating_add(mds::header_len(entry.samples));
            if header_bytes > LISTED_HEADER_BYTES {
                break;
            }
            list.push(at.shard);
        }
        for (stream, list) in self.streams.iter().zip(shards) {
            if !list.is_empty() {
                let left = deadline.saturating_duration_since(Instant::now());
                stream.shards.ready_headers(&list, left);
            }
        }
    }

    fn file_size(&self, at: &Location, column: u32) -> Result<u64, SourceError> {
        let for_size = !self.is_resident(at);
        if for_size {
            if let Some(size) = self.size_from_header(at, column) {
                return Ok(size);
            }
        }
        self.with_column(at, column, for_size, |enc, raw| mds::rendered_len(enc, raw))
    }

    fn read(&self, r: ColumnRead) -> Result<Bytes, SourceError> {
        self.with_column(&r.at, r.column, false, |enc, raw| {
            mds::render_range(enc, raw, r.offset, r.size as usize)
        })
    }

    fn read_with_size(&self, r: ColumnRead) -> Result<(Bytes, u64), SourceError> {
        self.with_column(&r.at, r.column, false, |enc, raw| {
            Ok((
                mds::render_range(enc, raw, r.offset, r.size as usize)?,
                mds::rendered_len(enc, raw)?,
            ))
        })
    }

    fn sibling_files(&self, at: &Location, columns: ColumnSet) -> Vec<(u32, Bytes)> {
        let Some(raw) = self
            .streams
            .get(at.stream)
            .and_then(|s| s.shards.sample_in_memory(at.shard, at.index))
        else {
            return Vec::new();
        };
        self.render_files(at, &raw, columns)
    }

    fn watch_landings(&self, f: OnLanded) {
        for (k, stream) in self.streams.iter().enumerate() {
            let Some(first) = self.map.first_shard_of(k) else {
                continue;
            };
            let f = f.clone();
            stream.shards.on_landed(Box::new(move |shard, raw| {
                // A header that does not parse is left to the reads, which say why.
                let Ok(header) = mds::ShardHeader::parse(raw) else {
                    return;
                };
                f(&LandedShard {
                    global_shard: first.saturating_add(shard as u32),
                    raw: raw.clone(),
                    header,
                });
            }));
        }
    }

    fn landed_files(
        &self,
        landed: &LandedShard,
        at: &Location,
        columns: ColumnSet,
    ) -> Vec<(u32, Bytes)> {
        if landed.global_shard != at.global_shard {
            return Vec::new();
        }
        let Ok(r) = landed.header.sample_range(at.index) else {
            return Vec::new();
        };
        let (Ok(start), Ok(end)) = (usize::try_from(r.start), usize::try_from(r.end)) else {
            return Vec::new();
        };
        if start > end || end > landed.raw.len() {
            return Vec::new();
        }
        self.render_files(at, &landed.raw.slice(start..end), columns)
    }

    fn is_resident(&self, at: &Location) -> bool {
        self.streams
            .get(at.stream)
            .is_some_and(|s| s.shards.is_resident(at.shard))
    }

    fn can_read_now(&self, at: &Location) -> bool {
        self.streams
            .get(at.stream)
            .is_none_or(|s| s.shards.can_read_now(at.shard, at.index))
    }

    fn prepare_to_read(&self, at: &Location) {
        if let Some(s) = self.streams.get(at.stream) {
            s.shards.prepare_download(at.shard);
        }
    }

    fn status(&self) -> Vec<StreamCacheStatus> {
        self.streams.iter().map(|s| s.shards.status()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::status::StreamCacheStatus;
    use std::sync::Mutex;

    /// A shard store that records which headers a listing asked for.
    #[derive(Default)]
    struct Recording {
        asked: Mutex<Vec<Vec<usize>>>,
    }

    impl ShardStore for Recording {
        fn sample(&self, _shard: usize, _i: u32) -> Result<Bytes, CacheError> {
            unreachable!("a listing reads no sample")
        }
        fn is_resident(&self, _shard: usize) -> bool {
            false
        }
        fn ready_headers(&self, shards: &[usize], _wait: Duration) {
            self.asked.lock().unwrap().push(shards.to_vec());
        }
        fn status(&self) -> StreamCacheStatus {
            StreamCacheStatus::default()
        }
    }

    /// An index of `shards` shards of `samples` samples each, with these columns.
    fn index(shards: usize, samples: u32, columns: &[(&str, &str, Option<u32>)]) -> mds::Index {
        let names: Vec<&str> = columns.iter().map(|c| c.0).collect();
        let encodings: Vec<&str> = columns.iter().map(|c| c.1).collect();
        let sizes: Vec<Option<u32>> = columns.iter().map(|c| c.2).collect();
        let entries: Vec<serde_json::Value> = (0..shards)
            .map(|k| {
                serde_json::json!({
                    "version": 2, "format": "mds", "compression": null, "hashes": [],
                    "size_limit": 67108864, "samples": samples,
                    "column_names": names, "column_encodings": encodings, "column_sizes": sizes,
                    "raw_data": {"basename": format!("shard.{k:05}.mds"), "bytes": 1u64 << 31, "hashes": {}},
                    "zip_data": null
                })
            })
            .collect();
        let json = serde_json::json!({"version": 2, "shards": entries});
        mds::Index::parse(json.to_string().as_bytes()).unwrap()
    }

    fn listing_asks(idx: mds::Index) -> Vec<Vec<usize>> {
        let store = Arc::new(Recording::default());
        let ds = MdsDataset::new(vec![(Arc::new(idx), store.clone() as Arc<dyn ShardStore>)]);
        // Every sample of the dataset, one shard after the other, then back to the first.
        let mut samples: Vec<Location> =
            (0..ds.num_samples()).filter_map(|s| ds.locate(s)).collect();
        samples.extend(ds.locate(0));
        ds.ready_sizes(&samples, Duration::ZERO);
        let asked = store.asked.lock().unwrap().clone();
        asked
    }

    #[test]
    fn a_listing_asks_for_the_headers_that_size_files_in_the_order_needed_up_to_a_byte_bound() {
        // An image and an integer label: the image's size follows from the header.
        let image_label = [("image", "bytes", None), ("label", "int", Some(8))];
        assert_eq!(
            listing_asks(index(5, 10, &image_label)),
            vec![vec![0, 1, 2, 3, 4]]
        );
        // Headers of 1,000,000 samples (4 MB each): two fit in the listing's 8 MiB.
        assert_eq!(
            listing_asks(index(5, 1_000_000, &image_label)),
            vec![vec![0, 1]]
        );
        // Two variable-size columns, or one not served as stored: no header sizes a file.
        let two = [("image", "bytes", None), ("caption", "str", None)];
        assert!(listing_asks(index(3, 10, &two)).is_empty());
        let text = [("text", "str", None), ("label", "int", Some(8))];
        assert!(listing_asks(index(3, 10, &text)).is_empty());
    }
}
