//! `PagePusher`: hands whole files to the kernel's page cache (`FUSE_NOTIFY_STORE`) from a
//! thread of its own, for the vfs's [`shardfs::vfs::PushPages`](crate::vfs::PushPages).
//!
//! Never from a thread that answers requests: the kernel takes each page's lock to store into
//! it, and a reader that asked for the same file a moment earlier holds that lock until its
//! READ is answered, by one of the threads that answer requests. Queued bytes are bounded
//! ([`QUEUE_BYTES`]); a file that does not fit is not handed over (its read comes through
//! FUSE as usual).

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex};

use bytes::Bytes;
use fuser::{INodeNo, Notifier};

use crate::vfs::{Ino, PushCounters, PushPages};

/// Most bytes waiting to be handed over.
pub const QUEUE_BYTES: usize = 8 << 20;

/// Files waiting, and their bytes.
#[derive(Default)]
struct Queue {
    files: VecDeque<(Ino, Bytes, Arc<PushCounters>)>,
    bytes: usize,
    stop: bool,
}

/// The queue and its thread; dropping it lets the thread end once the queue is empty.
struct Shared {
    queue: Mutex<Queue>,
    ready: Condvar,
}

/// Starts the thread that stores files into the page cache through `notifier`; returns the
/// function that queues them.
pub fn start(notifier: Notifier) -> std::io::Result<PushPages> {
    let shared = Arc::new(Shared {
        queue: Mutex::new(Queue::default()),
        ready: Condvar::new(),
    });
    let worker = shared.clone();
    std::thread::Builder::new()
        .name("fuse-push".into())
        .spawn(move || run(&worker, &notifier))?;
    let stopper = Stopper(shared.clone());
    Ok(Box::new(move |ino, bytes, counters| {
        let _keep = &stopper;
        let mut q = shared.queue.lock().unwrap_or_else(|p| p.into_inner());
        if q.bytes.saturating_add(bytes.len()) > QUEUE_BYTES {
            return false;
        }
        q.bytes += bytes.len();
        q.files.push_back((ino, bytes, counters));
        shared.ready.notify_one();
        true
    }))
}

/// Ends the thread when the queueing function is dropped (with the vfs).
struct Stopper(Arc<Shared>);

impl Drop for Stopper {
    fn drop(&mut self) {
        self.0.queue.lock().unwrap_or_else(|p| p.into_inner()).stop = true;
        self.0.ready.notify_all();
    }
}

fn run(shared: &Shared, notifier: &Notifier) {
    loop {
        let (ino, bytes, counters) = {
            let mut q = shared.queue.lock().unwrap_or_else(|p| p.into_inner());
            loop {
                if let Some(next) = q.files.pop_front() {
                    q.bytes = q.bytes.saturating_sub(next.1.len());
                    break next;
                }
                if q.stop {
                    return;
                }
                q = shared.ready.wait(q).unwrap_or_else(|p| p.into_inner());
            }
        };
        // ENOENT: the kernel no longer holds the inode (forgotten, or never looked up), so
        // there is no page cache to fill; the file's read comes through FUSE.
        match notifier.store(INodeNo(ino.0), 0, &bytes) {
            Ok(()) => counters.stored(bytes.len()),
            Err(e) => {
                counters.refused();
                tracing::debug!(ino = ino.0, error = %e, "page cache store refused");
            }
        }
    }
}
