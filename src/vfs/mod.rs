//! `vfs`: the read-only filesystem core as a plain Rust type, testable without FUSE.
//!
//! The tree (DESIGN.md §3) is computed, never materialised: a name is parsed into coordinates
//! (rank, epoch, position, column or sample id, column), an inode number packs those coordinates
//! ([`inode`]), and listings page through a folder by offset. A dataset of 10^8 samples mounts
//! instantly and the memory used does not grow with the number of files; the only per-epoch
//! state is each served rank's order (a `u64` per position), held by the plan's
//! [`crate::plan::OrderCache`], which the readahead walks too. A read locates its sample once
//! (stream, shard, index in the shard: [`Location`]) and passes that down.
//!
//! Every failure is a [`VfsError`], and [`VfsError::errno`] is the one place where errors become
//! what a reader sees: missing names `ENOENT`, writes `EROFS`, an unavailable or corrupt shard
//! `EIO` (logged, and recorded in `status.json` with the shard and the reason).

mod dataset;
mod error;
mod fs;
pub mod inode;
mod landed;
pub mod names;
mod push;
mod recent;
mod source;
mod status;

pub use dataset::{CachedShards, MdsDataset, ShardStore};
pub use error::VfsError;
pub use fs::{Attr, DirEntry, Kind, Vfs, VfsConfig};
pub use inode::Ino;
pub use push::{PushBatch, PushCounters, PushPages, PushedBytes};
pub use source::{
    ColumnFile, ColumnRead, ColumnSet, LandedShard, Location, OnLanded, SampleSource, SourceError,
};

#[cfg(test)]
mod tests;
