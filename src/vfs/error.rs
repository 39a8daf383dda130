//! Errors of the vfs, and the one place where every error becomes an errno.

use super::source::SourceError;
use crate::plan::PlanError;

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
    #[error("shard {shard}: {why}")]
    Shard {
        /// The dataset (its store URL) the shard belongs to.
        store: String,
        /// The shard's name.
        shard: String,
        /// What went wrong.
        why: String,
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

impl From<SourceError> for VfsError {
    fn from(e: SourceError) -> Self {
        match e {
            SourceError::Missing => VfsError::NotFound,
            SourceError::Shard { store, shard, why } => VfsError::Shard { store, shard, why },
        }
    }
}

impl VfsError {
    /// The errno a reader sees for this error.
    pub fn errno(&self) -> i32 {
        match self {
            VfsError::NotFound => libc::ENOENT,
            VfsError::NotADirectory => libc::ENOTDIR,
            VfsError::IsADirectory => libc::EISDIR,
            VfsError::ReadOnly => libc::EROFS,
            VfsError::Shard { .. } | VfsError::Plan(_) | VfsError::SizeChanged { .. } => libc::EIO,
        }
    }
}
