//! `shardfs order`: print one rank's global sample ids for one epoch, one per line, in the
//! order its DataLoader reads them (what `rank-R/epoch-E/` lists in a mount).

use super::dataset::Dataset;
use super::ordering::OrderingArgs;
use super::store_args::StoreArgs;
use anyhow::{Context, Result};
use std::io::Write;

/// Arguments of `shardfs order`.
#[derive(Debug, clap::Args)]
pub struct OrderArgs {
    /// Dataset source: a local path, file://, s3://, gs://, az:// or http(s):// URL of the
    /// folder holding index.json; omit when using --stream.
    pub source: Option<String>,
    /// Ordering and world options.
    #[command(flatten)]
    pub ordering: OrderingArgs,
    /// Epoch to print.
    #[arg(long, default_value_t = 0)]
    pub epoch: u64,
    /// Global rank to print.
    #[arg(long, default_value_t = 0)]
    pub rank: u64,
    /// How to reach the object store.
    #[command(flatten)]
    pub store: StoreArgs,
}

/// Runs `shardfs order`.
pub fn run(args: OrderArgs) -> Result<()> {
    let resolved = args.ordering.resolve(args.source.as_deref())?;
    // Only index.json is read: the order depends on shard sample counts alone.
    let counts = resolved
        .streams
        .iter()
        .map(|s| Ok(Dataset::open(&s.source, &args.store)?.index.shard_samples()))
        .collect::<Result<Vec<_>>>()?;
    let planner = resolved.planner(counts)?;
    let ids = planner
        .rank_order(args.epoch, args.rank)
        .with_context(|| format!("computing rank {} epoch {}", args.rank, args.epoch))?;
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::with_capacity(1 << 16, stdout.lock());
    for id in ids {
        writeln!(out, "{id}")?;
    }
    out.flush()?;
    Ok(())
}
