//! `pack`: turn an ImageFolder tree, JSON Lines, Parquet or WebDataset tars into an MDS dataset,
//! byte for byte what mosaicml-streaming's `MDSWriter` writes for the same samples.
//!
//! The shape is a pipeline with bounded memory:
//! - the input is read in its documented order ([`jsonl`], [`imagefolder`], [`parquet`],
//!   [`webdataset`]) and each sample's columns encoded ([`columns`]) ahead of the shard
//!   builder: JSON Lines by a reader thread and `threads` parse workers that keep line order
//!   ([`jsonl::JsonlSource`]), the other formats on one reader thread ([`prefetch`]), each
//!   through queues of a few MiB;
//! - the caller's thread cuts shards exactly where `MDSWriter` cuts them ([`ShardBuilder`]);
//! - [`writers`] workers take finished raw shards from a channel of `threads` slots, compress
//!   and hash them ([`ShardSpec::seal`]) and write them to DEST ([`dest`]): `threads`, more
//!   when shards are small, so several uploads (or local syncs) are on their way at once;
//! - shard buffers go round ([`ShardBuffers`]): the builder fills a shard in place, an upload
//!   sends that buffer as it is, and once stored it comes back for a later shard;
//! - the index is written last, once every shard is stored.
//!
//! So at most `threads + writers + 1` shards are in memory whatever the dataset's size
//! (docs/PACK.md), and an interrupted or failed pack leaves no `index.json` behind (see
//! [`dest`] for how a re-run starts clean over what it left).
//!
//! `--part K/N` packs slice K of N disjoint, ordered slices of the input into
//! `DEST/part-KKKKK/` (a complete dataset of its own), and [`merge()`] writes `DEST/index.json`
//! over the parts as mosaicml-streaming's `merge_index` does, so the merged dataset reads the
//! same samples in the same order as a single pack.

pub mod columns;
pub mod dest;
mod error;
pub mod imagefolder;
pub mod jsonl;
pub mod merge;
pub mod parquet;
pub mod prefetch;
pub mod pyvalue;
pub mod remote;
pub mod source;
pub mod webdataset;

pub use dest::Dest;
pub use error::{InputError, OptionError, PackError, Result, TarFault};
pub use merge::merge;
pub use source::{Format, Input, SampleSource};

use crate::mds::writer::{index_json, RawShard, ShardBuffers, ShardBuilder, ShardSpec};
use crate::mds::{Compression, Encoding, WriterConfig};
use bytes::Bytes;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};

/// MDSWriter's default shard size limit: 64 MiB.
pub const DEFAULT_SIZE_LIMIT: u64 = 1 << 26;

/// Slice `k` of `n` (counted from 0) of the input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Part {
    /// This slice, `0 ≤ k < n`.
    pub k: usize,
    /// How many slices.
    pub n: usize,
}

impl Part {
    /// The folder below DEST this part writes: `part-KKKKK`.
    pub fn folder(&self) -> String {
        format!("part-{:05}", self.k)
    }

    /// Items `[k·len/n, (k+1)·len/n)` of `len`.
    pub fn range(&self, len: u64) -> (u64, u64) {
        let cut = |i: usize| ((u128::from(len) * i as u128) / self.n as u128) as u64;
        (cut(self.k), cut(self.k + 1))
    }
}

impl std::str::FromStr for Part {
    type Err = OptionError;
    fn from_str(s: &str) -> std::result::Result<Part, OptionError> {
        let bad = || OptionError::Part(s.to_string());
        let (k, n) = s.split_once('/').ok_or_else(bad)?;
        let (k, n): (usize, usize) = (
            k.trim().parse().map_err(|_| bad())?,
            n.trim().parse().map_err(|_| bad())?,
        );
        if n == 0 || k >= n || n > 99_999 {
            return Err(bad());
        }
        Ok(Part { k, n })
    }
}

/// Everything a pack needs to know.
#[derive(Debug, Clone)]
pub struct PackOptions {
    /// The input: a local file or folder, or objects in a store.
    pub input: Input,
    /// Where to write.
    pub dest: Dest,
    /// The input format; None to tell it from the input.
    pub format: Option<Format>,
    /// The columns to write; None to infer them.
    pub columns: Option<Vec<(String, Encoding)>>,
    /// Whole-shard compression.
    pub compression: Option<Compression>,
    /// Hash algorithms to record (stored sorted, as MDSWriter expects).
    pub hashes: Vec<String>,
    /// Shard size limit in bytes.
    pub size_limit: u64,
    /// Pack only this slice of the input, into `DEST/part-KKKKK/`.
    pub part: Option<Part>,
    /// Worker threads that compress, hash and write shards (at least 1).
    pub threads: usize,
}

/// Live counters of a running pack, for a progress display.
#[derive(Debug, Default)]
pub struct Progress {
    /// Samples read.
    pub samples: AtomicU64,
    /// Input bytes read.
    pub input_bytes: AtomicU64,
    /// Input bytes this pack will read, once known.
    pub input_total: AtomicU64,
    /// Shards written.
    pub shards: AtomicU64,
    /// Bytes written to DEST.
    pub written_bytes: AtomicU64,
}

/// What a finished pack wrote.
#[derive(Debug, Clone)]
pub struct PackSummary {
    /// Where it wrote (the part's folder for `--part`).
    pub dest: String,
    /// Samples written.
    pub samples: u64,
    /// Shards written.
    pub shards: usize,
    /// Bytes of the stored shard files.
    pub bytes: u64,
    /// The columns, as stored (sorted by name).
    pub columns: Vec<(String, Encoding)>,
}

/// The reader of `opts.input` and the columns it will produce (in stored order).
fn open_source(
    opts: &PackOptions,
    progress: &Progress,
) -> Result<(Box<dyn SampleSource>, Arc<ShardSpec>)> {
    let input = &opts.input;
    let format = match opts.format {
        Some(f) => f,
        None => input.detect()?,
    };
    let part = opts.part.unwrap_or(Part { k: 0, n: 1 });
    let spec_of = |columns: Vec<(String, Encoding)>| -> Result<Arc<ShardSpec>> {
        let mut hashes = opts.hashes.clone();
        hashes.sort();
        hashes.dedup();
        Ok(Arc::new(ShardSpec::new(WriterConfig {
            columns,
            compression: opts.compression,
            hashes,
            size_limit: Some(opts.size_limit),
        })?))
    };
    let stored = |spec: &ShardSpec| -> Vec<(String, Encoding)> {
        spec.columns()
            .iter()
            .map(|c| (c.name.clone(), c.encoding.clone()))
            .collect()
    };
    match format {
        Format::Jsonl => {
            let files = input.files(source::is_jsonl_name)?;
            let strict = opts.columns.is_none();
            let columns = match &opts.columns {
                Some(c) => c.clone(),
                None => jsonl::infer_columns(&files)?,
            };
            let spec = spec_of(columns)?;
            let total: u64 = files.iter().map(|f| f.size).sum();
            let range = part.range(total);
            progress
                .input_total
                .store(range.1 - range.0, Ordering::Relaxed);
            let threads = opts.threads.max(1);
            let src = jsonl::JsonlSource::new(files, range, stored(&spec), strict, threads);
            Ok((Box::new(src), spec))
        }
        Format::Imagefolder => {
            let images = match input {
                Input::Local(p) => imagefolder::list(p)?,
                Input::Remote(t) => imagefolder::list_remote(t)?,
            };
            let columns = match &opts.columns {
                Some(c) => {
                    imagefolder::check_columns(c)?;
                    c.clone()
                }
                None => imagefolder::infer_columns(&images)?,
            };
            let spec = spec_of(columns)?;
            let (a, b) = part.range(images.len() as u64);
            let (a, b) = (a as usize, b as usize);
            let total: u64 = images[a..b].iter().map(|i| i.size).sum();
            progress.input_total.store(total, Ordering::Relaxed);
            let src =
                imagefolder::ImageFolderSource::new(input.clone(), images, (a, b), stored(&spec))?;
            Ok((prefetched(Box::new(src), &spec)?, spec))
        }
        Format::Webdataset => {
            let files = input.files(|n| n.ends_with(".tar"))?;
            let columns = match &opts.columns {
                Some(c) => c.clone(),
                None => webdataset::infer_columns(&files)?,
            };
            let spec = spec_of(columns)?;
            let (a, b) = part.range(files.len() as u64);
            let files: Vec<_> = files[a as usize..b as usize].to_vec();
            progress
                .input_total
                .store(files.iter().map(|f| f.size).sum(), Ordering::Relaxed);
            let src = webdataset::TarSource::new(files, stored(&spec), opts.columns.is_none());
            Ok((prefetched(Box::new(src), &spec)?, spec))
        }
        Format::Parquet => {
            let files = input.files(|n| n.ends_with(".parquet"))?;
            let scan = parquet::Scan::new(files)?;
            let columns = match &opts.columns {
                Some(c) => c.clone(),
                None => scan.infer_columns()?,
            };
            let spec = spec_of(columns)?;
            let range = part.range(scan.rows());
            let total = scan.bytes();
            let rows = scan.rows().max(1);
            progress.input_total.store(
                (u128::from(total) * u128::from(range.1 - range.0) / u128::from(rows)) as u64,
                Ordering::Relaxed,
            );
            let src = parquet::ParquetSource::new(scan, range, stored(&spec));
            Ok((prefetched(Box::new(src), &spec)?, spec))
        }
    }
}

/// `source` read on a thread of its own, ahead of the shard builder ([`prefetch`]).
fn prefetched(source: Box<dyn SampleSource>, spec: &ShardSpec) -> Result<Box<dyn SampleSource>> {
    Ok(Box::new(prefetch::Prefetched::start(
        source,
        spec.columns().len(),
    )?))
}

/// Bytes of shards a pack to a store keeps uploading at once (when its shards are small; see
/// [`writers`]).
pub const UPLOAD_BYTES: u64 = 64 << 20;
/// Shard uploads at once to a store, at most.
pub const MAX_UPLOADS: usize = 16;

/// How many shard writers a pack runs: enough that [`UPLOAD_BYTES`] of small shards are on
/// their way at once, at most [`MAX_UPLOADS`], never fewer than `threads`. A store PUT pays a
/// round trip and a local file a sync to disk per shard, whatever its size (a shard over the
/// multipart threshold goes up in parallel parts anyway), so small shards need many writers
/// waiting at once.
pub fn writers(threads: usize, size_limit: u64) -> usize {
    let uploads = (UPLOAD_BYTES / size_limit.max(1)).clamp(1, MAX_UPLOADS as u64);
    threads.max(uploads as usize)
}

/// A raw shard lent to the upload as its body ([`Bytes::from_owner`]): its buffer goes back to
/// the builder's [`ShardBuffers`] once the last reference to the body is dropped.
struct Lent {
    raw: Option<RawShard>,
    buffers: ShardBuffers,
}

impl AsRef<[u8]> for Lent {
    fn as_ref(&self) -> &[u8] {
        self.raw.as_ref().map_or(&[], RawShard::bytes)
    }
}

impl Drop for Lent {
    fn drop(&mut self) {
        if let Some(raw) = self.raw.take() {
            self.buffers.give(raw.into_buffer());
        }
    }
}

/// What a worker reports for one shard it stored.
struct Stored {
    /// The shard's number.
    number: usize,
    /// Its `index.json` entry, as [`ShardSpec::seal`] wrote it.
    entry: crate::mds::writer::IndexEntry,
    /// The stored file's name.
    basename: String,
    /// The stored file's size (compressed when compression is on).
    bytes: u64,
}

/// Packs `opts.input` into `opts.dest` (or its part folder); see the module note.
pub fn pack(opts: &PackOptions, progress: &Progress) -> Result<PackSummary> {
    let (mut source, spec) = open_source(opts, progress)?;
    let dest = match opts.part {
        Some(p) => {
            if opts
                .dest
                .list()?
                .iter()
                .any(|n| n == crate::mds::INDEX_FILE)
            {
                return Err(PackError::Dest(format!(
                    "{} already holds a merged index.json; delete it before packing parts again",
                    opts.dest.display()
                )));
            }
            opts.dest.child(&p.folder())
        }
        None => opts.dest.clone(),
    };
    dest.prepare()?;

    let threads = opts.threads.max(1);
    let writers = writers(threads, opts.size_limit);
    // Every shard buffer there can be at once: the one being filled, those queued, those
    // being written.
    let buffers = ShardBuffers::new(1 + threads + writers);
    let (tx, rx) = mpsc::sync_channel::<RawShard>(threads);
    let rx = Arc::new(Mutex::new(rx));
    let (done_tx, done_rx) = mpsc::channel::<Result<Stored>>();
    let failed = Arc::new(AtomicBool::new(false));
    let mut workers = Vec::new();
    for _ in 0..writers {
        let rx = Arc::clone(&rx);
        let failed = Arc::clone(&failed);
        let done_tx = done_tx.clone();
        let spec = Arc::clone(&spec);
        let dest = dest.clone();
        let buffers = buffers.clone();
        workers.push(std::thread::spawn(move || loop {
            let next = match rx.lock() {
                Ok(guard) => guard.recv(),
                Err(_) => return,
            };
            let Ok(raw) = next else { return };
            let stored = spec.seal(raw).map_err(PackError::from).and_then(|s| {
                let bytes = s.stored().len() as u64;
                let payload = match s.zip {
                    Some(zip) => {
                        buffers.give(s.raw.into_buffer());
                        Bytes::from(zip)
                    }
                    None => Bytes::from_owner(Lent {
                        raw: Some(s.raw),
                        buffers: buffers.clone(),
                    }),
                };
                dest.put_bytes(&s.basename, payload)?;
                Ok(Stored {
                    number: s.number,
                    entry: s.entry,
                    bytes,
                    basename: s.basename,
                })
            });
            let bad = stored.is_err();
            if bad {
                failed.store(true, Ordering::Relaxed);
            }
            if done_tx.send(stored).is_err() || bad {
                return;
            }
        }));
    }
    drop(done_tx);
    drop(rx);

    let read = read_all(source.as_mut(), &spec, &buffers, &tx, &failed, progress);
    drop(tx);
    for w in workers {
        let _ = w.join();
    }
    let mut results: Vec<Stored> = Vec::new();
    let mut worker_err = None;
    for r in done_rx.try_iter() {
        match r {
            Ok(s) => {
                progress.shards.fetch_add(1, Ordering::Relaxed);
                results.push(s);
            }
            Err(e) => {
                worker_err.get_or_insert(e);
            }
        }
    }
    // A worker's own error says more than the reader's "a writer failed".
    if let Some(e) = worker_err {
        return Err(e);
    }
    read?;
    results.sort_by_key(|r| r.number);
    let bytes = results.iter().map(|r| r.bytes).sum();
    let keep: BTreeSet<String> = results.iter().map(|r| r.basename.clone()).collect();
    let entries: Vec<_> = results.into_iter().map(|r| r.entry).collect();
    dest.finish(&index_json(&entries), &keep)?;
    Ok(PackSummary {
        dest: dest.display(),
        samples: progress.samples.load(Ordering::Relaxed),
        shards: keep.len(),
        bytes,
        columns: spec
            .columns()
            .iter()
            .map(|c| (c.name.clone(), c.encoding.clone()))
            .collect(),
    })
}

/// The reader loop: samples into shards into the workers' channel. Stops at its own first
/// error, or as soon as a worker has failed (`failed`; the caller reports the worker's error).
fn read_all(
    source: &mut dyn SampleSource,
    spec: &Arc<ShardSpec>,
    buffers: &ShardBuffers,
    tx: &mpsc::SyncSender<RawShard>,
    failed: &AtomicBool,
    progress: &Progress,
) -> Result<()> {
    let stopped = || PackError::Dest("a shard writer failed".into());
    let mut builder = ShardBuilder::new(Arc::clone(spec), 0).with_buffers(buffers.clone());
    let mut values: Vec<Vec<u8>> = vec![Vec::new(); spec.columns().len()];
    let send = |shard: RawShard| -> Result<()> {
        let len = shard.bytes().len() as u64;
        tx.send(shard).map_err(|_| stopped())?;
        progress.written_bytes.fetch_add(len, Ordering::Relaxed);
        Ok(())
    };
    let mut n = 0u64;
    loop {
        for v in values.iter_mut() {
            v.clear();
        }
        if !source.next_sample(&mut values)? {
            break;
        }
        let refs: Vec<&[u8]> = values.iter().map(Vec::as_slice).collect();
        if let Some(shard) = builder.write(&refs)? {
            if failed.load(Ordering::Relaxed) {
                return Err(stopped());
            }
            send(shard)?;
        }
        n += 1;
        if n % 256 == 0 {
            progress.samples.store(n, Ordering::Relaxed);
            progress
                .input_bytes
                .store(source.consumed(), Ordering::Relaxed);
        }
    }
    progress.samples.store(n, Ordering::Relaxed);
    progress
        .input_bytes
        .store(source.consumed(), Ordering::Relaxed);
    if let Some(shard) = builder.finish()? {
        send(shard)?;
    }
    Ok(())
}

/// The local path of a `file://` URL or plain path; None for any other URL.
pub fn local_path(arg: &str) -> Option<PathBuf> {
    if let Some(rest) = arg.strip_prefix("file://") {
        return Some(Path::new(rest).to_path_buf());
    }
    (!arg.contains("://")).then(|| PathBuf::from(arg))
}
