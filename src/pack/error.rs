//! The one error type of `pack`: every failure names the file (and the line or tar member)
//! it comes from, so a user can fix the input and run the pack again.

use thiserror::Error;

/// Everything that can stop a pack.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum PackError {
    /// Bad input data: `where_` is `path`, `path:line` or `path (member NAME)`.
    #[error("{where_}: {why}")]
    Input {
        /// The file and the line or member.
        where_: String,
        /// What is wrong there.
        why: String,
    },
    /// A file or folder that cannot be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The path.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// Options that do not fit together or do not fit the input.
    #[error("{0}")]
    Options(String),
    /// The destination is not in a state a pack may write to.
    #[error("{0}")]
    Dest(String),
    /// The MDS writer refused a sample or a setting.
    #[error(transparent)]
    Mds(#[from] crate::mds::MdsError),
    /// The object store failed.
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
}

impl PackError {
    /// Bad input at `where_`.
    pub fn input(where_: impl Into<String>, why: impl Into<String>) -> PackError {
        PackError::Input {
            where_: where_.into(),
            why: why.into(),
        }
    }

    /// An I/O error on `path`.
    pub fn io(path: impl std::fmt::Display, source: std::io::Error) -> PackError {
        PackError::Io {
            path: path.to_string(),
            source,
        }
    }
}

/// Results of `pack`.
pub type Result<T, E = PackError> = std::result::Result<T, E>;
