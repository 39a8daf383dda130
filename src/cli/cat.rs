//! `shardfs cat`: one sample's column file on stdout, by global sample id. Reads only the
//! sample: by ranges from an uncompressed shard (header, then the sample), else the whole
//! shard that holds it (verifying its hashes and decompressing it).

use super::dataset::Dataset;
use super::store_args::StoreArgs;
use crate::mds;
use anyhow::{bail, Context, Result};
use std::io::Write;

/// Arguments of `shardfs cat`.
#[derive(Debug, clap::Args)]
pub struct CatArgs {
    /// Dataset source: a local path, file://, s3://, gs://, az:// or http(s):// URL of the
    /// folder holding index.json.
    pub source: String,
    /// Global sample id (0-based, in index order across shards).
    pub index: u64,
    /// Column to print; may be left out when the dataset has a single column.
    #[arg(long)]
    pub column: Option<String>,
    /// Print the column's bytes exactly as stored in the MDS sample instead of the rendered
    /// column file (decimal text, .npy, ...).
    #[arg(long)]
    pub raw: bool,
    /// How to reach the object store.
    #[command(flatten)]
    pub store: StoreArgs,
}

/// The bytes `shardfs cat` prints for these arguments.
pub fn cat_bytes(ds: &Dataset, args: &CatArgs) -> Result<Vec<u8>> {
    let total = ds.index.num_samples();
    let Some((shard, i)) = ds.index.locate(args.index) else {
        bail!(
            "sample {} out of range: the dataset has {total} samples (0..{total})",
            args.index
        );
    };
    let entry = &ds.index.shards()[shard];
    let names = || {
        entry
            .columns
            .iter()
            .map(|c| c.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let col = match &args.column {
        Some(name) => entry
            .columns
            .iter()
            .position(|c| &c.name == name)
            .with_context(|| format!("no column {name:?}; columns are: {}", names()))?,
        None if entry.columns.len() == 1 => 0,
        None => bail!(
            "the dataset has several columns, choose one with --column: {}",
            names()
        ),
    };
    let sample = ds.sample(shard, i)?;
    let ranges =
        mds::split_sample(&entry.columns, &sample).map_err(|e| e.in_file(&entry.raw.basename))?;
    let bytes = ranges
        .get(col)
        .and_then(|r| sample.get(r.clone()))
        .with_context(|| format!("{}: sample {i} has no column {col}", entry.raw.basename))?;
    if args.raw {
        return Ok(bytes.to_vec());
    }
    let column = &entry.columns[col];
    let rendered = mds::render(&column.encoding, bytes).with_context(|| {
        format!(
            "{}: sample {i} column {:?}",
            entry.raw.basename, column.name
        )
    })?;
    Ok(rendered.into_owned())
}

/// Runs `shardfs cat`.
pub fn run(args: CatArgs) -> Result<()> {
    let bytes = {
        let _spinner =
            super::progress::spinner(format!("reading sample {} of {}", args.index, args.source));
        let ds = Dataset::open(&args.source, &args.store)?;
        cat_bytes(&ds, &args)?
    };
    let mut out = std::io::stdout().lock();
    match out.write_all(&bytes).and_then(|()| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        r => r.context("writing to stdout"),
    }
}
