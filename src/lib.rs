//! shardfs: serve a MosaicML MDS dataset in object storage as a read-only tree of
//! pre-shuffled, per-rank sample files (see `docs/` and the project README).
//!
//! Modules depend on each other in one direction only:
//! `mds`, `order` (pure) ← `plan` (pure) and `store` ← `fetch` ← `cache` ← `readahead` ← `vfs`
//! ← `fuse` ← `cli`; `status` (the typed status tree) sits between `cache` and `readahead`.
//! `pack` (writing datasets) uses `mds` and `store` only, and `cli` uses it; `size` (byte
//! sizes as people write them) is pure and used by `cli` and `csi`.
#![warn(missing_docs)]

pub mod cache;
pub mod cli;
pub mod csi;
pub mod fetch;
pub mod fuse;
pub mod latency;
pub mod mds;
pub mod order;
pub mod pack;
pub mod plan;
pub mod readahead;
pub mod size;
pub mod status;
pub mod store;
pub mod vfs;
