//! `index.json`: the dataset's table of shards, parsed and checked once so that everything
//! after it can trust the numbers.
//!
//! Rules (MDS-SPEC §1): `version` must be 2 at the top and in every shard; only `"mds"` shards
//! are read (split formats csv/tsv/xsv/json are refused by name); basenames are relative paths
//! (merged indexes write `"3/shard.00000.mds"`) and anything that could leave the dataset folder
//! is refused; 0-sample shards are kept, since writers emit them. Global sample ids number the
//! shards' samples in index order, so [`Index::locate`] is a binary search over running totals.

use super::encoding::Encoding;
use super::error::{MdsError, Result};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

/// The file name errors about the index carry.
pub const INDEX_FILE: &str = "index.json";

/// A compression algorithm of whole shards (MDS-SPEC §4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Algo {
    /// Brotli (`br`).
    Br,
    /// bzip2 (`bz2`).
    Bz2,
    /// gzip (`gz`).
    Gz,
    /// Snappy raw block format (`snappy`).
    Snappy,
    /// Zstandard (`zstd`).
    Zstd,
}

impl Algo {
    /// The name used in the spec string and as the file extension.
    pub fn name(self) -> &'static str {
        match self {
            Algo::Br => "br",
            Algo::Bz2 => "bz2",
            Algo::Gz => "gz",
            Algo::Snappy => "snappy",
            Algo::Zstd => "zstd",
        }
    }
}

/// A shard's compression: `algo` or `algo:level`, as written in `index.json`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Compression {
    /// The algorithm.
    pub algo: Algo,
    /// The level, when the spec string names one.
    pub level: Option<i32>,
}

impl Compression {
    /// The file extension of compressed shards (`"zstd"` for `shard.00000.mds.zstd`).
    pub fn extension(&self) -> &'static str {
        self.algo.name()
    }
}

impl FromStr for Compression {
    type Err = MdsError;

    fn from_str(s: &str) -> Result<Compression> {
        let bad = || MdsError::UnknownCompression(s.to_string());
        let (name, level) = match s.split_once(':') {
            Some((n, l)) => (n, Some(l.parse::<i32>().map_err(|_| bad())?)),
            None => (s, None),
        };
        let algo = match name {
            "br" => Algo::Br,
            "bz2" => Algo::Bz2,
            "gz" => Algo::Gz,
            "snappy" => Algo::Snappy,
            "zstd" => Algo::Zstd,
            _ => return Err(bad()),
        };
        if algo == Algo::Snappy && level.is_some() {
            return Err(bad());
        }
        Ok(Compression { algo, level })
    }
}

impl fmt::Display for Compression {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.level {
            Some(l) => write!(f, "{}:{l}", self.algo.name()),
            None => f.write_str(self.algo.name()),
        }
    }
}

/// One file of a shard as `index.json` describes it (`raw_data` or `zip_data`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileRef {
    /// Path relative to the dataset folder, validated: no `..`, no absolute path, no `\`,
    /// no empty or `.` components.
    pub basename: String,
    /// Length of the file in bytes.
    pub bytes: u64,
    /// Hex digests by algorithm name (`"sha1" -> "d1fd..."`).
    pub hashes: BTreeMap<String, String>,
}

/// One column of a shard: name, encoding and fixed size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Column {
    /// The column name (file names use it: `00000042.<name>.<ext>`).
    pub name: String,
    /// How its bytes are encoded.
    pub encoding: Encoding,
    /// Fixed byte size, or None when each sample stores the length.
    pub size: Option<u32>,
}

/// One MDS shard entry of `index.json`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardEntry {
    /// Samples in the shard (may be 0).
    pub samples: u32,
    /// The uncompressed shard file.
    pub raw: FileRef,
    /// The compressed file, when the shard is stored compressed.
    pub zip: Option<FileRef>,
    /// The compression of `zip`.
    pub compression: Option<Compression>,
    /// Columns, in stored order (sorted by name by the writer).
    pub columns: Vec<Column>,
    /// The writer's size limit in bytes, if it had one.
    pub size_limit: Option<u64>,
    /// Hash algorithms the writer applied (the entry's `hashes` list).
    pub hash_algos: Vec<String>,
}

impl ShardEntry {
    /// The file to download: the compressed one when there is one, else the raw one.
    pub fn stored_file(&self) -> &FileRef {
        self.zip.as_ref().unwrap_or(&self.raw)
    }
}

/// A parsed and validated `index.json`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Index {
    shards: Vec<ShardEntry>,
    /// `ends[k]` = samples in shards 0..=k.
    ends: Vec<u64>,
}

#[derive(Deserialize)]
struct RawIndex {
    version: serde_json::Value,
    shards: Vec<serde_json::Value>,
}

#[derive(Deserialize)]
struct RawFile {
    basename: String,
    bytes: u64,
    #[serde(default)]
    hashes: BTreeMap<String, String>,
}

#[derive(Deserialize)]
struct RawMdsShard {
    samples: u64,
    raw_data: RawFile,
    zip_data: Option<RawFile>,
    compression: Option<String>,
    #[serde(default)]
    hashes: Vec<String>,
    size_limit: Option<u64>,
    column_names: Vec<String>,
    column_encodings: Vec<String>,
    column_sizes: Vec<Option<u64>>,
}

/// Checks that a basename is a relative path that stays inside the dataset folder.
pub fn validate_basename(shard: usize, basename: &str) -> Result<()> {
    let bad = |reason| {
        Err(MdsError::BadBasename {
            shard,
            basename: basename.to_string(),
            reason,
        })
    };
    if basename.is_empty() {
        return bad("empty");
    }
    if basename.contains('\\') {
        return bad("contains a backslash");
    }
    if basename.contains('\0') {
        return bad("contains a NUL byte");
    }
    if basename.starts_with('/') {
        return bad("absolute path");
    }
    for part in basename.split('/') {
        match part {
            "" => return bad("empty path component"),
            "." => return bad("'.' path component"),
            ".." => return bad("'..' path component"),
            _ => {}
        }
    }
    Ok(())
}

/// Python compares `version != 2`, so `2.0` passes too.
fn check_version(v: &serde_json::Value, where_: String) -> Result<()> {
    if v.as_u64() == Some(2) || v.as_f64() == Some(2.0) {
        Ok(())
    } else {
        Err(MdsError::Version {
            found: v.to_string(),
            where_,
        })
    }
}

/// Longest column name accepted: the name becomes part of a file name
/// (`NNNNNNNN.COLUMN.EXT`), which Linux limits to 255 bytes.
const MAX_COLUMN_NAME: usize = 200;

/// Refuses column names that cannot be part of a file name in the mount tree.
fn check_column_name(name: &str) -> std::result::Result<(), &'static str> {
    if name.is_empty() {
        Err("empty column name")
    } else if name.len() > MAX_COLUMN_NAME {
        Err("column name longer than 200 bytes")
    } else if name.contains('/') || name.contains('\0') {
        Err("column name contains '/' or NUL")
    } else {
        Ok(())
    }
}

fn file_ref(shard: usize, raw: RawFile) -> Result<FileRef> {
    validate_basename(shard, &raw.basename)?;
    Ok(FileRef {
        basename: raw.basename,
        bytes: raw.bytes,
        hashes: raw.hashes,
    })
}

fn parse_shard(i: usize, value: serde_json::Value) -> Result<ShardEntry> {
    let index_err = |msg: String| MdsError::Index(format!("shard {i}: {msg}"));
    let obj = value
        .as_object()
        .ok_or_else(|| index_err("not a JSON object".into()))?;
    match obj.get("format").and_then(|f| f.as_str()) {
        Some("mds") => {}
        Some(other) => {
            return Err(MdsError::UnsupportedFormat {
                shard: i,
                format: other.to_string(),
            })
        }
        None => return Err(index_err("missing \"format\"".into())),
    }
    match obj.get("version") {
        Some(v) => check_version(v, format!(" in shard {i}"))?,
        None => return Err(index_err("missing \"version\"".into())),
    }
    let raw: RawMdsShard = serde_json::from_value(value).map_err(|e| index_err(format!("{e}")))?;
    let samples = u32::try_from(raw.samples)
        .map_err(|_| index_err(format!("{} samples exceed the u32 range", raw.samples)))?;
    let n = raw.column_names.len();
    if raw.column_encodings.len() != n || raw.column_sizes.len() != n {
        return Err(index_err(format!(
            "{} column_names, {} column_encodings and {} column_sizes",
            n,
            raw.column_encodings.len(),
            raw.column_sizes.len()
        )));
    }
    let mut columns = Vec::with_capacity(n);
    for ((name, enc), size) in raw
        .column_names
        .into_iter()
        .zip(raw.column_encodings)
        .zip(raw.column_sizes)
    {
        check_column_name(&name).map_err(|why| index_err(format!("column {name:?}: {why}")))?;
        let encoding: Encoding = enc
            .parse()
            .map_err(|e| index_err(format!("column {name:?}: {e}")))?;
        if size != encoding.fixed_size() {
            return Err(index_err(format!(
                "column {name:?}: size {size:?} does not match encoding {encoding} (expects {:?})",
                encoding.fixed_size()
            )));
        }
        let size = size
            .map(u32::try_from)
            .transpose()
            .map_err(|_| index_err(format!("column {name:?}: fixed size exceeds u32")))?;
        columns.push(Column {
            name,
            encoding,
            size,
        });
    }
    let mut names: Vec<&str> = columns.iter().map(|c| c.name.as_str()).collect();
    names.sort_unstable();
    if names.windows(2).any(|w| w[0] == w[1]) {
        return Err(index_err("duplicate column name".into()));
    }
    let compression = raw
        .compression
        .as_deref()
        .map(str::parse::<Compression>)
        .transpose()
        .map_err(|e| index_err(format!("{e}")))?;
    let zip = raw.zip_data.map(|z| file_ref(i, z)).transpose()?;
    if compression.is_some() != zip.is_some() {
        return Err(index_err(
            "compression and zip_data must be both set or both null".into(),
        ));
    }
    // Sample offsets are u32 and the last one is the file length, so a raw shard
    // cannot be larger; refusing it here keeps later size sums from overflowing.
    if raw.raw_data.bytes > u64::from(u32::MAX) {
        return Err(index_err(format!(
            "raw_data.bytes {} exceeds the u32 offsets of an MDS shard",
            raw.raw_data.bytes
        )));
    }
    if let Some(z) = &zip {
        if z.bytes > u64::from(u32::MAX) * 2 {
            return Err(index_err(format!(
                "zip_data.bytes {} is larger than any compressed MDS shard can be",
                z.bytes
            )));
        }
    }
    Ok(ShardEntry {
        samples,
        raw: file_ref(i, raw.raw_data)?,
        zip,
        compression,
        columns,
        size_limit: raw.size_limit,
        hash_algos: raw.hashes,
    })
}

impl Index {
    /// Parses and validates `index.json` bytes; errors name `index.json`.
    pub fn parse(bytes: &[u8]) -> Result<Index> {
        Self::parse_inner(bytes).map_err(|e| e.in_file(INDEX_FILE))
    }

    fn parse_inner(bytes: &[u8]) -> Result<Index> {
        let first = bytes.iter().find(|b| !b.is_ascii_whitespace());
        if matches!(first, Some(b) if *b != b'{') {
            // Valid JSON of another shape would otherwise be described by our own type names.
            return Err(MdsError::Index(
                "not a JSON object (an index.json is {\"version\": 2, \"shards\": [...]})".into(),
            ));
        }
        let raw: RawIndex = serde_json::from_slice(bytes)?;
        check_version(&raw.version, String::new())?;
        let shards = raw
            .shards
            .into_iter()
            .enumerate()
            .map(|(i, v)| parse_shard(i, v))
            .collect::<Result<Vec<_>>>()?;
        Ok(Index::from_shards(shards))
    }

    /// Builds an index from already validated entries (used by the writer).
    pub fn from_shards(shards: Vec<ShardEntry>) -> Index {
        let mut total = 0u64;
        let ends = shards
            .iter()
            .map(|s| {
                total += u64::from(s.samples);
                total
            })
            .collect();
        Index { shards, ends }
    }

    /// The shard entries, in index order.
    pub fn shards(&self) -> &[ShardEntry] {
        &self.shards
    }

    /// Total samples over all shards.
    pub fn num_samples(&self) -> u64 {
        self.ends.last().copied().unwrap_or(0)
    }

    /// Samples per shard, in index order (what the sample plan needs).
    pub fn shard_samples(&self) -> Vec<u64> {
        self.shards.iter().map(|s| u64::from(s.samples)).collect()
    }

    /// Global id of the first sample of shard `shard`.
    pub fn shard_start(&self, shard: usize) -> Option<u64> {
        let end = *self.ends.get(shard)?;
        Some(end - u64::from(self.shards[shard].samples))
    }

    /// The shard holding global sample `global` and its index there; None past the end.
    /// O(log shards); 0-sample shards are never returned.
    pub fn locate(&self, global: u64) -> Option<(usize, u32)> {
        let shard = self.ends.partition_point(|&end| end <= global);
        let end = *self.ends.get(shard)?;
        let start = end - u64::from(self.shards[shard].samples);
        u32::try_from(global - start).ok().map(|i| (shard, i))
    }

    /// The columns of the first shard (every writer gives all its shards the same columns).
    pub fn columns(&self) -> &[Column] {
        self.shards.first().map(|s| &s.columns[..]).unwrap_or(&[])
    }

    /// True when every shard has the same columns as the first.
    pub fn uniform_columns(&self) -> bool {
        self.shards.iter().all(|s| s.columns == self.columns())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shard_json(basename: &str, samples: u64) -> String {
        format!(
            r#"{{"column_encodings":["int"],"column_names":["id"],"column_sizes":[8],"compression":null,"format":"mds","hashes":[],"raw_data":{{"basename":"{basename}","bytes":10,"hashes":{{}}}},"samples":{samples},"size_limit":null,"version":2,"zip_data":null}}"#
        )
    }

    fn index_json(shards: &[String]) -> String {
        format!(r#"{{"shards":[{}],"version":2}}"#, shards.join(","))
    }

    #[test]
    fn locate_skips_empty_shards() {
        let idx = Index::parse(
            index_json(&[
                shard_json("a", 0),
                shard_json("b", 3),
                shard_json("c", 0),
                shard_json("d", 2),
            ])
            .as_bytes(),
        )
        .unwrap();
        assert_eq!(idx.num_samples(), 5);
        let got: Vec<_> = (0..6).map(|g| idx.locate(g)).collect();
        assert_eq!(
            got,
            vec![
                Some((1, 0)),
                Some((1, 1)),
                Some((1, 2)),
                Some((3, 0)),
                Some((3, 1)),
                None
            ]
        );
        assert_eq!(idx.shard_start(3), Some(3));
    }

    #[test]
    fn refuses_escaping_basenames() {
        for b in [
            "../x",
            "a/../../x",
            "/etc/passwd",
            "a\\\\b",
            "a//b",
            "",
            "./a",
            "a/",
        ] {
            let err = Index::parse(index_json(&[shard_json(b, 1)]).as_bytes()).unwrap_err();
            assert_eq!(err.file(), Some(INDEX_FILE));
            assert!(
                matches!(err.kind(), MdsError::BadBasename { .. }),
                "{b}: {err}"
            );
        }
        assert!(validate_basename(0, "3/shard.00000.mds").is_ok());
    }

    #[test]
    fn refuses_column_names_that_cannot_be_file_names() {
        let long = "c".repeat(201);
        for bad in ["a/b", "a\\u0000b", "", long.as_str()] {
            let shard = shard_json("a", 1).replace("[\"id\"]", &format!("[\"{bad}\"]"));
            let err = Index::parse(index_json(&[shard]).as_bytes()).unwrap_err();
            assert!(err.to_string().contains("column"), "{bad:?}: {err}");
        }
        let ok = shard_json("a", 1).replace("[\"id\"]", "[\"image.jpg\"]");
        assert!(Index::parse(index_json(&[ok]).as_bytes()).is_ok());
    }

    #[test]
    fn refuses_raw_shards_larger_than_u32_offsets() {
        let huge = shard_json("a", 1).replace("\"bytes\":10", "\"bytes\":18446744073709551615");
        let err = Index::parse(index_json(&[huge]).as_bytes()).unwrap_err();
        assert!(err.to_string().contains("u32"), "{err}");
    }

    #[test]
    fn refuses_split_formats_and_versions() {
        let csv = shard_json("a", 1).replace("\"mds\"", "\"csv\"");
        let err = Index::parse(index_json(&[csv]).as_bytes()).unwrap_err();
        assert!(err.to_string().contains("\"csv\""), "{err}");
        let v3 = index_json(&[shard_json("a", 1)]).replace("\"version\":2}", "\"version\":3}");
        let err = Index::parse(v3.as_bytes()).unwrap_err();
        assert!(matches!(err.kind(), MdsError::Version { .. }), "{err}");
        let err = Index::parse(b"{\"shards\": [").unwrap_err();
        assert!(matches!(err.kind(), MdsError::Json(_)), "{err}");
    }
}
