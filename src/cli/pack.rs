//! `shardfs pack`: the command line of [`crate::pack`], with a progress bar on a terminal and
//! one summary line otherwise.

use super::store_args::StoreArgs;
use crate::mds::Compression;
use crate::pack::{self, Dest, Format, PackOptions, Part, Progress};
use crate::store::put::DestStore;
use crate::store::Source;
use anyhow::{bail, Context, Result};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Arguments of `shardfs pack`.
#[derive(Debug, clap::Args)]
pub struct PackArgs {
    /// The input: a JSON Lines or Parquet file, a folder of .jsonl, .parquet or .tar files, or
    /// an ImageFolder tree; a local path, file://, or a store URL (s3://, gs://, az://). With
    /// --merge, the only argument, DEST.
    #[arg(value_name = "INPUT")]
    pub input: String,
    /// The folder to write the MDS dataset to: a local path, file://, s3://, gs:// or az://.
    /// It must not hold a dataset already.
    #[arg(value_name = "DEST", required_unless_present = "merge")]
    pub dest: Option<String>,
    /// The input format (default: told from INPUT: .jsonl/.ndjson/.json files are jsonl,
    /// .parquet files parquet, .tar files webdataset, a folder of folders imagefolder).
    #[arg(long, value_name = "FORMAT")]
    pub format: Option<Format>,
    /// The columns to write, NAME:ENCODING,... (default: inferred; see docs/PACK.md). Fields
    /// of the input not listed are left out.
    #[arg(long, value_name = "NAME:ENC,...")]
    pub columns: Option<String>,
    /// Compress each shard: br, bz2, gz, snappy or zstd, with an optional :LEVEL (default:
    /// none, as MDSWriter).
    #[arg(long, value_name = "ALGO[:LEVEL]")]
    pub compression: Option<String>,
    /// Hashes to record for each shard file, comma-separated (e.g. sha1,xxh3_64; default:
    /// none).
    #[arg(long, value_name = "ALGO,...", value_delimiter = ',')]
    pub hashes: Vec<String>,
    /// Largest raw shard, in bytes (suffixes KiB, MiB, GiB), as MDSWriter's size_limit.
    #[arg(long, value_name = "BYTES", value_parser = crate::size::parse_size, default_value = "64MiB")]
    pub size_limit: u64,
    /// Pack slice K of N of the input (K from 0, as JOB_COMPLETION_INDEX and
    /// SLURM_ARRAY_TASK_ID count) into DEST/part-KKKKK/; then `pack --merge DEST`.
    #[arg(long, value_name = "K/N")]
    pub part: Option<Part>,
    /// Write DEST/index.json over the finished DEST/part-*/ folders, as mosaicml-streaming's
    /// merge_index does.
    #[arg(long)]
    pub merge: bool,
    /// Threads that compress, hash and write shards (default: the number of CPUs).
    #[arg(long, value_name = "N")]
    pub threads: Option<usize>,
    /// How to reach the object store (for a store URL INPUT or DEST).
    #[command(flatten)]
    pub store: StoreArgs,
}

fn open_dest(arg: &str, store: &StoreArgs) -> Result<Dest> {
    if let Some(path) = pack::local_path(arg) {
        return Ok(Dest::Local(path));
    }
    let source = Source::parse(arg)?;
    Ok(Dest::Store(Arc::new(DestStore::open(
        &source,
        &store.options(),
    )?)))
}

/// Runs `shardfs pack`.
pub fn run(args: PackArgs) -> Result<()> {
    if args.merge {
        if args.dest.is_some() {
            bail!("pack --merge takes one argument, DEST");
        }
        let dest = open_dest(&args.input, &args.store)?;
        let m =
            pack::merge(&dest).with_context(|| format!("merging the parts of {}", args.input))?;
        eprintln!(
            "merged {} parts: {} samples in {} shards; wrote {}/index.json",
            m.parts,
            m.samples,
            m.shards,
            dest.display()
        );
        return Ok(());
    }
    let Some(dest_arg) = args.dest.as_deref() else {
        bail!("pack needs INPUT and DEST");
    };
    let input = match pack::local_path(&args.input) {
        Some(path) => pack::Input::Local(path),
        None => pack::Input::Remote(
            pack::remote::RemoteTree::open(&args.input, &args.store.options())
                .with_context(|| format!("listing {}", args.input))?,
        ),
    };
    let columns = args
        .columns
        .as_deref()
        .map(pack::columns::parse_columns)
        .transpose()?;
    let compression = args
        .compression
        .as_deref()
        .map(str::parse::<Compression>)
        .transpose()?;
    let threads = args.threads.unwrap_or_else(|| {
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
    });
    let opts = PackOptions {
        input,
        dest: open_dest(dest_arg, &args.store)?,
        format: args.format,
        columns,
        compression,
        hashes: args.hashes.iter().map(|h| h.trim().to_string()).collect(),
        size_limit: args.size_limit,
        part: args.part,
        threads,
    };
    let progress = Arc::new(Progress::default());
    let started = Instant::now();
    let bar = ProgressBar::start(Arc::clone(&progress));
    let result = pack::pack(&opts, &progress);
    drop(bar);
    let s = result.with_context(|| format!("packing {} into {dest_arg}", args.input))?;
    let secs = started.elapsed().as_secs_f64();
    eprintln!(
        "packed {} samples into {} shards ({} bytes) in {}: {:.1} s, {:.0} samples/s, {:.1} MB/s",
        s.samples,
        s.shards,
        s.bytes,
        s.dest,
        secs,
        s.samples as f64 / secs.max(1e-9),
        progress.input_bytes.load(Ordering::Relaxed) as f64 / 1e6 / secs.max(1e-9)
    );
    Ok(())
}

/// The progress bar of a running pack (only when stderr is a terminal).
struct ProgressBar {
    stop: Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl ProgressBar {
    fn start(progress: Arc<Progress>) -> Option<ProgressBar> {
        if !std::io::IsTerminal::is_terminal(&std::io::stderr()) {
            return None;
        }
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stop2 = Arc::clone(&stop);
        let thread = std::thread::spawn(move || {
            let bar = indicatif::ProgressBar::new(0);
            if let Ok(style) = indicatif::ProgressStyle::with_template(
                "{bar:30} {bytes}/{total_bytes} {bytes_per_sec} ETA {eta} {msg}",
            ) {
                bar.set_style(style);
            }
            while !stop2.load(Ordering::Relaxed) {
                bar.set_length(progress.input_total.load(Ordering::Relaxed));
                bar.set_position(progress.input_bytes.load(Ordering::Relaxed));
                bar.set_message(format!(
                    "{} samples, {} shards",
                    progress.samples.load(Ordering::Relaxed),
                    progress.shards.load(Ordering::Relaxed)
                ));
                std::thread::sleep(Duration::from_millis(200));
            }
            bar.finish_and_clear();
        });
        Some(ProgressBar {
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for ProgressBar {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
