//! The io_uring reader: one ring owned by one thread, fed through a channel.
//!
//! Callers (FUSE threads) send a request holding an `Arc<File>` and wait on a reply channel.
//! The ring thread owns each read's buffer and the file handle in a slot table until the
//! kernel reports completion, so no memory the kernel writes to can be freed or moved while
//! the read is in flight; the buffer is then handed back to the caller without a copy.
//! Batching falls out naturally: everything queued while the thread waited is submitted in
//! one `io_uring_enter`.

use super::FileReader;
use io_uring::{opcode, types, IoUring};
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::sync::mpsc::{self, Receiver, Sender, SyncSender, TryRecvError};
use std::sync::Arc;

/// Largest single read submitted; longer reads are split by the caller's loop.
const MAX_READ: usize = 1 << 30;

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

/// Reads through an io_uring owned by a dedicated thread.
pub(crate) struct UringReader {
    tx: Sender<Request>,
}

impl std::fmt::Debug for UringReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("UringReader")
    }
}

impl UringReader {
    /// Sets up a ring of `depth` entries and checks that it completes a no-op (seccomp can
    /// allow setup yet block submission), then starts the ring thread.
    pub(crate) fn new(depth: u32) -> io::Result<Self> {
        let depth = depth.clamp(1, 4096);
        let mut ring = IoUring::new(depth)?;
        let nop = opcode::Nop::new().build().user_data(u64::MAX);
        // SAFETY: a no-op references no memory.
        unsafe { ring.submission().push(&nop) }
            .map_err(|_| io::Error::other("io_uring queue full"))?;
        ring.submit_and_wait(1)?;
        match ring.completion().next() {
            Some(cqe) if cqe.result() >= 0 => {}
            Some(cqe) => return Err(io::Error::from_raw_os_error(-cqe.result())),
            None => return Err(io::Error::other("io_uring no-op did not complete")),
        }
        let (tx, rx) = mpsc::channel();
        std::thread::Builder::new()
            .name("shardfs-uring".into())
            .spawn(move || run(ring, rx, depth as usize))?;
        Ok(UringReader { tx })
    }

    fn read_once(&self, file: &Arc<File>, offset: u64, len: usize) -> io::Result<Vec<u8>> {
        let (reply, wait) = mpsc::sync_channel(1);
        self.tx
            .send(Request {
                file: file.clone(),
                offset,
                len,
                reply,
            })
            .map_err(|_| io::Error::other("io_uring thread has stopped"))?;
        wait.recv()
            .map_err(|_| io::Error::other("io_uring thread dropped a request"))?
    }
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

/// The ring thread: submit queued reads, wait for at least one completion, reply, repeat.
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
            match rx.recv() {
                Ok(r) => queue.push(r),
                Err(_) => return,
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
                // The ring is broken: fail what is in flight only after the kernel is done
                // with it, which we cannot know; keep the buffers (leak) rather than risk
                // freeing memory the kernel may still write, and stop.
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
