//! `PagePusher`: hands whole files to the kernel's page cache (`FUSE_NOTIFY_STORE`) from a
//! thread of its own, for the vfs's [`PushPages`](crate::vfs::PushPages) (a sample's other
//! files) and [`PushBatch`](crate::vfs::PushBatch) (a landed shard's files).
//!
//! Never from a thread that answers requests: the kernel takes each page's lock to store into
//! it, and a reader that asked for the same file a moment earlier holds that lock until its
//! READ is answered, by one of the threads that answer requests. Queued bytes are bounded
//! ([`QUEUE_BYTES`] for single files, [`BATCH_QUEUE_BYTES`] for batches); a file or batch
//! that does not fit is not handed over (its reads come through FUSE as usual). Single files
//! go first: their reader is about to read them.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use bytes::Bytes;
use fuser::{INodeNo, Notifier};

use crate::vfs::{Ino, PushBatch, PushCounters, PushPages, PushedBytes};

/// Most bytes of single files waiting to be handed over.
pub const QUEUE_BYTES: usize = 8 << 20;
/// Most bytes of batches waiting to be handed over (twice as many for a batch whose caller
/// cannot wait). Their files are views of shards just downloaded, which they keep in memory
/// until handed over: two 64 MiB shards.
pub const BATCH_QUEUE_BYTES: usize = 128 << 20;
/// Longest a batch may wait for room when its caller may wait.
pub const BATCH_WAIT: Duration = Duration::from_secs(2);

/// One file to hand over, and where to count what became of it.
type Job = (Ino, Bytes, Arc<PushCounters>);

/// Files waiting, and their bytes.
#[derive(Default)]
struct Queue {
    files: VecDeque<Job>,
    bytes: usize,
    batches: VecDeque<Job>,
    batch_bytes: usize,
    /// The bytes of every batch file queued or being handed over, by inode (with how many
    /// times it is queued), for [`PushedBytes`].
    held: HashMap<u64, (Bytes, u32)>,
    stop: bool,
}

impl Queue {
    fn hold(&mut self, ino: Ino, bytes: &Bytes) {
        let e = self.held.entry(ino.0).or_insert_with(|| (bytes.clone(), 0));
        e.1 += 1;
    }

    fn release(&mut self, ino: Ino) {
        if let Some(e) = self.held.get_mut(&ino.0) {
            e.1 = e.1.saturating_sub(1);
            if e.1 == 0 {
                self.held.remove(&ino.0);
            }
        }
    }
}

/// The queue and its thread; dropping it lets the thread end once the queue is empty.
struct Shared {
    queue: Mutex<Queue>,
    /// Files were queued (or the queueing functions dropped).
    ready: Condvar,
    /// Batch bytes were taken off the queue.
    room: Condvar,
}

/// The functions that queue files for the pusher thread.
pub struct Pushers {
    /// Queues one file.
    pub file: PushPages,
    /// Queues many files at once.
    pub batch: PushBatch,
    /// The bytes of a batch file not yet handed over.
    pub held: PushedBytes,
}

/// Starts the thread that stores files into the page cache through `notifier`; returns the
/// functions that queue them.
pub fn start(notifier: Notifier) -> std::io::Result<Pushers> {
    let shared = Arc::new(Shared {
        queue: Mutex::new(Queue::default()),
        ready: Condvar::new(),
        room: Condvar::new(),
    });
    let worker = shared.clone();
    std::thread::Builder::new()
        .name("fuse-push".into())
        .spawn(move || run(&worker, &notifier))?;
    let stopper = Arc::new(Stopper(shared.clone()));
    let (keep, batch_shared, held_shared) = (stopper.clone(), shared.clone(), shared.clone());
    let file: PushPages = Box::new(move |ino, bytes, counters| {
        let _keep = &stopper;
        let mut q = shared.queue.lock().unwrap_or_else(|p| p.into_inner());
        if q.bytes.saturating_add(bytes.len()) > QUEUE_BYTES {
            return false;
        }
        q.bytes += bytes.len();
        q.files.push_back((ino, bytes, counters));
        shared.ready.notify_one();
        true
    });
    let batch: PushBatch = Box::new(move |files, counters, wait| {
        let _keep = &keep;
        let shared = &batch_shared;
        let len: usize = files.iter().map(|(_, b)| b.len()).sum();
        let q = shared.queue.lock().unwrap_or_else(|p| p.into_inner());
        // A batch larger than the bound goes alone into an empty queue. A caller that cannot
        // wait is a reader's download: its shard holds that reader's next files, so it may
        // fill the queue to twice the bound.
        let bound = if wait {
            BATCH_QUEUE_BYTES
        } else {
            2 * BATCH_QUEUE_BYTES
        };
        let full = |q: &mut Queue| q.batch_bytes > 0 && q.batch_bytes.saturating_add(len) > bound;
        let (mut q, _) = shared
            .room
            .wait_timeout_while(q, if wait { BATCH_WAIT } else { Duration::ZERO }, |q| {
                full(q) && !q.stop
            })
            .unwrap_or_else(|p| p.into_inner());
        if full(&mut q) || q.stop {
            return false;
        }
        q.batch_bytes += len;
        for (ino, bytes) in files {
            q.hold(ino, &bytes);
            q.batches.push_back((ino, bytes, counters.clone()));
        }
        shared.ready.notify_one();
        true
    });
    let held: PushedBytes = Box::new(move |ino| {
        let q = held_shared.queue.lock().unwrap_or_else(|p| p.into_inner());
        q.held.get(&ino.0).map(|(b, _)| b.clone())
    });
    Ok(Pushers { file, batch, held })
}

/// Ends the thread when both queueing functions are dropped (with the vfs).
struct Stopper(Arc<Shared>);

impl Drop for Stopper {
    fn drop(&mut self) {
        self.0.queue.lock().unwrap_or_else(|p| p.into_inner()).stop = true;
        self.0.ready.notify_all();
        self.0.room.notify_all();
    }
}

fn run(shared: &Shared, notifier: &Notifier) {
    loop {
        let ((ino, bytes, counters), batch) = {
            let mut q = shared.queue.lock().unwrap_or_else(|p| p.into_inner());
            loop {
                if let Some(next) = q.files.pop_front() {
                    q.bytes = q.bytes.saturating_sub(next.1.len());
                    break (next, false);
                }
                if let Some(next) = q.batches.pop_front() {
                    q.batch_bytes = q.batch_bytes.saturating_sub(next.1.len());
                    shared.room.notify_all();
                    break (next, true);
                }
                if q.stop {
                    return;
                }
                q = shared.ready.wait(q).unwrap_or_else(|p| p.into_inner());
            }
        };
        // ENOENT: the kernel no longer holds the inode (forgotten, or never looked up), so
        // there is no page cache to fill; the file's read comes through FUSE.
        // The store waits for the file's page locks: a READ of it that came first holds them
        // until answered, and is answered from `held` when its shard cannot be read now.
        match notifier.store(INodeNo(ino.0), 0, &bytes) {
            Ok(()) => counters.stored(bytes.len()),
            Err(e) => {
                counters.refused();
                tracing::debug!(ino = ino.0, error = %e, "page cache store refused");
            }
        }
        if batch {
            shared
                .queue
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .release(ino);
        }
    }
}
