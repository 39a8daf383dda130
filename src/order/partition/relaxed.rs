//! upstream `partition/relaxed.py` (MDS-SPEC §5.5): on a resumed run whose node count and
//! num_canonical_nodes do not divide each other, build `orig` over the *initial* node count
//! with the batch size that keeps the global batch, read it in consumption order, and deal
//! consecutive batch-sized blocks to the new world. Elements are computed on demand.

use super::{Orig, Partition, PartitionParams, Shape};
use crate::order::OrderError;

/// A re-dealt `orig` partition.
#[derive(Debug, Clone)]
pub struct Relaxed {
    base: Orig,
    base_shape: Shape,
    shape: Shape,
}

impl Relaxed {
    /// upstream `get_partitions_relaxed`: falls back to `orig` when it can.
    pub fn build(p: PartitionParams) -> Result<Partition, OrderError> {
        let fallback = match p.initial_nodes {
            None => true,
            Some(_) => {
                p.canonical == 0
                    || p.nodes == 0
                    || (p.nodes <= p.canonical && p.canonical % p.nodes == 0)
                    || (p.nodes > p.canonical && p.nodes % p.canonical == 0)
            }
        };
        if fallback {
            return Ok(Partition::Orig(Orig::of(&p)?));
        }
        let initial = p.initial_nodes.unwrap_or(p.nodes);
        if initial == 0 {
            return Err(OrderError::NotPositive {
                what: "initial_physical_nodes",
            });
        }
        let global_batch = p.nodes * p.ranks * p.batch;
        let initial_devices = initial * p.ranks;
        if global_batch % initial_devices != 0 {
            return Err(OrderError::GlobalBatchChanged {
                global_batch,
                initial_devices,
            });
        }
        // The first run's partition, on its nodes with their share of the global batch.
        let base = Orig::of(&PartitionParams {
            nodes: initial,
            batch: global_batch / initial_devices,
            ..p
        })?;
        let base_shape = base.shape();
        let shape = Shape {
            nodes: p.nodes,
            ranks: p.ranks,
            workers: p.workers,
            batches: base_shape.batches,
            batch: p.batch,
        };
        Ok(Partition::Relaxed(Relaxed {
            base,
            base_shape,
            shape,
        }))
    }

    /// The array's shape.
    pub fn shape(&self) -> Shape {
        self.shape
    }

    /// Element `[node][rank][worker][batch][slot]`.
    #[inline]
    pub fn get(&self, node: u64, rank: u64, worker: u64, batch: u64, slot: u64) -> u64 {
        let s = &self.shape;
        let flat =
            (((batch * s.workers + worker) * s.nodes + node) * s.ranks + rank) * s.batch + slot;
        // Consumption order of the base array: (batch, worker, node, rank, slot).
        let b0 = &self.base_shape;
        let slot0 = flat % b0.batch;
        let rest = flat / b0.batch;
        let rank0 = rest % b0.ranks;
        let rest = rest / b0.ranks;
        let node0 = rest % b0.nodes;
        let rest = rest / b0.nodes;
        let worker0 = rest % b0.workers;
        let batch0 = rest / b0.workers;
        self.base.get(node0, rank0, worker0, batch0, slot0)
    }
}
