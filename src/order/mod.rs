//! `order`: StreamingDataset's sample plan, computed exactly. Pure: plain numbers in, ids out.
//!
//! Given each stream's shard sample counts and StreamingDataset's ordering options, a
//! [`Planner`] yields, for any epoch and rank, the global sample ids that rank's PyTorch
//! DataLoader would yield, in order (MDS-SPEC §5). The pipeline mirrors upstream step by step
//! (stream weights → per-epoch resampling → partition → shuffle → big→small map → worker
//! batches → DataLoader interleaving), and every random draw goes through [`rng::NumpyRng`], a
//! bit-exact numpy `default_rng`. Unlike upstream, which materialises the whole
//! `[nodes][ranks][workers][batches][batch]` array on every node, partitions here are closed
//! forms, so a node only materialises its own ranks' ids.

mod batching;
mod error;
mod loader;
pub mod partition;
pub mod rng;
pub mod sampling;
pub mod shuffle;
pub mod weights;

pub use error::OrderError;
pub use loader::dataloader_order;

use partition::{Partition, PartitionParams, PAD};
use sampling::{ResampleParams, StreamShards};
use shuffle::ShuffleParams;
use weights::StreamDraw;

/// One stream of a (possibly mixed) dataset: its shards' sample counts and its weight.
#[derive(Debug, Clone, PartialEq)]
pub struct StreamSpec {
    /// Samples in each shard, in index.json order.
    pub shard_samples: Vec<u64>,
    /// How the stream is weighted in the epoch.
    pub weight: StreamWeight,
}

/// A stream's weight, as upstream `Stream(proportion=|repeat=|choose=)`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum StreamWeight {
    /// No weight given.
    Unset,
    /// Relative weight (normalised over all streams).
    Proportion(f64),
    /// Draw the stream this many times per epoch (may be fractional).
    Repeat(f64),
    /// Draw exactly this many samples per epoch.
    Choose(u64),
}

/// Shuffle algorithm (`shuffle_algo`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShuffleAlgo {
    /// One global permutation.
    Naive,
    /// Shard order, then samples within shards.
    Py1s,
    /// Two-level shard shuffle.
    Py2s,
    /// Staggered random-size blocks.
    Py1br,
    /// Expanded shard windows (upstream's default).
    Py1e,
}

/// Partition algorithm (`partition_algo`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PartitionAlgo {
    /// Canonical/physical nodes must divide each other.
    Orig,
    /// Like orig, but resumption may change the node count (the default).
    Relaxed,
}

/// Sampling method (`sampling_method`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SamplingMethod {
    /// Resample with a new seed every epoch (the default).
    Balanced,
    /// The same resampling every epoch.
    Fixed,
}

/// Batching method (`batching_method`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BatchingMethod {
    /// Batches mix streams at random (the default).
    Random,
    /// Every global batch holds each stream in proportion.
    Stratified,
    /// Every global batch comes from one stream.
    PerStream,
    /// Every device batch comes from one stream.
    DevicePerStream,
}

impl ShuffleAlgo {
    /// upstream's name.
    pub fn name(self) -> &'static str {
        match self {
            ShuffleAlgo::Naive => "naive",
            ShuffleAlgo::Py1s => "py1s",
            ShuffleAlgo::Py2s => "py2s",
            ShuffleAlgo::Py1br => "py1br",
            ShuffleAlgo::Py1e => "py1e",
        }
    }
}

/// StreamingDataset's ordering arguments. `Default` gives upstream's defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct OrderOptions {
    /// `shuffle` (default false).
    pub shuffle: bool,
    /// `shuffle_algo` (default py1e).
    pub shuffle_algo: ShuffleAlgo,
    /// `shuffle_seed` (default 9176).
    pub shuffle_seed: u64,
    /// `shuffle_block_size` (default `max(4_000_000 // NCN, 1 << 18)`).
    pub shuffle_block_size: Option<u64>,
    /// `num_canonical_nodes` (default 64 × nodes for py1s/py2s, else nodes).
    pub num_canonical_nodes: Option<u64>,
    /// `partition_algo` (default relaxed).
    pub partition_algo: PartitionAlgo,
    /// `sampling_method` (default balanced).
    pub sampling_method: SamplingMethod,
    /// `sampling_granularity` (default 1).
    pub sampling_granularity: u64,
    /// `batching_method` (default random).
    pub batching_method: BatchingMethod,
    /// `epoch_size` (default: the sum of the streams' draws).
    pub epoch_size: Option<u64>,
    /// `replication` (default none).
    pub replication: Option<u64>,
}

impl Default for OrderOptions {
    fn default() -> Self {
        OrderOptions {
            shuffle: false,
            shuffle_algo: ShuffleAlgo::Py1e,
            shuffle_seed: 9176,
            shuffle_block_size: None,
            num_canonical_nodes: None,
            partition_algo: PartitionAlgo::Relaxed,
            sampling_method: SamplingMethod::Balanced,
            sampling_granularity: 1,
            batching_method: BatchingMethod::Random,
            epoch_size: None,
            replication: None,
        }
    }
}

/// The training world: nodes × ranks per node, and each rank's DataLoader.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct World {
    /// Physical nodes.
    pub nodes: u64,
    /// Ranks (devices) per node.
    pub ranks_per_node: u64,
    /// DataLoader `num_workers` (0 is treated as 1, as upstream does).
    pub workers_per_rank: u64,
    /// Per-device batch size (dataset and DataLoader).
    pub batch_size: u64,
}

/// The dict StreamingDataset's `state_dict()` returns, to resume from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
pub struct ResumeState {
    /// Epoch being trained when the checkpoint was taken.
    pub epoch: u64,
    /// Samples of that epoch already consumed (over all ranks).
    pub sample_in_epoch: u64,
    /// The run's num_canonical_nodes.
    pub num_canonical_nodes: u64,
    /// The run's shuffle_seed.
    pub shuffle_seed: u64,
    /// Physical nodes of the first run (absent in old checkpoints).
    #[serde(default)]
    pub initial_physical_nodes: Option<u64>,
}

/// The world upstream actually partitions over (`World.replicate`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ParallelWorld {
    nodes: u64,
    ranks_per_node: u64,
    replication: u64,
}

/// Computes every rank's read order for any epoch, exactly as StreamingDataset would.
///
/// Resumption: with a [`ResumeState`], epoch `state.epoch` holds only what is left of it
/// (upstream drops `sample_in_epoch` samples through the partition, see MDS-SPEC §5.4–5.5),
/// and every other epoch is whole. All epochs use the state's num_canonical_nodes,
/// shuffle_seed and initial_physical_nodes, as the resumed upstream process does for the
/// epochs after `state.epoch`. Epochs *before* `state.epoch`, which a resumed upstream run
/// never produces, are defined the same way: the full epoch under the state's parameters
/// (what a run that started with this state's settings would have seen).
#[derive(Debug, Clone)]
pub struct Planner {
    streams: Vec<StreamSpec>,
    first_sample: Vec<u64>,
    draws: Vec<StreamDraw>,
    epoch_size: u64,
    opts: OrderOptions,
    world: World,
    parallel: ParallelWorld,
    canonical: u64,
    block_size: u64,
    seed: u64,
    initial_nodes: Option<u64>,
    resume: Option<(u64, u64)>,
}

impl Planner {
    /// Resolves defaults and weights and checks the configuration.
    pub fn new(
        streams: Vec<StreamSpec>,
        opts: OrderOptions,
        mut world: World,
        resume: Option<ResumeState>,
    ) -> Result<Planner, OrderError> {
        if world.workers_per_rank == 0 {
            world.workers_per_rank = 1;
        }
        for (v, what) in [
            (world.nodes, "nodes"),
            (world.ranks_per_node, "ranks_per_node"),
            (world.batch_size, "batch_size"),
            (opts.sampling_granularity, "sampling_granularity"),
        ] {
            if v == 0 {
                return Err(OrderError::NotPositive { what });
            }
        }
        // Bounds that keep every index computation far from u64 overflow; real worlds are
        // many orders of magnitude smaller.
        const MAX_DIM: u64 = 1 << 24;
        for (v, what) in [
            (world.nodes, "nodes"),
            (world.ranks_per_node, "ranks_per_node"),
            (world.workers_per_rank, "workers_per_rank"),
            (world.batch_size, "batch_size"),
            (opts.num_canonical_nodes.unwrap_or(1), "num_canonical_nodes"),
            (opts.replication.unwrap_or(1), "replication"),
        ] {
            if v > MAX_DIM {
                return Err(OrderError::TooLarge {
                    what,
                    value: v,
                    limit: MAX_DIM,
                });
            }
        }
        let parallel = replicate(&world, opts.replication)?;
        const MAX_SAMPLES: u64 = 1 << 48;
        let too_many = |value: u64| OrderError::TooLarge {
            what: "samples",
            value,
            limit: MAX_SAMPLES,
        };
        let mut samples = Vec::with_capacity(streams.len());
        let mut first_sample = Vec::with_capacity(streams.len());
        let mut acc = 0u64;
        for s in &streams {
            let n = s
                .shard_samples
                .iter()
                .try_fold(0u64, |a, &x| a.checked_add(x).filter(|&t| t <= MAX_SAMPLES));
            let n = n.ok_or_else(|| too_many(u64::MAX))?;
            first_sample.push(acc);
            acc = acc
                .checked_add(n)
                .filter(|&t| t <= MAX_SAMPLES)
                .ok_or_else(|| too_many(u64::MAX))?;
            samples.push(n);
            let drawn = match s.weight {
                StreamWeight::Choose(c) => c as f64,
                StreamWeight::Repeat(r) => r * n as f64,
                _ => 0.0,
            };
            if drawn > MAX_SAMPLES as f64 {
                return Err(too_many(drawn as u64));
            }
        }
        if let Some(e) = opts.epoch_size.filter(|&e| e > MAX_SAMPLES) {
            return Err(too_many(e));
        }
        let (draws, epoch_size) =
            weights::apply_weights(&streams, &samples, opts.epoch_size, opts.shuffle_seed)?;
        let (canonical, seed, initial_nodes, resume) = match resume {
            Some(st) => (
                st.num_canonical_nodes,
                st.shuffle_seed,
                st.initial_physical_nodes,
                Some((st.epoch, st.sample_in_epoch)),
            ),
            None => {
                let ncn = match opts.num_canonical_nodes {
                    Some(c) if c != 0 => c,
                    _ => match opts.shuffle_algo {
                        ShuffleAlgo::Py1s | ShuffleAlgo::Py2s => 64 * parallel.nodes,
                        _ => parallel.nodes,
                    },
                };
                (ncn, opts.shuffle_seed, None, None)
            }
        };
        if canonical == 0 {
            return Err(OrderError::NotPositive {
                what: "num_canonical_nodes",
            });
        }
        if canonical > MAX_DIM {
            return Err(OrderError::TooLarge {
                what: "num_canonical_nodes",
                value: canonical,
                limit: MAX_DIM,
            });
        }
        let block_size = opts
            .shuffle_block_size
            .unwrap_or((4_000_000 / canonical).max(1 << 18));
        let planner = Planner {
            streams,
            first_sample,
            draws,
            epoch_size,
            opts,
            world,
            parallel,
            canonical,
            block_size,
            seed,
            initial_nodes,
            resume,
        };
        planner.check()?;
        Ok(planner)
    }

    /// Samples per epoch (upstream `epoch_size`).
    pub fn epoch_size(&self) -> u64 {
        self.epoch_size
    }

    /// The resolved num_canonical_nodes.
    pub fn num_canonical_nodes(&self) -> u64 {
        self.canonical
    }

    /// The resolved shuffle block size.
    pub fn shuffle_block_size(&self) -> u64 {
        self.block_size
    }

    /// Each stream's derived draw (choose, proportion).
    pub fn stream_draws(&self) -> &[StreamDraw] {
        &self.draws
    }

    /// The world this planner serves.
    pub fn world(&self) -> World {
        self.world
    }

    /// The resume state's `(epoch, sample_in_epoch)`, if resuming.
    pub fn resume_point(&self) -> Option<(u64, u64)> {
        self.resume
    }

    /// Read order of every local rank of `node` for `epoch` (one Vec per local rank); ids are
    /// global sample ids. Computes the epoch's resampling and shuffle once, then only this
    /// node's ranks (ranks that replication makes identical are computed once and copied).
    pub fn node_orders(&self, epoch: u64, node: u64) -> Result<Vec<Vec<u64>>, OrderError> {
        if node >= self.world.nodes {
            return Err(OrderError::OutOfWorld {
                what: "node",
                value: node,
                limit: self.world.nodes,
            });
        }
        let ranks: Vec<u64> = (0..self.world.ranks_per_node)
            .map(|l| node * self.world.ranks_per_node + l)
            .collect();
        self.ranks_orders(epoch, &ranks)
    }

    /// Read order of one global rank for `epoch`. Each call computes the epoch's shuffle; use
    /// [`Planner::node_orders`] to get several ranks at once.
    pub fn rank_order(&self, epoch: u64, global_rank: u64) -> Result<Vec<u64>, OrderError> {
        let total = self.world.nodes * self.world.ranks_per_node;
        if global_rank >= total {
            return Err(OrderError::OutOfWorld {
                what: "rank",
                value: global_rank,
                limit: total,
            });
        }
        Ok(self
            .ranks_orders(epoch, &[global_rank])?
            .pop()
            .unwrap_or_default())
    }

    /// The epoch's work array in upstream's layout `[nodes][ranks][workers][batches][batch]`
    /// over the parallel world, as global sample ids with `None` for upstream's -1 (for tests
    /// and tools; materialises the whole array).
    pub fn work_array(
        &self,
        epoch: u64,
    ) -> Result<(partition::Shape, Vec<Option<u64>>), OrderError> {
        let work = self.work(epoch)?;
        let s = work.shape();
        let mut out = Vec::new();
        let mut buf = Vec::new();
        for p in 0..s.nodes {
            for r in 0..s.ranks {
                for w in 0..s.workers {
                    buf.clear();
                    work.worker_ids(p, r, w, &mut buf);
                    out.extend(buf.iter().map(|&v| (v != PAD).then_some(v)));
                }
            }
        }
        Ok((s, out))
    }

    fn ranks_orders(&self, epoch: u64, global_ranks: &[u64]) -> Result<Vec<Vec<u64>>, OrderError> {
        let work = self.work(epoch)?;
        let k = self.parallel.replication;
        let rpn = self.parallel.ranks_per_node;
        let mut out: Vec<Vec<u64>> = Vec::with_capacity(global_ranks.len());
        let mut done: Vec<(u64, usize)> = Vec::new();
        let mut buf = Vec::new();
        for &g in global_ranks {
            let prank = g / k;
            if let Some(&(_, i)) = done.iter().find(|(r, _)| *r == prank) {
                let copy = out[i].clone();
                out.push(copy);
                continue;
            }
            let (pnode, plocal) = (prank / rpn, prank % rpn);
            if let Some(order) = work.rank_read_order(pnode, plocal) {
                done.push((prank, out.len()));
                out.push(order);
                continue;
            }
            let mut workers = Vec::with_capacity(self.world.workers_per_rank as usize);
            for w in 0..self.world.workers_per_rank {
                buf.clear();
                work.worker_ids(pnode, plocal, w, &mut buf);
                workers.push(
                    buf.iter()
                        .copied()
                        .filter(|&v| v != PAD)
                        .collect::<Vec<u64>>(),
                );
            }
            done.push((prank, out.len()));
            out.push(dataloader_order(&workers, self.world.batch_size));
        }
        Ok(out)
    }

    /// drop_first and initial_physical_nodes for `epoch`.
    fn epoch_point(&self, epoch: u64) -> u64 {
        match self.resume {
            Some((e, s)) if e == epoch => s,
            _ => 0,
        }
    }

    fn resample_params(&self, epoch: u64) -> ResampleParams {
        let balanced = self.opts.sampling_method == SamplingMethod::Balanced;
        ResampleParams {
            seed: self.seed,
            epoch,
            balanced,
            epoch_seed_change: self.opts.shuffle && balanced,
            granularity: self.opts.sampling_granularity,
        }
    }

    fn stream_shards(&self, i: usize) -> StreamShards<'_> {
        StreamShards {
            shard_samples: &self.streams[i].shard_samples,
            first_sample: self.first_sample[i],
            choose: self.draws[i].choose,
        }
    }

    fn partition_params(&self, n: u64, nodes: u64, batch: u64, drop_first: u64) -> PartitionParams {
        PartitionParams {
            relaxed: self.opts.partition_algo == PartitionAlgo::Relaxed,
            num_samples: n,
            canonical: self.canonical,
            nodes,
            ranks: self.parallel.ranks_per_node,
            workers: self.world.workers_per_rank,
            batch,
            drop_first,
            initial_nodes: self.initial_nodes,
        }
    }

    fn shuffle_ids(
        &self,
        units: &[u64],
        epoch: u64,
        block_size: u64,
    ) -> Result<shuffle::ShuffleMap, OrderError> {
        shuffle::get_shuffle(
            self.opts.shuffle_algo,
            ShuffleParams {
                units,
                canonical: self.canonical,
                seed: self.seed,
                epoch,
                block_size,
            },
        )
    }

    /// Cheap checks of what upstream refuses at iteration time, so a bad configuration fails
    /// at construction.
    fn check(&self) -> Result<(), OrderError> {
        let epoch = self.resume.map_or(0, |r| r.0);
        let drop = self.epoch_point(epoch);
        match self.opts.batching_method {
            BatchingMethod::Random => {
                Partition::new(self.partition_params(
                    self.epoch_size,
                    self.parallel.nodes,
                    self.world.batch_size,
                    drop,
                ))?;
                if self.opts.shuffle {
                    self.check_shuffle(self.epoch_size, self.block_size)?;
                }
                Ok(())
            }
            // The other methods are built whole; building the first epoch checks everything.
            _ => self.work(epoch).map(|_| ()),
        }
    }

    /// The shuffle refusals that depend only on sizes: py1e canonical nodes without samples,
    /// and block sizes numpy's `integers` refuses.
    fn check_shuffle(&self, n: u64, block_size: u64) -> Result<(), OrderError> {
        let lo = shuffle::trunc_mul(block_size, 0.75);
        let hi = shuffle::trunc_mul(block_size, 1.25);
        match self.opts.shuffle_algo {
            ShuffleAlgo::Py1e => {
                let c = u128::from(self.canonical);
                let n = u128::from(n);
                if (0..self.canonical).any(|i| n * u128::from(i + 1) / c == n * u128::from(i) / c) {
                    return Err(OrderError::EmptyCanonicalNode {
                        canonical: self.canonical,
                    });
                }
                if lo >= hi {
                    return Err(OrderError::BlockSizeTooSmall {
                        block_size,
                        algo: "py1e",
                    });
                }
            }
            ShuffleAlgo::Py1br if lo <= 0 || lo >= hi => {
                return Err(OrderError::BlockSizeTooSmall {
                    block_size,
                    algo: "py1br",
                });
            }
            _ => {}
        }
        Ok(())
    }

    fn work(&self, epoch: u64) -> Result<batching::Work, OrderError> {
        let drop = self.epoch_point(epoch);
        match self.opts.batching_method {
            BatchingMethod::Random => {
                let all: Vec<StreamShards<'_>> = (0..self.streams.len())
                    .map(|i| self.stream_shards(i))
                    .collect();
                let (units, map) = sampling::resample(&all, self.resample_params(epoch), true)?;
                let partition = Partition::new(self.partition_params(
                    self.epoch_size,
                    self.parallel.nodes,
                    self.world.batch_size,
                    drop,
                ))?;
                let shuffle = if self.opts.shuffle {
                    Some(self.shuffle_ids(&units, epoch, self.block_size)?)
                } else {
                    None
                };
                Ok(batching::Work::Random {
                    partition,
                    shuffle,
                    map,
                })
            }
            method => batching::build(self, method, epoch, drop),
        }
    }
}

/// upstream `World.replicate`: the world partitioned over when `replication` is set.
fn replicate(world: &World, replication: Option<u64>) -> Result<ParallelWorld, OrderError> {
    let k = replication.unwrap_or(1);
    let ranks = world.nodes * world.ranks_per_node;
    if k == 0 || ranks % k != 0 {
        return Err(OrderError::BadReplication {
            ranks,
            replication: k,
        });
    }
    let pranks = ranks / k;
    let (nodes, rpn) = if pranks % world.ranks_per_node == 0 {
        (pranks / world.ranks_per_node, world.ranks_per_node)
    } else {
        (1, pranks)
    };
    Ok(ParallelWorld {
        nodes,
        ranks_per_node: rpn,
        replication: k,
    })
}
