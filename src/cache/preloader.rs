//! `Preloader`: a few threads that read samples of direct-I/O cached files into memory
//! ([`Preloaded`]) ahead of their readers, as the readahead advises.
//!
//! A direct read takes ~120 µs and the disk serves several at once, so four threads keep a
//! few reads in flight; their queue is as deep as the readahead's advice runs. Without direct
//! I/O there is nothing to do (the advice is a `posix_fadvise` then) and no thread starts.

use super::io;
use super::preload::{Advice, Preloaded};
use super::stats::Counters;
use bytes::Bytes;
use std::fs::File;
use std::ops::Range;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};

/// Threads reading samples ahead (direct I/O only).
const PRELOAD_THREADS: usize = 4;
/// Reads ahead queued for them at most.
const PRELOAD_QUEUE: usize = 1024;

/// A sample to read ahead: bytes `range` of the open cached `file` of `shard`.
struct PreloadJob {
    shard: usize,
    i: u32,
    file: Arc<File>,
    range: Range<u64>,
}

/// The samples read ahead and the threads reading them; dropping it ends the threads.
pub(crate) struct Preloader {
    preloaded: Arc<Preloaded>,
    /// The threads' queue; `None` when none run (no direct I/O, or no room for samples).
    tx: Option<mpsc::SyncSender<PreloadJob>>,
}

impl Preloader {
    /// Holds up to `cap` bytes of samples read ahead; starts its threads when `cap > 0`.
    pub fn new(cap: u64, counters: &Arc<Counters>) -> Self {
        let preloaded = Arc::new(Preloaded::new(cap));
        let tx = (cap > 0).then(|| start(&preloaded, counters));
        Preloader { preloaded, tx }
    }

    /// Whether reading ahead is off (no room for it).
    pub fn is_off(&self) -> bool {
        self.preloaded.is_off()
    }

    /// The sample, when it was read ahead (taken out: the reader keeps it from here on).
    pub fn take(&self, key: (usize, u32)) -> Option<Bytes> {
        self.preloaded.take(key)
    }

    /// Bytes held or being read.
    pub fn bytes(&self) -> u64 {
        self.preloaded.bytes()
    }

    /// Its counters.
    pub fn stats(&self) -> super::preload::PreloadStats {
        self.preloaded.stats()
    }

    /// Queues a read of sample `i` of `shard` (bytes `range` of `file`). The caller checked
    /// that the file is trusted as it is and that the memory tier has room.
    pub fn queue(&self, shard: usize, i: u32, file: Arc<File>, range: Range<u64>) -> Advice {
        let advice = self.preloaded.reserve((shard, i), range.end - range.start);
        if advice != Advice::Started {
            return advice;
        }
        let job = PreloadJob {
            shard,
            i,
            file,
            range,
        };
        let sent = match &self.tx {
            Some(tx) => tx
                .try_send(job)
                .map_err(|e| matches!(e, mpsc::TrySendError::Full(_))),
            None => Err(false),
        };
        match sent {
            Ok(()) => Advice::Started,
            Err(full) => {
                self.preloaded.cancel((shard, i));
                if full {
                    Advice::Full
                } else {
                    Advice::Skipped
                }
            }
        }
    }
}

/// Starts the threads that read samples ahead into `preloaded`; returns their queue.
fn start(preloaded: &Arc<Preloaded>, counters: &Arc<Counters>) -> mpsc::SyncSender<PreloadJob> {
    let (tx, rx) = mpsc::sync_channel::<PreloadJob>(PRELOAD_QUEUE);
    let rx = Arc::new(Mutex::new(rx));
    for n in 0..PRELOAD_THREADS {
        let rx = rx.clone();
        let preloaded = preloaded.clone();
        let counters = counters.clone();
        let spawned = std::thread::Builder::new()
            .name(format!("shardfs-preload-{n}"))
            .spawn(move || loop {
                let job = rx.lock().unwrap_or_else(|p| p.into_inner()).recv();
                let Ok(job) = job else { return };
                let key = (job.shard, job.i);
                if !preloaded.begin(key) {
                    continue;
                }
                let len = usize::try_from(job.range.end - job.range.start).unwrap_or(0);
                match io::direct::read_exact_at(&job.file, job.range.start, len) {
                    Ok(b) => {
                        Counters::add(&counters.preloaded, 1);
                        preloaded.put(key, b);
                    }
                    Err(e) => {
                        // The reader will read it itself, and see the error if it stays.
                        tracing::debug!(shard = job.shard, sample = job.i, error = %e, "read ahead failed");
                        preloaded.cancel(key);
                    }
                }
            });
        if let Err(e) = spawned {
            tracing::warn!(error = %e, "cannot start preload thread");
        }
    }
    tx
}
