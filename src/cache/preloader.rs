//! `Preloader`: reads samples of direct-I/O cached files into memory ([`Preloaded`]) ahead
//! of their readers, as the readahead advises.
//!
//! A direct read takes ~120 µs and the disk serves several at once. With io_uring one thread
//! keeps up to [`PRELOAD_DEPTH`] reads in flight through a ring of its own (`ring_loop`);
//! without it, four threads each keep one `pread` in flight. Their queue is as deep as the
//! readahead's advice runs. Without direct I/O there is nothing to do (the advice is a
//! `posix_fadvise` then) and no thread starts.

use super::io::uring_direct::{ReadQueue, PRELOAD_DEPTH};
use super::io::{self, DirectPath};
use super::preload::{Advice, Preloaded};
use super::stats::Counters;
use bytes::Bytes;
use std::fs::File;
use std::ops::Range;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};

/// Threads reading samples ahead with `pread` (direct I/O without io_uring).
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
    /// Holds up to `cap` bytes of samples read ahead; starts its threads when `cap > 0` and
    /// cached files bypass the page cache (`direct`: how they are read).
    pub fn new(cap: u64, counters: &Arc<Counters>, direct: Option<DirectPath>) -> Self {
        let preloaded = Arc::new(Preloaded::new(cap));
        let tx = direct
            .filter(|_| cap > 0)
            .map(|path| start(&preloaded, counters, path));
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

/// Starts the threads that read samples ahead into `preloaded` (one ring thread with
/// io_uring, else [`PRELOAD_THREADS`] pread threads); returns their queue.
fn start(
    preloaded: &Arc<Preloaded>,
    counters: &Arc<Counters>,
    path: DirectPath,
) -> mpsc::SyncSender<PreloadJob> {
    let (tx, rx) = mpsc::sync_channel::<PreloadJob>(PRELOAD_QUEUE);
    if path == DirectPath::Uring {
        match ReadQueue::new(PRELOAD_DEPTH) {
            Ok(queue) => {
                let preloaded = preloaded.clone();
                let counters = counters.clone();
                let spawned = std::thread::Builder::new()
                    .name("shardfs-preload".into())
                    .spawn(move || ring_loop(queue, &rx, &preloaded, &counters));
                if let Err(e) = spawned {
                    tracing::warn!(error = %e, "cannot start preload thread");
                }
                return tx;
            }
            Err(e) => {
                tracing::info!(error = %e, "no io_uring ring for reading ahead; pread threads instead");
            }
        }
    }
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
                let read = io::direct::read_exact_at(&job.file, job.range.start, len);
                finish(&preloaded, &counters, key, read);
            });
        if let Err(e) = spawned {
            tracing::warn!(error = %e, "cannot start preload thread");
        }
    }
    tx
}

/// Puts a sample read ahead (or cancels it when the read failed).
fn finish(
    preloaded: &Preloaded,
    counters: &Counters,
    key: (usize, u32),
    read: std::io::Result<Bytes>,
) {
    match read {
        Ok(b) => {
            Counters::add(&counters.preloaded, 1);
            preloaded.put(key, b);
        }
        Err(e) => {
            // The reader will read it itself, and see the error if it stays.
            tracing::debug!(shard = key.0, sample = key.1, error = %e, "read ahead failed");
            preloaded.cancel(key);
        }
    }
}

/// The ring thread: takes jobs while the ring has room (blocking only when nothing is in
/// flight), and hands each read over as it completes. Ends when the queue's sender is gone
/// and the reads in flight are done. After a ring failure it reads with `pread`, one by one.
fn ring_loop(
    mut queue: ReadQueue<(usize, u32)>,
    rx: &mpsc::Receiver<PreloadJob>,
    preloaded: &Preloaded,
    counters: &Counters,
) {
    let mut open = true;
    loop {
        while open && queue.has_room() {
            let job = if queue.is_empty() {
                rx.recv().map_err(|_| mpsc::TryRecvError::Disconnected)
            } else {
                rx.try_recv()
            };
            let job = match job {
                Ok(j) => j,
                Err(mpsc::TryRecvError::Empty) => break,
                Err(mpsc::TryRecvError::Disconnected) => {
                    open = false;
                    break;
                }
            };
            let key = (job.shard, job.i);
            if !preloaded.begin(key) {
                continue;
            }
            let len = usize::try_from(job.range.end - job.range.start).unwrap_or(0);
            if queue.is_broken() {
                let read = io::direct::read_exact_at(&job.file, job.range.start, len);
                finish(preloaded, counters, key, read);
            } else {
                queue.push(key, job.file, job.range.start, len);
            }
        }
        if queue.is_empty() {
            if open {
                continue;
            }
            return;
        }
        let was_broken = queue.is_broken();
        for (key, read) in queue.wait() {
            finish(preloaded, counters, key, read);
        }
        if queue.is_broken() && !was_broken {
            tracing::warn!("the read-ahead ring failed; reading ahead with pread from here");
        }
    }
}
