//! The io_uring reader: rings owned by dedicated threads, fed through channels.
//!
//! Callers (FUSE threads) send a request holding an `Arc<File>` and wait on a reply channel.
//! A ring thread owns each read's buffer and the file handle in a slot table until the
//! kernel reports completion, so no memory the kernel writes to can be freed or moved while
//! the read is in flight; the buffer is then handed back to the caller without a copy.
//! Everything queued while a ring thread waited is submitted in one `io_uring_enter`.
//!
//! There is one ring per core (at most 4) and a caller thread always uses the same one
//! (assigned round-robin on first use): page-cache hits complete inline, so the copying work
//! runs on the ring thread, and one ring for everybody would serialise it. Both sides poll
//! for a few microseconds before blocking, because a thread wake-up costs more than a
//! page-cache read on a busy machine.

use super::FileReader;
use io_uring::{opcode, types, IoUring};
use std::cell::Cell;
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, Sender, SyncSender, TryRecvError};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Largest single read submitted; longer reads are split by the caller's loop.
const MAX_READ: usize = 1 << 30;

/// How long a waiting side polls before it blocks.
const SPIN: Duration = Duration::from_micros(30);

struct Request {
    file: Arc<File>,
    offset: u64,
    len: usize,
    reply: SyncSender<io::Result<Vec<u8>>>,
}

struct InFlight {
    req: Request,
    buf: Vec<u8>,
}

/// Reads through io_urings, each owned by a dedicated thread.
pub(crate) struct UringReader {
    rings: Vec<Sender<Request>>,
}

impl std::fmt::Debug for UringReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "UringReader({} rings)", self.rings.len())
    }
}

thread_local! {
    static RING_SLOT: Cell<Option<usize>> = const { Cell::new(None) };
}

/// The ring index of the calling thread.
fn my_ring(n: usize) -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    RING_SLOT.with(|slot| {
        let i = slot.get().unwrap_or_else(|| {
            let i = NEXT.fetch_add(1, Ordering::Relaxed);
            slot.set(Some(i));
            i
        });
        i % n.max(1)
    })
}

/// Polls `try` for [`SPIN`], then falls back to `block`.
fn spin_then<T>(
    mut try_once: impl FnMut() -> Result<T, TryRecvError>,
    block: impl FnOnce() -> Option<T>,
) -> Option<T> {
    let start = Instant::now();
    loop {
        match try_once() {
            Ok(v) => return Some(v),
            Err(TryRecvError::Disconnected) => return None,
            Err(TryRecvError::Empty) if start.elapsed() < SPIN => std::hint::spin_loop(),
            Err(TryRecvError::Empty) => return block(),
        }
    }
}

impl UringReader {
    /// Starts one ring of `depth` entries per core (at most 4), each on its own thread.
    pub(crate) fn new(depth: u32) -> io::Result<Self> {
        let threads = std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .clamp(1, 4);
        let rings = (0..threads)
            .map(|i| start_ring(depth, i))
            .collect::<io::Result<Vec<_>>>()?;
        Ok(UringReader { rings })
    }

    fn read_once(&self, file: &Arc<File>, offset: u64, len: usize) -> io::Result<Vec<u8>> {
        let (reply, wait) = mpsc::sync_channel(1);
        let ring = self
            .rings
            .get(my_ring(self.rings.len()))
            .ok_or_else(|| io::Error::other("no io_uring ring"))?;
        ring.send(Request {
            file: file.clone(),
            offset,
            len,
            reply,
        })
        .map_err(|_| io::Error::other("io_uring thread has stopped"))?;
        spin_then(|| wait.try_recv(), || wait.recv().ok())
            .unwrap_or_else(|| Err(io::Error::other("io_uring thread dropped a request")))
    }
}

/// Sets up one ring, checks that it completes a no-op (seccomp can allow setup yet block
/// submission), then starts its thread.
fn start_ring(depth: u32, n: usize) -> io::Result<Sender<Request>> {
    let depth = depth.clamp(1, 4096);
    let mut ring = IoUring::new(depth)?;
    let nop = opcode::Nop::new().build().user_data(u64::MAX);
    // SAFETY: a no-op references no memory.
    unsafe { ring.submission().push(&nop) }.map_err(|_| io::Error::other("io_uring queue full"))?;
    ring.submit_and_wait(1)?;
    match ring.completion().next() {
        Some(cqe) if cqe.result() >= 0 => {}
        Some(cqe) => return Err(io::Error::from_raw_os_error(-cqe.result())),
        None => return Err(io::Error::other("io_uring no-op did not complete")),
    }
    let (tx, rx) = mpsc::channel();
    std::thread::Builder::new()
        .name(format!("shardfs-uring-{n}"))
        .spawn(move || run(ring, rx, depth as usize))?;
    Ok(tx)
}

impl FileReader for UringReader {
    fn name(&self) -> &'static str {
        "io_uring"
    }

    fn read_exact_at(&self, file: &Arc<File>, offset: u64, len: usize) -> io::Result<Vec<u8>> {
        let mut out = self.read_once(file, offset, len.min(MAX_READ))?;
        // Short reads (EOF, or the kernel splitting a large read): continue where it stopped.
        while out.len() < len {
            let more = self.read_once(
                file,
                offset + out.len() as u64,
                (len - out.len()).min(MAX_READ),
            )?;
            if more.is_empty() {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "file shorter than the requested range",
                ));
            }
            out.extend_from_slice(&more);
        }
        Ok(out)
    }
}

/// A ring thread: submit queued reads, wait for at least one completion, reply, repeat.
fn run(mut ring: IoUring, rx: Receiver<Request>, depth: usize) {
    let mut slots: Vec<Option<InFlight>> = Vec::new();
    let mut free: Vec<usize> = Vec::new();
    let mut inflight = 0usize;
    let mut open = true;
    loop {
        let mut queue = Vec::new();
        if inflight == 0 {
            if !open {
                return;
            }
            match spin_then(|| rx.try_recv(), || rx.recv().ok()) {
                Some(r) => queue.push(r),
                None => return,
            }
        }
        while open && inflight + queue.len() < depth {
            match rx.try_recv() {
                Ok(r) => queue.push(r),
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => open = false,
            }
        }
        for req in queue {
            let mut buf = vec![0u8; req.len];
            let sqe = opcode::Read::new(
                types::Fd(req.file.as_raw_fd()),
                buf.as_mut_ptr(),
                req.len as u32,
            )
            .offset(req.offset)
            .build();
            let slot = free.pop().unwrap_or_else(|| {
                slots.push(None);
                slots.len() - 1
            });
            let sqe = sqe.user_data(slot as u64);
            // The Vec's heap buffer does not move when the Vec itself is moved into the slot.
            slots[slot] = Some(InFlight { req, buf });
            // SAFETY: the buffer (heap memory of `slots[slot].buf`, `len` bytes, initialised)
            // and the file descriptor (kept open by `slots[slot].req.file`) stay alive and
            // untouched until the completion carrying `user_data == slot` is reaped below;
            // only then is the slot emptied. The queue cannot be full: at most `depth`
            // entries are in flight and the ring has `depth` submission entries.
            let pushed = unsafe { ring.submission().push(&sqe) };
            if pushed.is_err() {
                if let Some(f) = slots[slot].take() {
                    let _ = f
                        .req
                        .reply
                        .send(Err(io::Error::other("io_uring submission queue full")));
                }
                free.push(slot);
                continue;
            }
            inflight += 1;
        }
        if inflight == 0 {
            continue;
        }
        match ring.submit_and_wait(1) {
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => {
                // The ring is broken. The kernel may still own the in-flight buffers, so
                // leak them rather than free memory it might write, fail the callers, stop.
                tracing::error!(error = %e, "io_uring_enter failed; io_uring reader stops");
                for f in slots.iter_mut().filter_map(Option::as_mut) {
                    let _ = f
                        .req
                        .reply
                        .send(Err(io::Error::other(format!("io_uring failed: {e}"))));
                }
                std::mem::forget(slots);
                return;
            }
        }
        let done: Vec<(u64, i32)> = ring
            .completion()
            .map(|c| (c.user_data(), c.result()))
            .collect();
        for (slot, res) in done {
            let Some(f) = slots.get_mut(slot as usize).and_then(Option::take) else {
                continue;
            };
            free.push(slot as usize);
            inflight -= 1;
            let InFlight { req, mut buf } = f;
            let out = if res < 0 {
                Err(io::Error::from_raw_os_error(-res))
            } else {
                buf.truncate(res as usize);
                Ok(buf)
            };
            let _ = req.reply.send(out);
        }
    }
}
