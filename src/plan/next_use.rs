//! `NextUse`: the one next-use table of the mount: for each shard (global number), the
//! distance in positions to its next read by any rank this node serves. The readahead's
//! planner replaces it after each plan; the eviction policy reads it to drop the shard used
//! furthest ahead (Belady's rule).

use std::collections::HashMap;
use std::sync::RwLock;

/// Each planned shard's distance to its next use; shards no plan met have none.
#[derive(Debug, Default)]
pub struct NextUse {
    table: RwLock<HashMap<u32, u64>>,
}

impl NextUse {
    /// An empty table (every shard: no known next use).
    pub fn new() -> Self {
        Self::default()
    }

    /// Distance (in positions) to the next use of global shard `shard`; `u64::MAX` when no
    /// plan met it.
    pub fn get(&self, shard: u32) -> u64 {
        self.table
            .read()
            .map(|m| m.get(&shard).copied().unwrap_or(u64::MAX))
            .unwrap_or(u64::MAX)
    }

    /// Replaces the table with a new plan's.
    pub fn replace(&self, table: HashMap<u32, u64>) {
        if let Ok(mut m) = self.table.write() {
            *m = table;
        }
    }
}
