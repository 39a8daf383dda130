//! The ordering and world flags shared by `shardfs order` and `shardfs mount`
//! (`#[command(flatten)]` them), and their resolution into the `order` module's inputs.
//!
//! Raw flags stay apart from resolved settings: [`OrderingArgs::resolve`] applies environment
//! defaults (torchrun's `WORLD_SIZE`, `LOCAL_WORLD_SIZE`, `NODE_RANK`/`GROUP_RANK`), parses
//! `--stream` specs and `--epoch-size` abbreviations, reads `--resume-state`, and validates.
//! Reading each stream's shard sample counts is left to the caller (local file, object store),
//! and handed to [`ResolvedOrdering::planner`].

use anyhow::{bail, Context, Result};
use clap::{Args, ValueEnum};
use shardfs_order_types::*;

/// Re-exported names of the order module used by the flags.
mod shardfs_order_types {
    pub use crate::order::{
        BatchingMethod, OrderOptions, PartitionAlgo, Planner, ResumeState, SamplingMethod,
        ShuffleAlgo, StreamSpec, StreamWeight, World,
    };
}

/// `--shuffle-algo` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ShuffleAlgoArg {
    /// One global permutation.
    Naive,
    /// Shard order, then samples within shards.
    Py1s,
    /// Two-level shard shuffle.
    Py2s,
    /// Staggered random-size blocks.
    Py1br,
    /// Expanded shard windows (default).
    Py1e,
}

/// `--partition-algo` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PartitionAlgoArg {
    /// Canonical and physical node counts must divide each other.
    Orig,
    /// orig, but resumption may change the node count (default).
    Relaxed,
}

/// `--sampling-method` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SamplingMethodArg {
    /// Resample with a new seed every epoch (default).
    Balanced,
    /// The same resampling every epoch.
    Fixed,
}

/// `--batching-method` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
#[value(rename_all = "snake_case")]
pub enum BatchingMethodArg {
    /// Batches mix streams at random (default).
    Random,
    /// Every global batch holds each stream in proportion.
    Stratified,
    /// Every global batch comes from one stream.
    PerStream,
    /// Every device batch comes from one stream.
    DevicePerStream,
}

/// Ordering and world flags: they mean exactly what StreamingDataset's arguments of the same
/// name mean.
#[derive(Debug, Clone, Args)]
pub struct OrderingArgs {
    /// A stream to mix: 'SOURCE[,proportion=P|,repeat=R|,choose=N]' (repeatable; replaces the
    /// positional SOURCE).
    #[arg(long = "stream", value_name = "SPEC")]
    pub streams: Vec<String>,
    /// Samples per epoch (StreamingDataset `epoch_size`; accepts 100k, 64M, 2b, 1t).
    #[arg(long, value_name = "N")]
    pub epoch_size: Option<String>,
    /// Physical nodes (default: WORLD_SIZE / LOCAL_WORLD_SIZE, else 1).
    #[arg(long)]
    pub nodes: Option<u64>,
    /// This node's index (default: NODE_RANK, else GROUP_RANK, else 0).
    #[arg(long)]
    pub node_rank: Option<u64>,
    /// Ranks (devices) per node (default: LOCAL_WORLD_SIZE, else WORLD_SIZE / nodes, else 1).
    #[arg(long)]
    pub ranks_per_node: Option<u64>,
    /// DataLoader num_workers per rank (0 is treated as 1, as upstream does).
    #[arg(long, default_value_t = 1)]
    pub workers: u64,
    /// Per-device batch size (dataset and DataLoader).
    #[arg(long, default_value_t = 1)]
    pub batch_size: u64,
    /// num_canonical_nodes (default: 64 × nodes for py1s/py2s, else nodes).
    #[arg(long)]
    pub canonical_nodes: Option<u64>,
    /// Shuffle the samples.
    #[arg(long)]
    pub shuffle: bool,
    /// Shuffle algorithm.
    #[arg(long, value_enum, default_value_t = ShuffleAlgoArg::Py1e)]
    pub shuffle_algo: ShuffleAlgoArg,
    /// Shuffle seed.
    #[arg(long, default_value_t = 9176)]
    pub shuffle_seed: u64,
    /// Shuffle block size (default: max(4000000 / canonical nodes, 262144)).
    #[arg(long)]
    pub shuffle_block_size: Option<u64>,
    /// Partition algorithm.
    #[arg(long, value_enum, default_value_t = PartitionAlgoArg::Relaxed)]
    pub partition_algo: PartitionAlgoArg,
    /// Sampling method.
    #[arg(long, value_enum, default_value_t = SamplingMethodArg::Balanced)]
    pub sampling_method: SamplingMethodArg,
    /// Sampling granularity.
    #[arg(long, default_value_t = 1)]
    pub sampling_granularity: u64,
    /// Batching method.
    #[arg(long, value_enum, default_value_t = BatchingMethodArg::Random)]
    pub batching_method: BatchingMethodArg,
    /// Replication factor: this many consecutive ranks see the same samples.
    #[arg(long)]
    pub replication: Option<u64>,
    /// JSON from StreamingDataset.state_dict() to resume from.
    #[arg(long, value_name = "FILE")]
    pub resume_state: Option<std::path::PathBuf>,
}

/// One `--stream` (or the positional SOURCE): where it is and how it is weighted.
#[derive(Debug, Clone, PartialEq)]
pub struct StreamArg {
    /// The dataset source (folder holding index.json).
    pub source: String,
    /// Its weight.
    pub weight: StreamWeight,
}

/// Everything the ordering flags resolve to.
#[derive(Debug, Clone, PartialEq)]
pub struct ResolvedOrdering {
    /// The streams, in order.
    pub streams: Vec<StreamArg>,
    /// StreamingDataset's ordering options.
    pub options: OrderOptions,
    /// The world.
    pub world: World,
    /// This node's index in the world.
    pub node_rank: u64,
    /// The state to resume from.
    pub resume: Option<ResumeState>,
}

impl ResolvedOrdering {
    /// The planner of these settings, given each stream's shard sample counts (in the order
    /// of `streams`).
    pub fn planner(&self, shard_samples: impl IntoIterator<Item = Vec<u64>>) -> Result<Planner> {
        let streams = self
            .streams
            .iter()
            .zip(shard_samples)
            .map(|(s, shard_samples)| StreamSpec {
                shard_samples,
                weight: s.weight,
            })
            .collect();
        Planner::new(streams, self.options.clone(), self.world, self.resume)
            .context("invalid ordering options")
    }
}

/// Environment lookups, injectable for tests.
pub trait Env {
    /// The variable's value, if set.
    fn var(&self, name: &str) -> Option<String>;
}

/// The process environment.
pub struct ProcessEnv;

impl Env for ProcessEnv {
    fn var(&self, name: &str) -> Option<String> {
        std::env::var(name).ok()
    }
}

fn env_u64(env: &dyn Env, name: &str) -> Result<Option<u64>> {
    match env.var(name) {
        None => Ok(None),
        Some(v) if v.trim().is_empty() => Ok(None),
        Some(v) => v
            .trim()
            .parse()
            .map(Some)
            .with_context(|| format!("environment variable {name}={v:?} is not a count")),
    }
}

/// upstream `number_abbrev_to_int`: "100k", "64M", "2b", "1t" (case-insensitive, decimals
/// allowed before a suffix), or plain digits.
pub fn parse_count_abbrev(s: &str) -> Result<u64> {
    let t = s.trim().to_ascii_lowercase();
    for (suffix, mult) in [("k", 1e3), ("m", 1e6), ("b", 1e9), ("t", 1e12)] {
        if let Some(num) = t.strip_suffix(suffix) {
            let v: f64 = num
                .trim()
                .parse()
                .ok()
                .filter(|v: &f64| v.is_finite())
                .with_context(|| {
                    format!("unsupported value/suffix {s:?}; supported suffixes are k, m, b, t")
                })?;
            let n = v * mult;
            if n < 0.0 {
                bail!("epoch size cannot be negative: {s:?}");
            }
            return Ok(n as u64);
        }
    }
    if !t.is_empty() && t.chars().all(|c| c.is_ascii_digit()) {
        return t.parse().with_context(|| format!("{s:?} is too large"));
    }
    bail!("unsupported value/suffix {s:?}; supported suffixes are k, m, b, t")
}

/// Parses 'SOURCE[,proportion=P|,repeat=R|,choose=N]'.
pub fn parse_stream(spec: &str) -> Result<StreamArg> {
    let mut parts = spec.split(',');
    let source = parts.next().unwrap_or("").trim().to_string();
    if source.is_empty() {
        bail!("--stream {spec:?}: missing SOURCE");
    }
    let mut weight = StreamWeight::Unset;
    for kv in parts {
        let (k, v) = kv
            .split_once('=')
            .with_context(|| format!("--stream {spec:?}: expected key=value, got {kv:?}"))?;
        let (k, v) = (k.trim(), v.trim());
        let new = match k {
            "proportion" | "repeat" => {
                let x: f64 = v
                    .parse()
                    .with_context(|| format!("--stream {spec:?}: {k} must be a number"))?;
                if !(x.is_finite() && x >= 0.0) {
                    bail!("--stream {spec:?}: {k} must be non-negative");
                }
                if k == "proportion" {
                    StreamWeight::Proportion(x)
                } else {
                    StreamWeight::Repeat(x)
                }
            }
            "choose" => StreamWeight::Choose(
                parse_count_abbrev(v).with_context(|| format!("--stream {spec:?}: choose"))?,
            ),
            other => bail!(
                "--stream {spec:?}: unknown key {other:?} (expected proportion, repeat or choose)"
            ),
        };
        if weight != StreamWeight::Unset {
            bail!("--stream {spec:?}: provide at most one of proportion, repeat or choose");
        }
        weight = new;
    }
    Ok(StreamArg { source, weight })
}

impl OrderingArgs {
    /// Resolves the flags against the process environment; `source` is the positional SOURCE
    /// (required unless `--stream` is given, refused with it).
    pub fn resolve(&self, source: Option<&str>) -> Result<ResolvedOrdering> {
        self.resolve_with(source, &ProcessEnv)
    }

    /// [`OrderingArgs::resolve`] with an explicit environment.
    pub fn resolve_with(&self, source: Option<&str>, env: &dyn Env) -> Result<ResolvedOrdering> {
        let streams = match (source, self.streams.is_empty()) {
            (Some(s), true) => vec![StreamArg {
                source: s.to_string(),
                weight: StreamWeight::Unset,
            }],
            (None, false) => self
                .streams
                .iter()
                .map(|s| parse_stream(s))
                .collect::<Result<_>>()?,
            (Some(_), false) => bail!("give either a SOURCE or --stream options, not both"),
            (None, true) => bail!("no dataset: give a SOURCE or one or more --stream options"),
        };
        let world_size = env_u64(env, "WORLD_SIZE")?;
        let local_world = env_u64(env, "LOCAL_WORLD_SIZE")?;
        let ranks_per_node = match self.ranks_per_node.or(local_world) {
            Some(r) => r,
            None => match (world_size, self.nodes) {
                (Some(w), Some(n)) if n > 0 && w % n == 0 => w / n,
                (Some(w), None) => w,
                _ => 1,
            },
        };
        if ranks_per_node == 0 {
            bail!("--ranks-per-node must be at least 1");
        }
        let nodes = match self.nodes {
            Some(n) => n,
            None => match world_size {
                Some(w) if w % ranks_per_node == 0 && w > 0 => w / ranks_per_node,
                Some(w) => {
                    bail!("WORLD_SIZE={w} is not a multiple of {ranks_per_node} ranks per node")
                }
                None => 1,
            },
        };
        if nodes == 0 {
            bail!("--nodes must be at least 1");
        }
        let node_rank = match self.node_rank {
            Some(r) => r,
            None => match env_u64(env, "NODE_RANK")? {
                Some(r) => r,
                None => env_u64(env, "GROUP_RANK")?.unwrap_or(0),
            },
        };
        if node_rank >= nodes {
            bail!("node rank {node_rank} is outside the world of {nodes} nodes");
        }
        if self.batch_size == 0 {
            bail!("--batch-size must be at least 1");
        }
        if self.sampling_granularity == 0 {
            bail!("--sampling-granularity must be at least 1");
        }
        let epoch_size = match &self.epoch_size {
            Some(s) => Some(parse_count_abbrev(s).context("--epoch-size")?),
            None => None,
        };
        let resume = match &self.resume_state {
            None => None,
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .with_context(|| format!("reading resume state {}", path.display()))?;
                let state: ResumeState = serde_json::from_str(&text).with_context(|| {
                    format!(
                        "parsing resume state {} (expected StreamingDataset.state_dict() JSON)",
                        path.display()
                    )
                })?;
                Some(state)
            }
        };
        let options = OrderOptions {
            shuffle: self.shuffle,
            shuffle_algo: match self.shuffle_algo {
                ShuffleAlgoArg::Naive => ShuffleAlgo::Naive,
                ShuffleAlgoArg::Py1s => ShuffleAlgo::Py1s,
                ShuffleAlgoArg::Py2s => ShuffleAlgo::Py2s,
                ShuffleAlgoArg::Py1br => ShuffleAlgo::Py1br,
                ShuffleAlgoArg::Py1e => ShuffleAlgo::Py1e,
            },
            shuffle_seed: self.shuffle_seed,
            shuffle_block_size: self.shuffle_block_size,
            num_canonical_nodes: self.canonical_nodes,
            partition_algo: match self.partition_algo {
                PartitionAlgoArg::Orig => PartitionAlgo::Orig,
                PartitionAlgoArg::Relaxed => PartitionAlgo::Relaxed,
            },
            sampling_method: match self.sampling_method {
                SamplingMethodArg::Balanced => SamplingMethod::Balanced,
                SamplingMethodArg::Fixed => SamplingMethod::Fixed,
            },
            sampling_granularity: self.sampling_granularity,
            batching_method: match self.batching_method {
                BatchingMethodArg::Random => BatchingMethod::Random,
                BatchingMethodArg::Stratified => BatchingMethod::Stratified,
                BatchingMethodArg::PerStream => BatchingMethod::PerStream,
                BatchingMethodArg::DevicePerStream => BatchingMethod::DevicePerStream,
            },
            epoch_size,
            replication: self.replication,
        };
        let world = World {
            nodes,
            ranks_per_node,
            workers_per_rank: self.workers,
            batch_size: self.batch_size,
        };
        Ok(ResolvedOrdering {
            streams,
            options,
            world,
            node_rank,
            resume,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    struct MapEnv(HashMap<&'static str, &'static str>);
    impl Env for MapEnv {
        fn var(&self, name: &str) -> Option<String> {
            self.0.get(name).map(|s| s.to_string())
        }
    }

    fn env(pairs: &[(&'static str, &'static str)]) -> MapEnv {
        MapEnv(pairs.iter().copied().collect())
    }

    #[derive(clap::Parser)]
    struct Wrapper {
        #[command(flatten)]
        ordering: OrderingArgs,
    }

    fn parse(args: &[&str]) -> OrderingArgs {
        use clap::Parser;
        Wrapper::try_parse_from(std::iter::once("t").chain(args.iter().copied()))
            .unwrap()
            .ordering
    }

    #[test]
    fn defaults_are_streaming_datasets() {
        let r = parse(&[]).resolve_with(Some("/d"), &env(&[])).unwrap();
        assert_eq!(r.options, OrderOptions::default());
        assert_eq!(
            r.world,
            World {
                nodes: 1,
                ranks_per_node: 1,
                workers_per_rank: 1,
                batch_size: 1
            }
        );
        let r = parse(&[
            "--shuffle",
            "--shuffle-algo",
            "py1br",
            "--batching-method",
            "device_per_stream",
            "--partition-algo",
            "orig",
            "--sampling-method",
            "fixed",
            "--epoch-size",
            "2k",
            "--stream",
            "/a,proportion=1",
            "--stream",
            "/b,proportion=3",
        ])
        .resolve_with(None, &env(&[]))
        .unwrap();
        assert!(r.options.shuffle);
        assert_eq!(r.options.shuffle_algo, ShuffleAlgo::Py1br);
        assert_eq!(r.options.batching_method, BatchingMethod::DevicePerStream);
        assert_eq!(r.options.partition_algo, PartitionAlgo::Orig);
        assert_eq!(r.options.sampling_method, SamplingMethod::Fixed);
        assert_eq!(r.options.epoch_size, Some(2000));
        assert_eq!(r.streams.len(), 2);
    }

    #[test]
    fn abbreviations_follow_upstream() {
        assert_eq!(parse_count_abbrev("100k").unwrap(), 100_000);
        assert_eq!(parse_count_abbrev("64M").unwrap(), 64_000_000);
        assert_eq!(parse_count_abbrev("1.5b").unwrap(), 1_500_000_000);
        assert_eq!(parse_count_abbrev("42").unwrap(), 42);
        assert!(parse_count_abbrev("12x").is_err());
        assert!(parse_count_abbrev("-3k").is_err());
    }

    #[test]
    fn stream_specs_parse() {
        assert_eq!(
            parse_stream("/d/a,proportion=0.5").unwrap(),
            StreamArg {
                source: "/d/a".into(),
                weight: StreamWeight::Proportion(0.5)
            }
        );
        assert_eq!(
            parse_stream("s3://b/p,choose=10k").unwrap().weight,
            StreamWeight::Choose(10_000)
        );
        assert_eq!(parse_stream("x").unwrap().weight, StreamWeight::Unset);
        assert!(parse_stream("x,repeat=2,choose=3").is_err());
        assert!(parse_stream("x,weight=2").is_err());
        assert!(parse_stream(",repeat=2").is_err());
    }

    #[test]
    fn world_comes_from_torchrun_environment() {
        let args = parse(&[]);
        let r = args
            .resolve_with(
                Some("/d"),
                &env(&[
                    ("WORLD_SIZE", "16"),
                    ("LOCAL_WORLD_SIZE", "8"),
                    ("GROUP_RANK", "1"),
                ]),
            )
            .unwrap();
        assert_eq!(
            (r.world.nodes, r.world.ranks_per_node, r.node_rank),
            (2, 8, 1)
        );
        let r = args.resolve_with(Some("/d"), &env(&[])).unwrap();
        assert_eq!(
            (r.world.nodes, r.world.ranks_per_node, r.node_rank),
            (1, 1, 0)
        );
        let flags = OrderingArgs {
            nodes: Some(4),
            ranks_per_node: Some(2),
            node_rank: Some(3),
            ..args.clone()
        };
        let r = flags
            .resolve_with(
                Some("/d"),
                &env(&[("WORLD_SIZE", "16"), ("NODE_RANK", "0")]),
            )
            .unwrap();
        assert_eq!(
            (r.world.nodes, r.world.ranks_per_node, r.node_rank),
            (4, 2, 3)
        );
        assert!(args.resolve_with(None, &env(&[])).is_err());
        let both = OrderingArgs {
            streams: vec!["/a".into()],
            ..args.clone()
        };
        assert!(both.resolve_with(Some("/d"), &env(&[])).is_err());
        let out = OrderingArgs {
            node_rank: Some(1),
            ..args
        };
        assert!(out.resolve_with(Some("/d"), &env(&[])).is_err());
    }
}
