//! Errors of the vfs, and the one place where every error becomes an errno.
//!
//! Each kind of failure has its own errno where POSIX has one, so a reader (and its
//! framework's error message) can tell a missing object from refused credentials, a stalled
//! store or damaged bytes; the same split as mountpoint-s3's `fs/error.rs` makes. Everything
//! else is `EIO`, with the whole cause logged and kept in `status.json`.

use super::source::{ShardError, SourceError};
use crate::cache::CacheError;
use crate::plan::PlanError;
use crate::store::StoreErrorKind;

/// What a failed request was doing: a read of a sample file's bytes, or finding its size
/// (a LOOKUP or GETATTR before the shard was read).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailedOp {
    /// READ of a sample file.
    Read,
    /// LOOKUP or GETATTR of a sample file whose size was not known yet.
    Size,
}

/// Why a filesystem request failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum VfsError {
    /// No such file or folder.
    #[error("not found")]
    NotFound,
    /// A file was used as a folder.
    #[error("not a directory")]
    NotADirectory,
    /// A folder was read as a file.
    #[error("is a directory")]
    IsADirectory,
    /// A write of any kind: the tree is read-only.
    #[error("read-only file system")]
    ReadOnly,
    /// The shard behind a file could not be served.
    #[error("shard {shard}: {source}")]
    Shard {
        /// The dataset (its store URL) the shard belongs to.
        store: String,
        /// The shard's name.
        shard: String,
        /// What the failed request was doing (its errno depends on it).
        op: FailedOp,
        /// What went wrong.
        #[source]
        source: Box<ShardError>,
    },
    /// The sampling plan could not be computed.
    #[error(transparent)]
    Plan(#[from] PlanError),
    /// A file's size was given from bytes no hash covers (a ranged read for `stat`) and the
    /// verified bytes disagree: the reader's view of the file is wrong, so the read fails and
    /// the kernel is told to forget the size.
    #[error("sample {sample} column {column}: {} before the shard was verified, {actual} in the verified shard", given.map_or("another size given".to_string(), |g| format!("size {g} given")))]
    SizeChanged {
        /// Global sample id.
        sample: u64,
        /// Column number.
        column: u32,
        /// The size handed out (when this read is the one that found the difference).
        given: Option<u64>,
        /// The verified size.
        actual: u64,
    },
}

impl VfsError {
    /// The error of a request doing `op` whose sample source failed with `e`.
    pub(crate) fn from_source(e: SourceError, op: FailedOp) -> Self {
        match e {
            SourceError::Missing => VfsError::NotFound,
            SourceError::Shard {
                store,
                shard,
                source,
            } => VfsError::Shard {
                store,
                shard,
                op,
                source,
            },
        }
    }

    /// The errno a reader sees for this error.
    pub fn errno(&self) -> i32 {
        match self {
            VfsError::NotFound => libc::ENOENT,
            VfsError::NotADirectory => libc::ENOTDIR,
            VfsError::IsADirectory => libc::EISDIR,
            VfsError::ReadOnly => libc::EROFS,
            VfsError::Shard { source, op, .. } => shard_errno(source, *op),
            VfsError::Plan(_) | VfsError::SizeChanged { .. } => libc::EIO,
        }
    }
}

/// The errno of a shard that could not be served while doing `op`.
fn shard_errno(e: &ShardError, op: FailedOp) -> i32 {
    match e {
        ShardError::Cache(e) => cache_errno(e, op),
        // Verified bytes that do not hold the sample the index describes: damaged.
        ShardError::Sample { .. }
        | ShardError::Column { .. }
        | ShardError::ColumnOutOfBounds { .. } => libc::EIO,
    }
}

fn cache_errno(e: &CacheError, op: FailedOp) -> i32 {
    match e {
        CacheError::Store(e) => store_errno(e.kind(), op),
        // The disk is full and every resident shard is held by a reader, or the disk itself
        // says so: nothing else could serve these bytes.
        CacheError::Full { .. } => libc::ENOSPC,
        CacheError::Io { source, .. } if source.raw_os_error() == Some(libc::ENOSPC) => {
            libc::ENOSPC
        }
        // Damaged bytes (after re-downloads), aborted fills, a budget set too small, a
        // shard the index does not have: the bytes cannot be had, as a disk would say it.
        CacheError::Shard(_)
        | CacheError::Io { .. }
        | CacheError::Index { .. }
        | CacheError::BudgetTooSmall { .. }
        | CacheError::FillAborted { .. }
        | CacheError::Config(_) => libc::EIO,
    }
}

/// A store failure's errno. An object the index lists but the store does not have is
/// `ENOENT` where a file's size was asked (a `stat` or `open`: the file's contents are gone)
/// and `EIO` on a read of an open file, which read(2) has no `ENOENT` for.
fn store_errno(kind: StoreErrorKind, op: FailedOp) -> i32 {
    match kind {
        StoreErrorKind::NotFound => match op {
            FailedOp::Size => libc::ENOENT,
            FailedOp::Read => libc::EIO,
        },
        StoreErrorKind::AccessDenied => libc::EACCES,
        StoreErrorKind::TimedOut => libc::ETIMEDOUT,
        StoreErrorKind::Transient
        | StoreErrorKind::Damaged
        | StoreErrorKind::Misconfigured
        | StoreErrorKind::Other => libc::EIO,
    }
}

/// The name of an errno this module gives (`"EIO"`, `"ETIMEDOUT"`, ...), for logs and status.
pub fn errno_name(errno: i32) -> &'static str {
    match errno {
        libc::ENOENT => "ENOENT",
        libc::ENOTDIR => "ENOTDIR",
        libc::EISDIR => "EISDIR",
        libc::EROFS => "EROFS",
        libc::EACCES => "EACCES",
        libc::ETIMEDOUT => "ETIMEDOUT",
        libc::ENOSPC => "ENOSPC",
        libc::EIO => "EIO",
        _ => "errno",
    }
}
