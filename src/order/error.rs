//! The one error type of `order`: every configuration StreamingDataset refuses, with the same
//! meaning (and mostly the same words) as upstream's exceptions.

/// Why a plan cannot be computed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum OrderError {
    /// A stream sets more than one of proportion, repeat and choose.
    #[error("stream {stream}: provide at most one of `proportion`, `repeat` or `choose`")]
    ManyWeights {
        /// Index of the stream.
        stream: usize,
    },
    /// Relative and absolute weights are mixed.
    #[error(
        "relative (`proportion`) and absolute (`repeat`, `choose`, none) stream weights are \
         incompatible with each other (error in stream {stream})"
    )]
    MixedWeights {
        /// Index of the first stream that differs from stream 0.
        stream: usize,
    },
    /// A weight is negative or not finite.
    #[error("stream {stream}: `{what}` must be a non-negative number, got {value}")]
    BadWeight {
        /// Index of the stream.
        stream: usize,
        /// Which weight.
        what: &'static str,
        /// The value given.
        value: f64,
    },
    /// `epoch_size` given with absolute weights.
    #[error("only provide `epoch_size` when weighting streams relatively (or not at all)")]
    EpochSizeWithAbsoluteWeights,
    /// No streams at all.
    #[error("no streams given")]
    NoStreams,
    /// A stream has no samples.
    #[error("stream {stream} contains no samples")]
    EmptyStream {
        /// Index of the stream.
        stream: usize,
    },
    /// A world or option value that must be positive is zero.
    #[error("`{what}` must be a positive integer")]
    NotPositive {
        /// The option.
        what: &'static str,
    },
    /// Neither node count divides the other.
    #[error(
        "either canonical ({canonical}) or physical ({physical}) nodes must be evenly divisible \
         by the other, otherwise striping slices of shards over nodes may lead to each node \
         downloading all shards"
    )]
    NodesNotDivisible {
        /// num_canonical_nodes.
        canonical: u64,
        /// Physical nodes.
        physical: u64,
    },
    /// The relaxed partition cannot keep the global batch size across a resumption.
    #[error(
        "a global batch size of {global_batch} is not evenly divisible by the initial total \
         number of devices of {initial_devices}; with the `relaxed` partition algorithm the \
         global batch size must not change during resumption of training"
    )]
    GlobalBatchChanged {
        /// The new global batch size.
        global_batch: u64,
        /// initial_physical_nodes × ranks_per_node.
        initial_devices: u64,
    },
    /// The resume point is past the end of the epoch.
    #[error(
        "resuming further into the dataset ({drop_first}) than it has samples ({num_samples})"
    )]
    ResumePastEnd {
        /// sample_in_epoch.
        drop_first: u64,
        /// The epoch size.
        num_samples: u64,
    },
    /// The world size is not divisible by the replication factor.
    #[error("world size {ranks} must be divisible by the replication factor {replication}")]
    BadReplication {
        /// Total ranks.
        ranks: u64,
        /// The replication factor.
        replication: u64,
    },
    /// py1e found a canonical node without samples.
    #[error(
        "the number of samples assigned to a canonical node is 0: the stream has fewer samples \
         than the {canonical} canonical nodes; reduce num_canonical_nodes"
    )]
    EmptyCanonicalNode {
        /// num_canonical_nodes.
        canonical: u64,
    },
    /// The shuffle block size is too small for the algorithm (numpy's `low >= high`).
    #[error("shuffle block size {block_size} is too small for shuffle algorithm {algo}")]
    BlockSizeTooSmall {
        /// The (per-stream) block size.
        block_size: u64,
        /// The algorithm.
        algo: &'static str,
    },
    /// A batching method that needs whole batches from every stream cannot form one.
    #[error("stream {stream} {reason}")]
    StreamBatches {
        /// Index of the stream.
        stream: usize,
        /// What is wrong.
        reason: String,
    },
    /// `device_per_stream` needs num_canonical_nodes divisible by the node count.
    #[error(
        "for `device_per_stream` batching, num_canonical_nodes must be divisible by physical \
         nodes; got {canonical} canonical nodes and {physical} physical nodes"
    )]
    DevicePerStreamNodes {
        /// num_canonical_nodes.
        canonical: u64,
        /// Physical nodes.
        physical: u64,
    },
    /// A node or rank outside the world was asked for.
    #[error("{what} {value} is outside the world (0..{limit})")]
    OutOfWorld {
        /// "node" or "rank".
        what: &'static str,
        /// The value asked for.
        value: u64,
        /// The count.
        limit: u64,
    },
    /// With fewer canonical than physical nodes, a canonical node's samples are too few to pad
    /// it to a multiple of the node ratio (numpy's broadcast error upstream).
    #[error(
        "too few samples per canonical node ({per_canonical}) to pad it for {ratio} physical \
         nodes per canonical node; reduce the node count or raise num_canonical_nodes"
    )]
    TooFewSamplesToPad {
        /// ⌈samples / num_canonical_nodes⌉.
        per_canonical: u64,
        /// physical / canonical nodes.
        ratio: u64,
    },
    /// A size beyond what plans support.
    #[error("{what} {value} is larger than supported ({limit})")]
    TooLarge {
        /// What is too large.
        what: &'static str,
        /// The value.
        value: u64,
        /// The limit.
        limit: u64,
    },
    /// Sizes overflow 64-bit arithmetic.
    #[error("sizes overflow: {0}")]
    Overflow(&'static str),
}
