//! Partitions: which (big) sample index each node / rank / worker / batch slot gets, before
//! shuffling. Upstream builds a 5-D array `[nodes][ranks][workers][batches][batch]`; here a
//! partition is a description from which any element is computed in O(1), so a node can
//! produce its own ranks' slots without materialising anyone else's.

mod orig;
mod relaxed;

pub use orig::Orig;
pub use relaxed::Relaxed;

use super::OrderError;

/// Marks an empty slot (upstream's `-1`).
pub const PAD: u64 = u64::MAX;

/// Shape of a partition, as upstream's array: nodes, ranks per node, workers per rank,
/// batches per worker, batch size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    /// Physical nodes.
    pub nodes: u64,
    /// Ranks per node.
    pub ranks: u64,
    /// Workers per rank.
    pub workers: u64,
    /// Batches per worker.
    pub batches: u64,
    /// Batch size.
    pub batch: u64,
}

impl Shape {
    /// Slots per worker.
    pub fn per_worker(&self) -> u64 {
        self.batches * self.batch
    }
}

/// Which algorithm upstream's `get_partitions` dispatches to.
#[derive(Debug, Clone)]
pub enum Partition {
    /// `orig` (also `relaxed` whenever it falls back).
    Orig(Orig),
    /// `relaxed` re-dealing an `orig` partition over the initial node count.
    Relaxed(Relaxed),
    /// An explicit array (other batching methods build these).
    Dense {
        /// The array's shape.
        shape: Shape,
        /// Elements in C order.
        data: Vec<u64>,
    },
}

/// Inputs of upstream's `get_partitions`.
#[derive(Debug, Clone, Copy)]
pub struct PartitionParams {
    /// `relaxed` (true) or `orig`.
    pub relaxed: bool,
    /// Samples in the epoch.
    pub num_samples: u64,
    /// num_canonical_nodes.
    pub canonical: u64,
    /// Physical nodes.
    pub nodes: u64,
    /// Ranks per node.
    pub ranks: u64,
    /// Workers per rank.
    pub workers: u64,
    /// Batch size per rank.
    pub batch: u64,
    /// Samples already seen this epoch (dropped).
    pub drop_first: u64,
    /// Physical nodes of the first run, from a checkpoint.
    pub initial_nodes: Option<u64>,
}

impl Partition {
    /// upstream `get_partitions(algo, ...)`: checks the resume point, then builds the partition.
    pub fn new(p: PartitionParams) -> Result<Self, OrderError> {
        let world = p
            .ranks
            .checked_mul(p.nodes)
            .ok_or(OrderError::Overflow("world size"))?;
        if world == 0 {
            return Err(OrderError::NotPositive {
                what: "nodes × ranks_per_node",
            });
        }
        let repeated = world - p.num_samples % world;
        if p.num_samples.saturating_add(repeated) < p.drop_first {
            return Err(OrderError::ResumePastEnd {
                drop_first: p.drop_first,
                num_samples: p.num_samples,
            });
        }
        if p.relaxed {
            Relaxed::build(p)
        } else {
            Ok(Partition::Orig(Orig::of(&p)?))
        }
    }

    /// The array's shape.
    pub fn shape(&self) -> Shape {
        match self {
            Partition::Orig(o) => o.shape(),
            Partition::Relaxed(r) => r.shape(),
            Partition::Dense { shape, .. } => *shape,
        }
    }

    /// Element `[node][rank][worker][batch][slot]` (`PAD` for -1). Indices must be in shape.
    #[inline]
    pub fn get(&self, node: u64, rank: u64, worker: u64, batch: u64, slot: u64) -> u64 {
        match self {
            Partition::Orig(o) => o.get(node, rank, worker, batch, slot),
            Partition::Relaxed(r) => r.get(node, rank, worker, batch, slot),
            Partition::Dense { shape, data } => {
                let s = shape;
                let i = (((node * s.ranks + rank) * s.workers + worker) * s.batches + batch)
                    * s.batch
                    + slot;
                data[i as usize]
            }
        }
    }

    /// `ids[node][rank][worker].flatten()` appended to `out`.
    pub fn worker_slots(&self, node: u64, rank: u64, worker: u64, out: &mut Vec<u64>) {
        let s = self.shape();
        match self {
            Partition::Orig(o) => o.worker_slots(node, rank, worker, out),
            _ => {
                out.reserve(s.per_worker() as usize);
                for j in 0..s.batches {
                    for b in 0..s.batch {
                        out.push(self.get(node, rank, worker, j, b));
                    }
                }
            }
        }
    }

    /// The whole array in C order (for tests and the batching methods that reshuffle batches).
    pub fn to_dense(&self) -> Vec<u64> {
        let s = self.shape();
        let mut out = Vec::with_capacity((s.nodes * s.ranks * s.workers * s.per_worker()) as usize);
        for p in 0..s.nodes {
            for r in 0..s.ranks {
                for w in 0..s.workers {
                    self.worker_slots(p, r, w, &mut out);
                }
            }
        }
        out
    }
}
