//! The one error type of the `mds` module.
//!
//! Parsers deep inside a shard do not know which file they are reading, so they return errors
//! with offsets only; the caller that knows the basename wraps them with [`MdsError::in_file`],
//! and the message then reads `shard.00003.mds: offset 4108: ...`.

use thiserror::Error;

/// Everything that can be wrong with MDS bytes, or with a request against them.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum MdsError {
    /// An error inside a named file (`index.json` or a shard basename).
    /// (`error` is shown in this error's own message, so it is not a `source`: a printed
    /// error chain would repeat it.)
    #[error("{file}: {error}")]
    InFile {
        /// The file: `index.json` or the shard's basename.
        file: String,
        /// What is wrong inside it.
        error: Box<MdsError>,
    },
    /// The bytes are not valid JSON of the expected shape.
    #[error("invalid JSON: {0}")]
    Json(#[from] serde_json::Error),
    /// A structurally valid index that breaks a rule of the format.
    #[error("{0}")]
    Index(String),
    /// `version` is not 2.
    #[error("unsupported MDS index version {found} (only version 2 is supported){where_}")]
    Version {
        /// The version found.
        found: String,
        /// Where: empty for the top level, or ` in shard N`.
        where_: String,
    },
    /// A split-format shard (csv, tsv, xsv, json), which shardfs does not read.
    #[error("shard {shard} has format {format:?}; only \"mds\" shards are supported (csv/tsv/xsv/json split shards are not)")]
    UnsupportedFormat {
        /// Shard number in the index.
        shard: usize,
        /// The format named by the index.
        format: String,
    },
    /// A basename that would escape the dataset folder or is otherwise unusable as a path.
    #[error("shard {shard}: unsafe basename {basename:?}: {reason}")]
    BadBasename {
        /// Shard number in the index.
        shard: usize,
        /// The offending basename.
        basename: String,
        /// Why it is refused.
        reason: &'static str,
    },
    /// An encoding name this reader does not know.
    #[error("unknown column encoding {0:?}")]
    UnknownEncoding(String),
    /// A compression algorithm this reader does not know, or a malformed spec.
    #[error("unknown compression {0:?}")]
    UnknownCompression(String),
    /// A hash algorithm this reader does not know.
    #[error("unknown hash algorithm {0:?}")]
    UnknownHash(String),
    /// Fewer bytes than the structure at `offset` needs.
    #[error("offset {offset}: truncated: {what} needs {need} bytes, only {have} available")]
    Truncated {
        /// Byte offset where the structure starts.
        offset: u64,
        /// What was being read.
        what: &'static str,
        /// Bytes needed.
        need: u64,
        /// Bytes available.
        have: u64,
    },
    /// Shard bytes that contradict themselves (offsets out of order or past the end, ...).
    #[error("offset {offset}: {msg}")]
    Corrupt {
        /// Byte offset of the faulty field (within the file or the sample).
        offset: u64,
        /// What is wrong.
        msg: String,
    },
    /// A sample index beyond the shard's sample count.
    #[error("sample {index} out of range: the shard holds {samples} samples")]
    SampleOutOfRange {
        /// Requested index within the shard.
        index: u64,
        /// Samples in the shard.
        samples: u64,
    },
    /// Decompression failed or produced the wrong size.
    #[error("{algo} decompression failed: {msg}")]
    Decompress {
        /// Algorithm name (`zstd`, `gz`, ...).
        algo: &'static str,
        /// What went wrong.
        msg: String,
    },
    /// A listed digest that does not match the bytes.
    #[error("{algo} hash mismatch: index.json says {expected}, bytes hash to {actual}")]
    HashMismatch {
        /// Algorithm name as written in the index.
        algo: String,
        /// Digest from the index.
        expected: String,
        /// Digest of the bytes.
        actual: String,
    },
    /// The file length differs from what index.json says.
    #[error("size mismatch: index.json says {expected} bytes, got {actual}")]
    SizeMismatch {
        /// Bytes per index.json.
        expected: u64,
        /// Bytes present.
        actual: u64,
    },
    /// Column bytes that cannot be rendered as their encoding says.
    #[error("{encoding} column: {msg}")]
    Render {
        /// The column encoding.
        encoding: String,
        /// What is wrong with the bytes.
        msg: String,
    },
    /// A writer input that MDSWriter would reject.
    #[error("writer: {0}")]
    Write(String),
}

impl MdsError {
    /// Attaches the file name (`index.json` or a shard basename) to an error; errors that
    /// already name a file are returned as they are.
    pub fn in_file(self, file: &str) -> MdsError {
        match self {
            e @ MdsError::InFile { .. } => e,
            e => MdsError::InFile {
                file: file.to_string(),
                error: Box::new(e),
            },
        }
    }

    /// The error beneath any file name wrapper, for matching on its kind.
    pub fn kind(&self) -> &MdsError {
        match self {
            MdsError::InFile { error, .. } => error.kind(),
            e => e,
        }
    }

    /// The file this error names, if any.
    pub fn file(&self) -> Option<&str> {
        match self {
            MdsError::InFile { file, .. } => Some(file),
            _ => None,
        }
    }
}

/// Shorthand for `Result<T, MdsError>`.
pub type Result<T, E = MdsError> = std::result::Result<T, E>;
