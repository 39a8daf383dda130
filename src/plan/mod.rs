//! `plan`: what the mount knows ahead of every read, built once at mount and handed to the
//! parts that read it (built bottom-up and passed in; nothing is looked up late):
//!
//! - [`OrderCache`]: each served rank's read order per epoch (computed by `order` on first
//!   use, kept for a few epochs): the vfs names files by it, the readahead walks it;
//! - [`SampleMap`]: where a global sample id lives (stream, shard, index in the shard), so a
//!   read resolves its sample's [`Location`] once and passes it down;
//! - [`NextUse`]: the one next-use table, each shard's distance to its next read by any
//!   rank: the readahead's planner writes it, eviction reads it (furthest first).
//!
//! Pure data and arithmetic: it imports `order` and `mds` only, never the store, the cache,
//! the readahead, the vfs or FUSE (DESIGN.md §2).

mod locate;
mod next_use;
mod orders;

pub use locate::{Location, SampleMap};
pub use next_use::NextUse;
pub use orders::{EpochOrders, OrderCache, OrderSource, RankOrder, MIN_KEEP_EPOCHS};

use crate::order::OrderError;

/// Errors of the plan.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PlanError {
    /// The sampling plan of an epoch could not be computed.
    #[error("cannot compute the order of epoch {epoch}: {source}")]
    Order {
        /// The epoch.
        epoch: u64,
        /// Why `order` refused it.
        #[source]
        source: OrderError,
    },
    /// A local rank this node does not serve.
    #[error("local rank {0} is not served by this node")]
    NoSuchRank(usize),
}
