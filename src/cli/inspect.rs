//! `shardfs inspect`: what a dataset holds, from its `index.json` alone (no shard is read).

use super::dataset::Dataset;
use super::store_args::StoreArgs;
use crate::mds::{self, Index};
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::io::Write;

/// Arguments of `shardfs inspect`.
#[derive(Debug, clap::Args)]
pub struct InspectArgs {
    /// Dataset source: a local path, file://, s3://, gs://, az:// or http(s):// URL of the
    /// folder holding index.json.
    pub source: String,
    /// Print one JSON object instead of text (keys: samples, shards, empty_shards, columns
    /// [{name, encoding, size, extension}], raw_bytes, zip_bytes, compression, hashes,
    /// shard_list).
    #[arg(long)]
    pub json: bool,
    /// How to reach the object store.
    #[command(flatten)]
    pub store: StoreArgs,
}

/// Everything `inspect` reports, as JSON (the text form is printed from it).
pub fn summary(source: &str, index: &Index) -> Value {
    let shards = index.shards();
    let raw_bytes: u64 = shards.iter().map(|s| s.raw.bytes).sum();
    let zip_bytes: Option<u64> = if shards.iter().any(|s| s.zip.is_some()) {
        Some(shards.iter().map(|s| s.stored_file().bytes).sum())
    } else {
        None
    };
    let compressions: BTreeSet<String> = shards
        .iter()
        .map(|s| {
            s.compression
                .map(|c| c.to_string())
                .unwrap_or_else(|| "none".into())
        })
        .collect();
    let hashes: BTreeSet<&str> = shards
        .iter()
        .flat_map(|s| s.raw.hashes.keys().map(String::as_str))
        .collect();
    let columns: Vec<Value> = index
        .columns()
        .iter()
        .map(|c| {
            json!({
                "name": c.name,
                "encoding": c.encoding.to_string(),
                "size": c.size,
                "extension": mds::extension(&c.encoding),
            })
        })
        .collect();
    let shard_list: Vec<Value> = shards
        .iter()
        .map(|s| {
            json!({
                "basename": s.raw.basename,
                "samples": s.samples,
                "raw_bytes": s.raw.bytes,
                "raw_hashes": s.raw.hashes,
                "zip_basename": s.zip.as_ref().map(|z| &z.basename),
                "zip_bytes": s.zip.as_ref().map(|z| z.bytes),
                "zip_hashes": s.zip.as_ref().map(|z| &z.hashes),
                "compression": s.compression.map(|c| c.to_string()),
                "size_limit": s.size_limit,
            })
        })
        .collect();
    json!({
        "source": source,
        "samples": index.num_samples(),
        "shards": shards.len(),
        "empty_shards": shards.iter().filter(|s| s.samples == 0).count(),
        "columns": columns,
        "uniform_columns": index.uniform_columns(),
        "raw_bytes": raw_bytes,
        "zip_bytes": zip_bytes,
        "compression": compressions.into_iter().collect::<Vec<_>>(),
        "hashes": hashes.into_iter().collect::<Vec<_>>(),
        "shard_list": shard_list,
    })
}

fn text(v: &Value) -> String {
    let mut out = String::new();
    let line = |out: &mut String, k: &str, val: String| out.push_str(&format!("{k:<12} {val}\n"));
    let list = |x: &Value| {
        x.as_array()
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .collect::<Vec<_>>()
                    .join(", ")
            })
            .unwrap_or_default()
    };
    line(
        &mut out,
        "source",
        v["source"].as_str().unwrap_or_default().into(),
    );
    line(&mut out, "samples", v["samples"].to_string());
    line(
        &mut out,
        "shards",
        format!("{} ({} with 0 samples)", v["shards"], v["empty_shards"]),
    );
    line(&mut out, "compression", list(&v["compression"]));
    let hashes = list(&v["hashes"]);
    line(
        &mut out,
        "hashes",
        if hashes.is_empty() {
            "none".into()
        } else {
            hashes
        },
    );
    line(&mut out, "raw bytes", v["raw_bytes"].to_string());
    let zip = match v["zip_bytes"].as_u64() {
        Some(z) => z.to_string(),
        None => "- (uncompressed)".into(),
    };
    line(&mut out, "zip bytes", zip);
    let cols = v["columns"].as_array().cloned().unwrap_or_default();
    let note = if v["uniform_columns"].as_bool() == Some(false) {
        " (of shard 0; other shards differ)"
    } else {
        ""
    };
    out.push_str(&format!("columns{note}\n"));
    let width = cols
        .iter()
        .filter_map(|c| c["name"].as_str())
        .map(str::len)
        .max()
        .unwrap_or(0);
    for c in &cols {
        let size = match c["size"].as_u64() {
            Some(s) => format!("{s} bytes"),
            None => "variable".into(),
        };
        out.push_str(&format!(
            "  {:<width$}  {:<22} {:<10} .{}\n",
            c["name"].as_str().unwrap_or_default(),
            c["encoding"].as_str().unwrap_or_default(),
            size,
            c["extension"].as_str().unwrap_or_default(),
        ));
    }
    out
}

/// Runs `shardfs inspect`.
pub fn run(args: InspectArgs) -> anyhow::Result<()> {
    let ds = {
        let _spinner = super::progress::spinner(format!("reading {}/index.json", args.source));
        Dataset::open(&args.source, &args.store)?
    };
    let v = summary(&args.source, &ds.index);
    let out = if args.json {
        format!("{}\n", serde_json::to_string_pretty(&v)?)
    } else {
        text(&v)
    };
    // A closed pipe (`shardfs inspect | head`) is not an error.
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_all(out.as_bytes())
        .and_then(|()| stdout.flush())
    {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        r => Ok(r?),
    }
}
