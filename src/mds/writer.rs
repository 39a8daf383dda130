//! A pure MDS writer that produces what mosaicml-streaming's `MDSWriter` produces
//! (`format/mds/writer.py`, `format/base/writer.py::Writer.write`/`JointWriter.flush_shard`),
//! byte for byte where the compressor is deterministic: the shard config is
//! `json.dumps(get_config(), sort_keys=True)`; a shard's running size starts at
//! `4 + 4 + len(config)` and each sample adds `len + 4`; a shard is flushed *before* a sample
//! that would push the size past `size_limit` (so a first sample that alone exceeds it yields a
//! 0-sample shard, as upstream); `index.json` is `{"shards": [...], "version": 2}` sorted.
//!
//! Values are passed already encoded (the column's stored bytes); [`encode`] has helpers for
//! the common encodings. Output stays in memory: this is for tests, examples and benchmarks.

use super::compression::compress;
use super::encoding::{Dtype, Encoding};
use super::error::{MdsError, Result};
use super::hash::hash_hex;
use super::index::{Column, Compression, FileRef, Index};
use super::pyjson::dumps_sorted;
use serde_json::{json, Value};
use std::collections::BTreeMap;

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

/// Builds MDS shards from samples of already encoded column values.
#[derive(Debug)]
pub struct Writer {
    columns: Vec<Column>,
    config: WriterConfig,
    config_json: String,
    samples: Vec<Vec<u8>>,
    shard_size: u64,
    files: Vec<OutputFile>,
    raw_shards: Vec<Vec<u8>>,
    entries: Vec<Value>,
}

fn werr(msg: impl Into<String>) -> MdsError {
    MdsError::Write(msg.into())
}

impl Writer {
    /// Validates the configuration and sorts the columns by name, as MDSWriter does.
    pub fn new(mut config: WriterConfig) -> Result<Writer> {
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
        let mut w = Writer {
            columns,
            config,
            config_json,
            samples: Vec::new(),
            shard_size: 0,
            files: Vec::new(),
            raw_shards: Vec::new(),
            entries: Vec::new(),
        };
        w.reset();
        Ok(w)
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

    fn reset(&mut self) {
        self.samples.clear();
        self.shard_size = 8 + self.config_json.len() as u64;
    }

    /// The stored columns, sorted by name: the order [`Writer::write`] takes values in.
    pub fn columns(&self) -> &[Column] {
        &self.columns
    }

    /// Adds one sample, given each column's stored bytes in [`Writer::columns`] order.
    pub fn write(&mut self, values: &[&[u8]]) -> Result<()> {
        if values.len() != self.columns.len() {
            return Err(werr(format!(
                "sample has {} values for {} columns",
                values.len(),
                self.columns.len()
            )));
        }
        let mut head = Vec::new();
        let mut body = Vec::new();
        for (c, v) in self.columns.iter().zip(values) {
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
                    let len = u32::try_from(v.len())
                        .map_err(|_| werr(format!("column {:?}: value over 4 GiB", c.name)))?;
                    head.extend_from_slice(&len.to_le_bytes());
                }
            }
            body.extend_from_slice(v);
        }
        head.extend_from_slice(&body);
        let size = head.len() as u64 + 4;
        if let Some(limit) = self.config.size_limit.filter(|&l| l > 0) {
            if limit < self.shard_size + size {
                self.flush()?;
            }
        }
        self.samples.push(head);
        self.shard_size += size;
        Ok(())
    }

    fn file_info(&self, basename: &str, data: &[u8]) -> Result<(FileRef, Value)> {
        let mut hashes = BTreeMap::new();
        for h in &self.config.hashes {
            hashes.insert(h.clone(), hash_hex(h, data)?);
        }
        let v = json!({"basename": basename, "bytes": data.len(), "hashes": hashes});
        Ok((
            FileRef {
                basename: basename.to_string(),
                bytes: data.len() as u64,
                hashes,
            },
            v,
        ))
    }

    fn flush(&mut self) -> Result<()> {
        let n = self.samples.len();
        let mut offsets = Vec::with_capacity(n + 1);
        let mut off = 4 + 4 * (n as u64 + 1) + self.config_json.len() as u64;
        offsets.push(off);
        for s in &self.samples {
            off += s.len() as u64;
            offsets.push(off);
        }
        if off > u64::from(u32::MAX) {
            return Err(werr("shard exceeds 4 GiB; set a smaller size_limit"));
        }
        let mut raw = Vec::with_capacity(off as usize);
        raw.extend_from_slice(&(n as u32).to_le_bytes());
        for o in offsets {
            raw.extend_from_slice(&(o as u32).to_le_bytes());
        }
        raw.extend_from_slice(self.config_json.as_bytes());
        for s in &self.samples {
            raw.extend_from_slice(s);
        }
        let raw_name = format!("shard.{:05}.mds", self.entries.len());
        let (_, raw_info) = self.file_info(&raw_name, &raw)?;
        let zip_info = match &self.config.compression {
            Some(c) => {
                let zip = compress(c, &raw)?;
                let zip_name = format!("{raw_name}.{}", c.extension());
                let (_, info) = self.file_info(&zip_name, &zip)?;
                self.files.push(OutputFile {
                    basename: zip_name,
                    data: zip,
                });
                info
            }
            None => {
                self.files.push(OutputFile {
                    basename: raw_name,
                    data: raw.clone(),
                });
                Value::Null
            }
        };
        let mut entry = Self::config_value(&self.config, &self.columns);
        if let Value::Object(m) = &mut entry {
            m.insert("samples".into(), json!(n));
            m.insert("raw_data".into(), raw_info);
            m.insert("zip_data".into(), zip_info);
        }
        self.entries.push(entry);
        self.raw_shards.push(raw);
        self.reset();
        Ok(())
    }

    /// Flushes the last shard (if it holds samples) and returns the dataset.
    pub fn finish(mut self) -> Result<WrittenDataset> {
        if !self.samples.is_empty() {
            self.flush()?;
        }
        let text = dumps_sorted(&json!({"shards": self.entries, "version": 2}));
        let index = Index::parse(text.as_bytes())?;
        Ok(WrittenDataset {
            files: self.files,
            raw_shards: self.raw_shards,
            index_json: text.into_bytes(),
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
