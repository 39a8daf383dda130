//! A pure MDS writer that produces what mosaicml-streaming's `MDSWriter` produces
//! (`format/mds/writer.py`, `format/base/writer.py::Writer.write`/`JointWriter.flush_shard`),
//! byte for byte where the compressor is deterministic: the shard config is
//! `json.dumps(get_config(), sort_keys=True)`; a shard's running size starts at
//! `4 + 4 + len(config)` and each sample adds `len + 4`; a shard is flushed *before* a sample
//! that would push the size past `size_limit` (so a first sample that alone exceeds it yields a
//! 0-sample shard, as upstream); `index.json` is `{"shards": [...], "version": 2}` sorted.
//!
//! Values are passed already encoded (the column's stored bytes); [`encode`] has helpers for
//! the common encodings. The work is split in three so a packer can stream, shard by shard,
//! in bounded memory: [`ShardBuilder`] cuts samples into raw shards (it holds one shard's
//! samples at a time), [`ShardSpec::seal`] compresses and hashes one raw shard into its stored
//! file and index entry (any thread may do it), and [`index_json`] writes the index over the
//! entries. [`Writer`] chains the three in memory, for tests, examples and benchmarks.

use super::compression::compress;
use super::encoding::{Dtype, Encoding};
use super::error::{MdsError, Result};
use super::hash::hash_hex;
use super::index::{Column, Compression, Index};
use super::pyjson::dumps_sorted;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// What to write: columns (any order; stored sorted by name), compression, hashes, size limit.
#[derive(Debug, Clone)]
pub struct WriterConfig {
    /// Column names and encodings.
    pub columns: Vec<(String, Encoding)>,
    /// Whole-shard compression, if any.
    pub compression: Option<Compression>,
    /// Hash algorithms to record, in the order given (upstream expects them sorted).
    pub hashes: Vec<String>,
    /// Shard size limit in bytes; None (or 0) puts everything in one shard. Upstream's default
    /// is `1 << 26`.
    pub size_limit: Option<u64>,
}

/// One output file: its path relative to the dataset folder and its bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutputFile {
    /// Relative path, e.g. `shard.00000.mds.zstd`.
    pub basename: String,
    /// File contents.
    pub data: Vec<u8>,
}

/// A finished dataset: the files to store and the `index.json` bytes.
#[derive(Debug, Clone)]
pub struct WrittenDataset {
    /// Shard files as stored (compressed ones when compressing), in shard order.
    pub files: Vec<OutputFile>,
    /// The raw shard bytes (equal to `files` when uncompressed), in shard order.
    pub raw_shards: Vec<Vec<u8>>,
    /// `index.json` as MDSWriter writes it.
    pub index_json: Vec<u8>,
    /// The same index, parsed.
    pub index: Index,
}

fn werr(msg: impl Into<String>) -> MdsError {
    MdsError::Write(msg.into())
}

/// The validated configuration shared by everything that writes one dataset: the sorted
/// columns and the shard config JSON every shard repeats. Cheap to share across threads.
#[derive(Debug)]
pub struct ShardSpec {
    columns: Vec<Column>,
    config: WriterConfig,
    config_json: String,
}

impl ShardSpec {
    /// Validates the configuration and sorts the columns by name, as MDSWriter does.
    pub fn new(mut config: WriterConfig) -> Result<ShardSpec> {
        config.columns.sort_by(|a, b| a.0.cmp(&b.0));
        if config.columns.windows(2).any(|w| w[0].0 == w[1].0) {
            return Err(werr("duplicate column name"));
        }
        for h in &config.hashes {
            hash_hex(h, b"")?;
        }
        if let Some(limit) = config.size_limit {
            if limit >= 1 << 32 {
                return Err(werr("size_limit must be below 2^32 (offsets are u32)"));
            }
        }
        let columns: Vec<Column> = config
            .columns
            .iter()
            .map(|(name, enc)| {
                let size = enc
                    .fixed_size()
                    .map(u32::try_from)
                    .transpose()
                    .map_err(|_| werr(format!("column {name:?}: fixed size exceeds u32")))?;
                Ok(Column {
                    name: name.clone(),
                    encoding: enc.clone(),
                    size,
                })
            })
            .collect::<Result<_>>()?;
        let config_json = dumps_sorted(&Self::config_value(&config, &columns));
        Ok(ShardSpec {
            columns,
            config,
            config_json,
        })
    }

    fn config_value(config: &WriterConfig, columns: &[Column]) -> Value {
        json!({
            "column_encodings": columns.iter().map(|c| c.encoding.to_string()).collect::<Vec<_>>(),
            "column_names": columns.iter().map(|c| c.name.clone()).collect::<Vec<_>>(),
            "column_sizes": columns.iter().map(|c| c.size).collect::<Vec<_>>(),
            "compression": config.compression.map(|c| c.to_string()),
            "format": "mds",
            "hashes": config.hashes,
            "size_limit": config.size_limit,
            "version": 2,
        })
    }

    /// The stored columns, sorted by name: the order samples give their values in.
    pub fn columns(&self) -> &[Column] {
        &self.columns
    }

    /// The configuration, with its columns sorted by name.
    pub fn config(&self) -> &WriterConfig {
        &self.config
    }

    fn file_info(&self, basename: &str, data: &[u8]) -> Result<Value> {
        let mut hashes = BTreeMap::new();
        for h in &self.config.hashes {
            hashes.insert(h.clone(), hash_hex(h, data)?);
        }
        Ok(json!({"basename": basename, "bytes": data.len(), "hashes": hashes}))
    }

    /// Compresses (if configured) and hashes one raw shard: the file to store and the shard's
    /// `index.json` entry. Depends on nothing but the shard, so shards seal in parallel.
    pub fn seal(&self, shard: RawShard) -> Result<SealedShard> {
        let raw_name = format!("shard.{:05}.mds", shard.number);
        let raw_info = self.file_info(&raw_name, shard.bytes())?;
        let (basename, zip, zip_info) = match &self.config.compression {
            Some(c) => {
                let zip = compress(c, shard.bytes())?;
                let zip_name = format!("{raw_name}.{}", c.extension());
                let info = self.file_info(&zip_name, &zip)?;
                (zip_name, Some(zip), info)
            }
            None => (raw_name, None, Value::Null),
        };
        let mut entry = Self::config_value(&self.config, &self.columns);
        if let Value::Object(m) = &mut entry {
            m.insert("samples".into(), json!(shard.samples));
            m.insert("raw_data".into(), raw_info);
            m.insert("zip_data".into(), zip_info);
        }
        Ok(SealedShard {
            number: shard.number,
            samples: shard.samples,
            basename,
            raw: shard,
            zip,
            entry,
        })
    }
}

/// One shard's `index.json` entry, as MDSWriter writes it (JSON is the format itself: the
/// entry is written key-sorted by [`index_json`] and read back by [`crate::mds::Index`]).
pub type IndexEntry = Value;

/// One raw (uncompressed) shard, cut by [`ShardBuilder`]: the bytes `buf[start..]` of the
/// buffer it was built in (the builder writes the samples first and the header in front of
/// them once their count is known; see [`ShardBuilder`]).
#[derive(Debug)]
pub struct RawShard {
    /// Shard number: its basename is `shard.{number:05}.mds`.
    pub number: usize,
    /// Samples it holds.
    pub samples: usize,
    buf: Vec<u8>,
    start: usize,
}

impl RawShard {
    /// The shard file's bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.buf[self.start..]
    }

    /// The shard file's bytes as a vector of their own.
    pub fn into_vec(mut self) -> Vec<u8> {
        self.buf.drain(..self.start);
        self.buf
    }

    /// The whole buffer the shard was built in, to build another one in ([`ShardBuffers`]).
    pub fn into_buffer(self) -> Vec<u8> {
        self.buf
    }
}

impl AsRef<[u8]> for RawShard {
    fn as_ref(&self) -> &[u8] {
        self.bytes()
    }
}

/// One shard ready to store: its file name, the raw shard, the compressed bytes when
/// configured, and its index entry.
#[derive(Debug)]
pub struct SealedShard {
    /// Shard number.
    pub number: usize,
    /// Samples it holds.
    pub samples: usize,
    /// The stored file's name (`shard.NNNNN.mds`, with the compression's extension when
    /// compressing).
    pub basename: String,
    /// The raw shard.
    pub raw: RawShard,
    /// The compressed shard (the stored file) when compressing; None when the raw shard is
    /// the stored file.
    pub zip: Option<Vec<u8>>,
    /// The shard's `index.json` entry.
    pub entry: IndexEntry,
}

impl SealedShard {
    /// The raw shard bytes.
    pub fn raw_bytes(&self) -> &[u8] {
        self.raw.bytes()
    }

    /// The bytes of the file to store under [`SealedShard::basename`].
    pub fn stored(&self) -> &[u8] {
        self.zip.as_deref().unwrap_or(self.raw.bytes())
    }
}

/// `index.json` over the shard entries, in shard order, as MDSWriter writes it.
pub fn index_json(entries: &[IndexEntry]) -> Vec<u8> {
    dumps_sorted(&json!({"shards": entries, "version": 2})).into_bytes()
}

/// Spare shard buffers shared by a [`ShardBuilder`] and whoever stores its shards: a stored
/// shard's buffer comes back ([`ShardBuffers::give`]) and the builder fills a later shard in
/// it, so a long pack does not map, fault in and zero fresh pages for every shard. Holds at
/// most the number of buffers it was made for; a buffer given beyond that is freed.
#[derive(Debug, Clone)]
pub struct ShardBuffers {
    spare: Arc<Mutex<Vec<Vec<u8>>>>,
    keep: usize,
}

impl ShardBuffers {
    /// A pool that keeps up to `keep` spare buffers.
    pub fn new(keep: usize) -> ShardBuffers {
        ShardBuffers {
            spare: Arc::new(Mutex::new(Vec::new())),
            keep,
        }
    }

    /// Gives a buffer back for a later shard.
    pub fn give(&self, mut buf: Vec<u8>) {
        buf.clear();
        let mut spare = self.spare.lock().unwrap_or_else(|e| e.into_inner());
        if spare.len() < self.keep {
            spare.push(buf);
        }
    }

    fn take(&self) -> Option<Vec<u8>> {
        self.spare.lock().unwrap_or_else(|e| e.into_inner()).pop()
    }
}

/// A new shard buffer at least this large asks for transparent huge pages.
const HUGE_PAGES_AT_LEAST: usize = 4 << 20;

/// Asks the kernel to back a new, large shard buffer with transparent huge pages (Linux, where
/// they are enabled on request): a 64 MiB shard then takes 32 page faults to fill instead of
/// 16,384, each with its own accounting. Only advice: refused, the buffer keeps small pages.
fn advise_huge_pages(buf: &Vec<u8>) {
    #[cfg(target_os = "linux")]
    {
        const PAGE: usize = 4096;
        let cap = buf.capacity();
        if cap < HUGE_PAGES_AT_LEAST {
            return;
        }
        let start = buf.as_ptr() as usize;
        let first = start.next_multiple_of(PAGE);
        let end = (start + cap) / PAGE * PAGE;
        if end > first {
            // SAFETY: advice on whole pages inside the buffer's own allocation (which lives
            // until the buffer is freed); it moves and changes no byte.
            unsafe { libc::madvise(first as *mut libc::c_void, end - first, libc::MADV_HUGEPAGE) };
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = buf;
}

/// Samples a shard's header is first sized for when nothing better is known.
const FIRST_GUESS: usize = 1024;
/// Bytes a new shard buffer is made with at most (it grows past that if it has to).
const MAX_FIRST_CAPACITY: u64 = 256 << 20;

/// Cuts samples into raw shards exactly where MDSWriter cuts them, holding only the current
/// shard's samples in memory.
///
/// Each shard is built in one buffer, in place: the samples are written after room left for
/// the header (the sample count, the offsets and the config), sized from the previous shard's
/// sample count; when the shard is cut the header is written just in front of the samples, so
/// the shard is the tail of the buffer and no byte is copied again (a shard with more samples
/// than the room was made for moves its samples once). Buffers come from [`ShardBuffers`]
/// when one is given.
#[derive(Debug)]
pub struct ShardBuilder {
    spec: Arc<ShardSpec>,
    /// The current shard: `reserved` bytes of room for its header, then its samples.
    buf: Vec<u8>,
    reserved: usize,
    /// End of each sample, counted from `reserved`.
    ends: Vec<u64>,
    shard_size: u64,
    next_number: usize,
    /// Samples of the last shard cut (the guess for the next one's header room).
    last_samples: usize,
    buffers: Option<ShardBuffers>,
}

impl ShardBuilder {
    /// A builder whose first shard is `shard.{first_number:05}.mds`.
    pub fn new(spec: Arc<ShardSpec>, first_number: usize) -> ShardBuilder {
        let shard_size = 8 + spec.config_json.len() as u64;
        ShardBuilder {
            spec,
            buf: Vec::new(),
            reserved: 0,
            ends: Vec::new(),
            shard_size,
            next_number: first_number,
            last_samples: 0,
            buffers: None,
        }
    }

    /// Builds shards in buffers taken from (and meant to be given back to) `buffers`.
    pub fn with_buffers(mut self, buffers: ShardBuffers) -> ShardBuilder {
        self.buffers = Some(buffers);
        self
    }

    /// The shared configuration.
    pub fn spec(&self) -> &Arc<ShardSpec> {
        &self.spec
    }

    /// Samples in the shard being filled.
    pub fn pending_samples(&self) -> usize {
        self.ends.len()
    }

    /// Bytes of a shard header for `n` samples.
    fn header_len(&self, n: usize) -> usize {
        4 + 4 * (n + 1) + self.spec.config_json.len()
    }

    /// Makes room for the header of the shard a first sample of `size` bytes starts.
    fn start_shard(&mut self, size: u64) {
        let guess = match (self.last_samples, self.spec.config.size_limit) {
            (0, Some(limit)) if limit > 0 => (limit / size.max(1)).min(1 << 24) as usize,
            (0, _) => FIRST_GUESS,
            (n, _) => n + n / 8,
        };
        self.reserved = self.header_len(guess + 16);
        if self.buf.capacity() == 0 {
            if let Some(b) = self.buffers.as_ref().and_then(ShardBuffers::take) {
                self.buf = b;
            } else if let Some(limit) = self.spec.config.size_limit.filter(|&l| l > 0) {
                let want = (limit + self.reserved as u64).min(MAX_FIRST_CAPACITY);
                self.buf = Vec::with_capacity(want as usize);
                advise_huge_pages(&self.buf);
            }
        }
        self.buf.clear();
        self.buf.resize(self.reserved, 0);
    }

    /// Adds one sample, given each column's stored bytes in [`ShardSpec::columns`] order.
    /// Returns the shard this sample closed (MDSWriter flushes *before* a sample that would
    /// overflow the size limit), if any.
    pub fn write(&mut self, values: &[&[u8]]) -> Result<Option<RawShard>> {
        let spec = Arc::clone(&self.spec);
        let columns = &spec.columns;
        if values.len() != columns.len() {
            return Err(werr(format!(
                "sample has {} values for {} columns",
                values.len(),
                columns.len()
            )));
        }
        let mut size = 4u64;
        for (c, v) in columns.iter().zip(values) {
            match c.size {
                Some(s) if s as usize != v.len() => {
                    return Err(werr(format!(
                        "column {:?} ({}) takes {s} bytes, got {}",
                        c.name,
                        c.encoding,
                        v.len()
                    )))
                }
                Some(_) => {}
                None => {
                    u32::try_from(v.len())
                        .map_err(|_| werr(format!("column {:?}: value over 4 GiB", c.name)))?;
                    size += 4;
                }
            }
            size += v.len() as u64;
        }
        let mut closed = None;
        if let Some(limit) = spec.config.size_limit.filter(|&l| l > 0) {
            if limit < self.shard_size + size {
                closed = Some(self.cut()?);
            }
        }
        if self.ends.is_empty() {
            self.start_shard(size);
        }
        for (c, v) in columns.iter().zip(values) {
            if c.size.is_none() {
                self.buf.extend_from_slice(&(v.len() as u32).to_le_bytes());
            }
        }
        for v in values {
            self.buf.extend_from_slice(v);
        }
        self.ends.push((self.buf.len() - self.reserved) as u64);
        self.shard_size += size;
        Ok(closed)
    }

    /// Closes the current shard (even an empty one) and starts the next.
    fn cut(&mut self) -> Result<RawShard> {
        let n = self.ends.len();
        if n == 0 {
            // An empty shard (MDSWriter flushes one before a first sample over the limit).
            self.buf.clear();
            self.reserved = 0;
        }
        let head = self.header_len(n);
        let body = self.buf.len() - self.reserved;
        let total = (head + body) as u64;
        if total > u64::from(u32::MAX) {
            return Err(werr("shard exceeds 4 GiB; set a smaller size_limit"));
        }
        let start = match self.reserved.checked_sub(head) {
            Some(start) => start,
            None => {
                // More samples than the room was made for: move them behind the header.
                let (from, to) = (self.reserved, self.buf.len());
                self.buf.resize(head + body, 0);
                self.buf.copy_within(from..to, head);
                0
            }
        };
        let base = head as u32;
        let header = &mut self.buf[start..start + head];
        let (count, rest) = header.split_at_mut(4);
        count.copy_from_slice(&(n as u32).to_le_bytes());
        let (offsets, config) = rest.split_at_mut(4 * (n + 1));
        let ends = std::iter::once(0).chain(self.ends.iter().copied());
        for (slot, end) in offsets.chunks_exact_mut(4).zip(ends) {
            slot.copy_from_slice(&(base + end as u32).to_le_bytes());
        }
        config.copy_from_slice(self.spec.config_json.as_bytes());
        let shard = RawShard {
            number: self.next_number,
            samples: n,
            buf: std::mem::take(&mut self.buf),
            start,
        };
        self.next_number += 1;
        self.last_samples = n;
        self.ends.clear();
        self.reserved = 0;
        self.shard_size = 8 + self.spec.config_json.len() as u64;
        Ok(shard)
    }

    /// Closes the last shard if it holds samples.
    pub fn finish(mut self) -> Result<Option<RawShard>> {
        if self.ends.is_empty() {
            Ok(None)
        } else {
            self.cut().map(Some)
        }
    }
}

/// Builds MDS shards from samples of already encoded column values, all in memory.
#[derive(Debug)]
pub struct Writer {
    builder: ShardBuilder,
    files: Vec<OutputFile>,
    raw_shards: Vec<Vec<u8>>,
    entries: Vec<Value>,
}

impl Writer {
    /// Validates the configuration and sorts the columns by name, as MDSWriter does.
    pub fn new(config: WriterConfig) -> Result<Writer> {
        let spec = Arc::new(ShardSpec::new(config)?);
        Ok(Writer {
            builder: ShardBuilder::new(spec, 0),
            files: Vec::new(),
            raw_shards: Vec::new(),
            entries: Vec::new(),
        })
    }

    /// The stored columns, sorted by name: the order [`Writer::write`] takes values in.
    pub fn columns(&self) -> &[Column] {
        self.builder.spec.columns()
    }

    /// Adds one sample, given each column's stored bytes in [`Writer::columns`] order.
    pub fn write(&mut self, values: &[&[u8]]) -> Result<()> {
        if let Some(shard) = self.builder.write(values)? {
            self.keep(shard)?;
        }
        Ok(())
    }

    fn keep(&mut self, shard: RawShard) -> Result<()> {
        let SealedShard {
            basename,
            raw,
            zip,
            entry,
            ..
        } = self.builder.spec.seal(shard)?;
        let raw = raw.into_vec();
        let data = zip.unwrap_or_else(|| raw.clone());
        self.raw_shards.push(raw);
        self.files.push(OutputFile { basename, data });
        self.entries.push(entry);
        Ok(())
    }

    /// Flushes the last shard (if it holds samples) and returns the dataset.
    pub fn finish(mut self) -> Result<WrittenDataset> {
        let spec = self.builder.spec.clone();
        let last = std::mem::replace(&mut self.builder, ShardBuilder::new(spec, 0)).finish()?;
        if let Some(shard) = last {
            self.keep(shard)?;
        }
        let bytes = index_json(&self.entries);
        let index = Index::parse(&bytes)?;
        Ok(WrittenDataset {
            files: self.files,
            raw_shards: self.raw_shards,
            index_json: bytes,
            index,
        })
    }
}

/// Encoders from plain values to MDS column bytes, for the encodings tests and examples use.
pub mod encode {
    use super::*;

    /// `int`: i64 little-endian.
    pub fn int(v: i64) -> Vec<u8> {
        v.to_le_bytes().to_vec()
    }

    /// `ndarray[:dtype[:shape]]`: `data` holds the C-order little-endian values. Stores the
    /// dtype code and shape header unless the encoding fixes them, as `NDArray.encode` does.
    pub fn ndarray(enc: &Encoding, dtype: Dtype, shape: &[u64], data: &[u8]) -> Result<Vec<u8>> {
        let Encoding::NdArray {
            dtype: fixed_dtype,
            shape: fixed_shape,
        } = enc
        else {
            return Err(werr(format!("{enc} is not an ndarray encoding")));
        };
        let count = shape.iter().product::<u64>();
        if shape.is_empty() || count == 0 || shape.len() >= 64 {
            return Err(werr("ndarray needs 1..=63 dimensions, all >= 1"));
        }
        if count * dtype.itemsize() as u64 != data.len() as u64 {
            return Err(werr("ndarray data length does not match its shape"));
        }
        let mut out = Vec::new();
        match fixed_dtype {
            Some(d) if *d != dtype => return Err(werr("ndarray dtype differs from the encoding")),
            Some(_) => {}
            None => out.push(dtype.wire_code()),
        }
        match fixed_shape {
            Some(s) if s.as_slice() != shape => {
                return Err(werr("ndarray shape differs from the encoding"))
            }
            Some(_) => {}
            None => {
                let max = shape.iter().copied().max().unwrap_or(0);
                let w: u8 = match max {
                    m if m < 1 << 8 => 0,
                    m if m < 1 << 16 => 1,
                    m if m < 1 << 32 => 2,
                    _ => 3,
                };
                out.push(((shape.len() as u8) << 2) | w);
                for &d in shape {
                    out.extend_from_slice(&d.to_le_bytes()[..1 << w]);
                }
            }
        }
        out.extend_from_slice(data);
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Shards as MDSWriter lays them out, assembled the plain way: the cut rule, then the
    /// count, the offsets, the config and the samples one after the other.
    fn plain_shards(spec: &ShardSpec, samples: &[Vec<Vec<u8>>]) -> Vec<Vec<u8>> {
        let config = spec.config_json.as_bytes();
        let limit = spec.config.size_limit.unwrap_or(u64::MAX);
        let mut shards: Vec<Vec<Vec<u8>>> = vec![Vec::new()];
        let mut size = 8 + config.len() as u64;
        for values in samples {
            let mut sample = Vec::new();
            for (c, v) in spec.columns.iter().zip(values) {
                if c.size.is_none() {
                    sample.extend_from_slice(&(v.len() as u32).to_le_bytes());
                }
            }
            values.iter().for_each(|v| sample.extend_from_slice(v));
            let s = 4 + sample.len() as u64;
            if limit < size + s {
                shards.push(Vec::new());
                size = 8 + config.len() as u64;
            }
            size += s;
            shards.last_mut().unwrap().push(sample);
        }
        shards
            .into_iter()
            .map(|samples| {
                let n = samples.len();
                let base = (4 + 4 * (n + 1) + config.len()) as u32;
                let mut out = (n as u32).to_le_bytes().to_vec();
                let mut at = base;
                out.extend_from_slice(&at.to_le_bytes());
                for s in &samples {
                    at += s.len() as u32;
                    out.extend_from_slice(&at.to_le_bytes());
                }
                out.extend_from_slice(config);
                samples.iter().for_each(|s| out.extend_from_slice(s));
                out
            })
            .collect()
    }

    #[test]
    fn shards_built_in_place_are_the_plain_layout() {
        let spec = Arc::new(
            ShardSpec::new(WriterConfig {
                columns: vec![("b".into(), Encoding::Bytes), ("i".into(), Encoding::Int)],
                compression: None,
                hashes: vec![],
                size_limit: Some(20_000),
            })
            .unwrap(),
        );
        // Large samples then many small ones (more samples than the header room was made
        // for), then large again (fewer) with one over the limit; and a first sample over the
        // limit (an empty shard before it).
        let mixed: Vec<usize> = (0..6)
            .map(|_| 3000)
            .chain((0..900).map(|i| i % 7))
            .chain([5000, 25_000, 9000, 1])
            .chain((0..40).map(|i| 400 + i))
            .collect();
        for sizes in [mixed, vec![25_000, 10, 10]] {
            check_in_place(&spec, &sizes);
        }
    }

    fn check_in_place(spec: &Arc<ShardSpec>, sizes: &[usize]) {
        let samples: Vec<Vec<Vec<u8>>> = sizes
            .iter()
            .enumerate()
            .map(|(k, &len)| vec![vec![k as u8; len], (k as i64).to_le_bytes().to_vec()])
            .collect();
        let want = plain_shards(spec, &samples);
        for pool in [None, Some(ShardBuffers::new(2))] {
            let mut b = ShardBuilder::new(Arc::clone(spec), 0);
            if let Some(p) = &pool {
                b = b.with_buffers(p.clone());
            }
            let mut got = Vec::new();
            for values in &samples {
                let refs: Vec<&[u8]> = values.iter().map(Vec::as_slice).collect();
                if let Some(shard) = b.write(&refs).unwrap() {
                    got.push(shard.bytes().to_vec());
                    // Buffers come back dirty; the next shard must not show old bytes.
                    if let Some(p) = &pool {
                        let mut buf = shard.into_buffer();
                        buf.iter_mut().for_each(|x| *x = 0xee);
                        p.give(buf);
                    }
                }
            }
            got.extend(b.finish().unwrap().map(|s| s.into_vec()));
            assert_eq!(got.len(), want.len());
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                assert!(g == w, "shard {i} differs (pool: {})", pool.is_some());
            }
        }
    }
}
