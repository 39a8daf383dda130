//! `OrderCache`: the served ranks' read orders per epoch, computed on first use and kept for
//! a few epochs.

use std::collections::{HashSet, VecDeque};
use std::sync::{Arc, Mutex, OnceLock};

use super::PlanError;
use crate::order::OrderError;

/// Computes the read order of every rank this node serves for one epoch.
pub trait OrderSource: Send + Sync {
    /// Global sample ids in read order, one list per local rank, for `epoch`.
    fn node_orders(&self, epoch: u64) -> Result<Vec<Vec<u64>>, OrderError>;
}

/// One rank's read order, stored as 4-byte ids when every id fits (half the memory of 8-byte
/// ids for datasets under 2^32 samples).
#[derive(Clone, Debug)]
pub enum RankOrder {
    /// Ids below 2^32.
    Narrow(Arc<[u32]>),
    /// Any ids.
    Wide(Arc<[u64]>),
}

impl RankOrder {
    /// Compacts `ids`.
    pub fn new(ids: Vec<u64>) -> Self {
        if ids.iter().all(|&g| g <= u64::from(u32::MAX)) {
            RankOrder::Narrow(ids.into_iter().map(|g| g as u32).collect())
        } else {
            RankOrder::Wide(ids.into())
        }
    }

    /// Positions in the order.
    pub fn len(&self) -> usize {
        match self {
            RankOrder::Narrow(v) => v.len(),
            RankOrder::Wide(v) => v.len(),
        }
    }

    /// Whether the order is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The sample id at position `i`.
    pub fn get(&self, i: usize) -> Option<u64> {
        match self {
            RankOrder::Narrow(v) => v.get(i).map(|&g| u64::from(g)),
            RankOrder::Wide(v) => v.get(i).copied(),
        }
    }

    /// The ids from position `i` on.
    pub fn iter_from(&self, i: usize) -> Box<dyn Iterator<Item = u64> + '_> {
        match self {
            RankOrder::Narrow(v) => {
                Box::new(v.get(i..).unwrap_or(&[]).iter().map(|&g| u64::from(g)))
            }
            RankOrder::Wide(v) => Box::new(v.get(i..).unwrap_or(&[]).iter().copied()),
        }
    }
}

/// One epoch's orders, shared by readers.
pub type EpochOrders = Arc<Vec<RankOrder>>;

type Slot = Arc<OnceLock<Result<EpochOrders, OrderError>>>;

/// Orders of the last few epochs used; each epoch is computed once even when many readers
/// ask at the same time. Epochs marked in use (those a reader is in, and the next one) are
/// never dropped, even past `keep`: ranks of one node in different epochs would otherwise
/// recompute each other's orders over and over.
pub struct OrderCache {
    source: Box<dyn OrderSource>,
    keep: usize,
    slots: Mutex<VecDeque<(u64, Slot)>>,
    in_use: Mutex<HashSet<u64>>,
}

/// Fewest epochs kept: a rank in epoch E and one in E + 1 together need E, E + 1 and E + 2.
pub const MIN_KEEP_EPOCHS: usize = 3;

impl OrderCache {
    /// Keeps the orders of the `keep` most recently used epochs.
    pub fn new(source: Box<dyn OrderSource>, keep: usize) -> Self {
        Self {
            source,
            keep: keep.max(MIN_KEEP_EPOCHS),
            slots: Mutex::new(VecDeque::new()),
            in_use: Mutex::new(HashSet::new()),
        }
    }

    /// Marks the epochs readers are in (and about to enter); they are never dropped.
    pub fn set_in_use(&self, epochs: HashSet<u64>) {
        *self.in_use.lock().unwrap_or_else(|e| e.into_inner()) = epochs;
    }

    /// The orders of `epoch`, computing them if needed.
    pub fn epoch(&self, epoch: u64) -> Result<EpochOrders, PlanError> {
        let slot = {
            let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(i) = slots.iter().position(|(e, _)| *e == epoch) {
                let entry = slots.remove(i).unwrap_or_else(|| (epoch, Slot::default()));
                let slot = entry.1.clone();
                slots.push_front(entry);
                slot
            } else {
                let slot = Slot::default();
                slots.push_front((epoch, slot.clone()));
                let in_use = self.in_use.lock().unwrap_or_else(|e| e.into_inner());
                // Drop the least recently used epochs no reader is in, down to `keep`.
                let mut i = slots.len();
                while slots.len() > self.keep && i > 1 {
                    i -= 1;
                    if slots.get(i).is_some_and(|(e, _)| !in_use.contains(e)) {
                        slots.remove(i);
                    }
                }
                slot
            }
        };
        let result = slot.get_or_init(|| {
            let started = std::time::Instant::now();
            let r = self.source.node_orders(epoch).map(|v| {
                Arc::new(
                    v.into_iter()
                        .map(RankOrder::new)
                        .collect::<Vec<RankOrder>>(),
                )
            });
            tracing::info!(
                epoch,
                elapsed_ms = started.elapsed().as_millis() as u64,
                "computed rank orders"
            );
            r
        });
        result
            .clone()
            .map_err(|source| PlanError::Order { epoch, source })
    }

    /// The order of local rank `rank` in `epoch`.
    pub fn rank(&self, epoch: u64, rank: usize) -> Result<RankOrder, PlanError> {
        let orders = self.epoch(epoch)?;
        orders.get(rank).cloned().ok_or(PlanError::NoSuchRank(rank))
    }
}
