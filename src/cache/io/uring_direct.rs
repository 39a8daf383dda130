//! io_uring with `O_DIRECT`: how cached shard files are read and written by default, where
//! the kernel has io_uring and the cache folder's file system takes direct I/O.
//!
//! Three shapes of work, each keeping the device busy from few threads:
//! - [`read_exact_at`]: one sample read on the calling thread (a FUSE thread), through a small
//!   ring of that thread's own: one `io_uring_enter` submits it and waits, like one `pread`,
//!   with no hand-off between threads.
//! - [`ReadQueue`]: many reads in flight from one thread (the preloader reads samples ahead
//!   through one, [`PRELOAD_DEPTH`] at once), each completion handed back as it comes.
//! - [`write_new`]: a fill's shard file written as [`WRITE_CHUNK`]-byte pieces, up to
//!   [`WRITES_IN_FLIGHT`] at once, straight from the (aligned) download buffer.
//! - [`read_in_order`]: a whole file read in order (the re-hash of a cached file), pieces
//!   read ahead of the hasher into a few buffers registered with the ring.
//!
//! Buffers are the aligned ones of `direct.rs` (page-pool buffers for sample-sized reads), so
//! every read is one aligned span around the asked range, as with `pread`. Only
//! [`read_in_order`]'s are registered with its ring (fixed buffers), since it reads into the
//! same few again and again: a sample read's buffer leaves with its sample and a fill writes
//! each byte once, so no other buffer is used twice by one ring, and registering it would
//! pin the same pages a plain read or write pins for itself.
//!
//! The kernel owns a buffer from submission to completion. Every path here keeps it (and
//! borrows the file) until its completion was reaped: reads own their buffers in the ring's
//! slot table, and a write does not return before all its pieces completed. When the ring
//! itself fails with operations in flight (`io_uring_enter` refusing to wait, which a live
//! ring does not do), read buffers and the ring are leaked, never freed; a write keeps
//! waiting, since its buffer is the caller's. See io_uring(7), io_uring_enter(2).

use super::direct::{self, AlignedBuf, Span, ALIGN};
use bytes::Bytes;
use io_uring::{opcode, squeue, types, IoUring};
use std::cell::RefCell;
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// Entries of a reading thread's own ring (it has one read in flight at a time).
const THREAD_RING: u32 = 4;

/// Reads ahead in flight at once through the preloader's ring: the bench's cache disk
/// served ~10k reads/s of a 110 KB sample from 4 at once, about as many from 8; 16 keeps
/// a faster device busy too.
pub const PRELOAD_DEPTH: usize = 16;

/// Bytes of one write of a fill.
pub const WRITE_CHUNK: usize = 1 << 20;

/// Writes of one fill in flight at once.
pub const WRITES_IN_FLIGHT: usize = 8;

/// Largest single read or write submitted (the kernel's `MAX_RW_COUNT` is just under 2 GiB).
const MAX_OP: usize = 1 << 30;

/// A ring and how many of its operations the kernel has not completed yet.
struct Ring {
    ring: IoUring,
    in_flight: usize,
}

/// Errors of `io_uring_enter` that say nothing about the ring: wait again.
fn transient(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EINTR) | Some(libc::EAGAIN) | Some(libc::EBUSY)
    )
}

impl Ring {
    /// A ring of `entries` submission entries that has completed a no-op (seccomp filters can
    /// allow the set-up yet refuse submission).
    fn new(entries: u32) -> io::Result<Self> {
        let mut ring = Ring {
            ring: IoUring::new(entries)?,
            in_flight: 0,
        };
        let nop = opcode::Nop::new().build().user_data(u64::MAX);
        // SAFETY: a no-op references no memory.
        unsafe { ring.push(&nop)? };
        loop {
            for (_, res) in ring.wait()? {
                if res < 0 {
                    return Err(io::Error::from_raw_os_error(-res));
                }
            }
            if ring.in_flight == 0 {
                return Ok(ring);
            }
        }
    }

    /// Queues one operation (submitted by the next [`Ring::wait`]).
    ///
    /// # Safety
    /// The memory and the file the entry refers to must stay valid, and the memory untouched
    /// by anyone else, until the completion carrying its `user_data` was returned by
    /// [`Ring::wait`].
    unsafe fn push(&mut self, sqe: &squeue::Entry) -> io::Result<()> {
        // SAFETY: (caller) the entry's memory outlives its completion.
        unsafe { self.ring.submission().push(sqe) }
            .map_err(|_| io::Error::other("io_uring submission queue full"))?;
        self.in_flight += 1;
        Ok(())
    }

    /// Submits what was queued and waits for at least one completion when any operation is
    /// in flight; returns the completions as (user_data, result). An error means the ring
    /// failed with operations in flight, whose memory the kernel may still write.
    fn wait(&mut self) -> io::Result<Vec<(u64, i32)>> {
        if self.in_flight == 0 {
            return Ok(Vec::new());
        }
        loop {
            match self.ring.submit_and_wait(1) {
                Ok(_) => {}
                Err(e) if transient(&e) => {}
                Err(e) => return Err(e),
            }
            let done: Vec<(u64, i32)> = self
                .ring
                .completion()
                .map(|c| (c.user_data(), c.result()))
                .collect();
            if !done.is_empty() {
                self.in_flight -= done.len().min(self.in_flight);
                return Ok(done);
            }
        }
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        if self.in_flight > 0 {
            // Only a ring whose owner gave up on it (and leaked the memory its operations
            // use) gets here with operations in flight; closing it lets the kernel cancel them.
            tracing::debug!(
                in_flight = self.in_flight,
                "io_uring ring closed with operations in flight"
            );
        }
    }
}

thread_local! {
    /// The calling thread's ring for single reads, made on its first read.
    static THREAD: RefCell<Option<Ring>> = const { RefCell::new(None) };
}

/// `len` bytes at `offset` of `file` (opened with `O_DIRECT`), read through the calling
/// thread's ring into an aligned span around them; `UnexpectedEof` if the file is shorter.
/// Falls back to `pread` for this read when the thread cannot set up a ring.
pub fn read_exact_at(file: &File, offset: u64, len: usize) -> io::Result<Bytes> {
    if len == 0 {
        return Ok(Bytes::new());
    }
    let span = Span::around(offset, len)?;
    THREAD.with(|cell| {
        let Ok(mut slot) = cell.try_borrow_mut() else {
            return direct::read_exact_at(file, offset, len);
        };
        if slot.is_none() {
            match Ring::new(THREAD_RING) {
                Ok(ring) => *slot = Some(ring),
                Err(e) => {
                    tracing::debug!(error = %e, "no io_uring ring on this thread; pread instead");
                    return direct::read_exact_at(file, offset, len);
                }
            }
        }
        let Some(ring) = slot.as_mut() else {
            return direct::read_exact_at(file, offset, len);
        };
        let mut read = PendingRead {
            tag: (),
            file,
            span,
            buf: AlignedBuf::for_read(span.bytes)?,
            done: 0,
        };
        loop {
            // SAFETY: the buffer is owned by `read` and the file borrowed by it; both stay
            // alive and untouched until the completion is reaped below, or are leaked with
            // the ring when it fails.
            unsafe { read.submit(ring, 0) }?;
            match ring.wait() {
                Ok(done) => {
                    let res = done.first().map_or(0, |&(_, res)| res);
                    match read.completed(res) {
                        Step::Again => {}
                        Step::Done(out) => return out,
                    }
                }
                Err(e) => {
                    tracing::error!(error = %e, "io_uring_enter failed with a read in flight; ring abandoned");
                    std::mem::forget(read.buf);
                    if let Some(ring) = slot.take() {
                        std::mem::forget(ring);
                    }
                    return Err(e);
                }
            }
        }
    })
}

/// One direct read of an aligned span, possibly in several submissions (short reads).
struct PendingRead<T, F> {
    tag: T,
    file: F,
    span: Span,
    buf: AlignedBuf,
    /// Bytes of the span read so far.
    done: usize,
}

/// What a completion means for a read.
enum Step {
    /// A short read that did not reach the end of the file: submit the rest.
    Again,
    /// The read is over (its bytes, or why not).
    Done(io::Result<Bytes>),
}

impl<T, F: std::ops::Deref<Target = File>> PendingRead<T, F> {
    /// Queues the read of the span's remaining bytes, tagged `user_data`.
    ///
    /// # Safety
    /// `self` (its buffer and file) must stay in place, alive and untouched until the
    /// completion was reaped, or be leaked.
    unsafe fn submit(&mut self, ring: &mut Ring, user_data: u64) -> io::Result<()> {
        let want = (self.span.bytes - self.done).min(MAX_OP);
        // SAFETY: `done` < the buffer's capacity (`span.bytes`); the read writes at most
        // `want` bytes from there, inside the allocation.
        let at = unsafe { self.buf.as_mut_ptr().add(self.done) };
        let sqe = opcode::Read::new(types::Fd(self.file.as_raw_fd()), at, want as u32)
            .offset(self.span.start + self.done as u64)
            .build()
            .user_data(user_data);
        // SAFETY: (caller) the buffer and file outlive the completion.
        unsafe { ring.push(&sqe) }
    }

    /// Takes a completion's result into account.
    fn completed(&mut self, res: i32) -> Step {
        if res < 0 {
            return Step::Done(Err(io::Error::from_raw_os_error(-res)));
        }
        let n = res as usize;
        // SAFETY: the kernel reported writing `n` bytes from `done` on.
        unsafe { self.buf.assume_init(self.done + n) };
        self.done += n;
        // A direct read that ends off a block boundary (or reads nothing) hit the end.
        if n > 0 && self.done < self.span.bytes && self.done % ALIGN == 0 {
            return Step::Again;
        }
        let buf = std::mem::replace(&mut self.buf, AlignedBuf::empty());
        Step::Done(self.span.finish(buf, self.done))
    }
}

/// Reads of direct-I/O files, many in flight at once from one thread: [`ReadQueue::push`]
/// reads, [`ReadQueue::wait`] for the next ones done. Each read is tagged with a `T` of the
/// caller's. The queue owns every buffer and file until the read completed.
pub struct ReadQueue<T> {
    ring: Ring,
    slots: Vec<Option<PendingRead<T, Arc<File>>>>,
    free: Vec<usize>,
    /// Reads finished without the kernel (no bytes asked, or an error before submission).
    ready: Vec<(T, io::Result<Bytes>)>,
    depth: usize,
    /// The ring failed with reads in flight; it is not used again.
    broken: bool,
}

impl<T> ReadQueue<T> {
    /// A queue of up to `depth` reads in flight, with a ring of its own.
    pub fn new(depth: usize) -> io::Result<Self> {
        let depth = depth.clamp(1, 4096);
        Ok(ReadQueue {
            ring: Ring::new(depth as u32)?,
            slots: Vec::new(),
            free: Vec::new(),
            ready: Vec::new(),
            depth,
            broken: false,
        })
    }

    /// Reads pushed and not returned by [`ReadQueue::wait`] yet.
    pub fn len(&self) -> usize {
        self.slots.len() - self.free.len() + self.ready.len()
    }

    /// True when no read is pending.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether another read may be pushed without waiting.
    pub fn has_room(&self) -> bool {
        self.slots.len() - self.free.len() < self.depth
    }

    /// Queues a read of `len` bytes at `offset` of `file` (opened with `O_DIRECT`), tagged
    /// `tag`; its result comes out of [`ReadQueue::wait`]. The caller checks
    /// [`ReadQueue::has_room`] first (a read pushed past it fails).
    pub fn push(&mut self, tag: T, file: Arc<File>, offset: u64, len: usize) {
        if len == 0 {
            self.ready.push((tag, Ok(Bytes::new())));
            return;
        }
        if self.broken || !self.has_room() {
            let e = io::Error::other(if self.broken {
                "io_uring read queue broken"
            } else {
                "io_uring read queue full"
            });
            self.ready.push((tag, Err(e)));
            return;
        }
        let prepared = Span::around(offset, len)
            .and_then(|span| Ok((span, AlignedBuf::for_read(span.bytes)?)));
        let (span, buf) = match prepared {
            Ok(p) => p,
            Err(e) => {
                self.ready.push((tag, Err(e)));
                return;
            }
        };
        let read = PendingRead {
            tag,
            file,
            span,
            buf,
            done: 0,
        };
        let slot = self.free.pop().unwrap_or_else(|| {
            self.slots.push(None);
            self.slots.len() - 1
        });
        let read = self.slots[slot].insert(read);
        // SAFETY: the read (buffer and file) stays in `slots[slot]`, not moved (the Vec of
        // slots may reallocate, but a slot holds the buffer's pointer, not the buffer's
        // memory) and not dropped until its completion was reaped in `wait`, or leaked.
        if let Err(e) = unsafe { read.submit(&mut self.ring, slot as u64) } {
            if let Some(r) = self.slots[slot].take() {
                self.ready.push((r.tag, Err(e)));
            }
            self.free.push(slot);
        }
    }

    /// Whether the ring failed (see [`ReadQueue::wait`]); reads pushed since fail at once.
    pub fn is_broken(&self) -> bool {
        self.broken
    }

    /// Waits for at least one pushed read to end (none when nothing is pending) and returns
    /// those that ended. When the ring fails, every read in flight comes back as that error
    /// (its buffer leaked: the kernel may still write it) and the queue is broken.
    pub fn wait(&mut self) -> Vec<(T, io::Result<Bytes>)> {
        let mut out = std::mem::take(&mut self.ready);
        if !out.is_empty() {
            return out;
        }
        let done = match self.ring.wait() {
            Ok(d) => d,
            Err(e) => {
                tracing::error!(error = %e, "io_uring_enter failed with reads in flight; ring abandoned");
                self.broken = true;
                for tag in self.abandon() {
                    out.push((tag, Err(io::Error::new(e.kind(), e.to_string()))));
                }
                return out;
            }
        };
        for (slot, res) in done {
            let slot = slot as usize;
            let Some(read) = self.slots.get_mut(slot).and_then(Option::as_mut) else {
                continue;
            };
            match read.completed(res) {
                Step::Again => {
                    // SAFETY: as in `push`: the read stays in its slot until completion.
                    if let Err(e) = unsafe { read.submit(&mut self.ring, slot as u64) } {
                        if let Some(r) = self.slots[slot].take() {
                            out.push((r.tag, Err(e)));
                        }
                        self.free.push(slot);
                    }
                }
                Step::Done(result) => {
                    if let Some(r) = self.slots[slot].take() {
                        out.push((r.tag, result));
                    }
                    self.free.push(slot);
                }
            }
        }
        out
    }

    /// Leaks the buffer and file of every read in flight (the kernel may still write the
    /// buffers) and returns their tags.
    fn abandon(&mut self) -> Vec<T> {
        let mut tags = Vec::new();
        for r in self.slots.drain(..).flatten() {
            let PendingRead { tag, file, buf, .. } = r;
            std::mem::forget(buf);
            std::mem::forget(file);
            tags.push(tag);
        }
        self.free.clear();
        tags
    }
}

impl<T> Drop for ReadQueue<T> {
    fn drop(&mut self) {
        // Reap what is in flight before the buffers go.
        while !self.broken && self.ring.in_flight > 0 {
            match self.ring.wait() {
                Ok(done) => {
                    for (slot, _) in done {
                        if let Some(s) = self.slots.get_mut(slot as usize) {
                            *s = None;
                        }
                    }
                }
                Err(_) => {
                    self.broken = true;
                    self.abandon();
                    return;
                }
            }
        }
    }
}

/// Creates `path` (mode 0600; it must not exist) and writes `data` (which must start on an
/// [`ALIGN`] boundary) with `O_DIRECT` through a ring of its own: the whole blocks straight
/// from `data` in [`WRITE_CHUNK`]-byte writes, up to [`WRITES_IN_FLIGHT`] at once, the last
/// partial block from a zero-padded copy, then the file is cut to `data.len()`. Errors as
/// the system gives them (`EINVAL`: the file system does not take these alignments); the
/// caller removes a partial file. Writes with `pwrite` when no ring can be set up.
pub fn write_new(path: &Path, data: &[u8]) -> io::Result<()> {
    if !direct::is_aligned(data) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "direct write from an unaligned buffer",
        ));
    }
    let mut ring = match Ring::new(WRITES_IN_FLIGHT as u32) {
        Ok(r) => r,
        Err(e) => {
            tracing::debug!(error = %e, "no io_uring ring for a write; pwrite instead");
            return direct::write_new(path, data);
        }
    };
    let file = direct::create_new(path, data.len() as u64)?;
    let body = data.len() & !(ALIGN - 1);
    let tail = direct::padded_tail(data)?;
    // (offset in the file, the bytes to write there)
    let mut pieces: Vec<(u64, &[u8])> = data[..body]
        .chunks(WRITE_CHUNK)
        .enumerate()
        .map(|(i, c)| ((i * WRITE_CHUNK) as u64, c))
        .collect();
    if let Some(t) = &tail {
        pieces.push((body as u64, &t[..]));
    }
    write_pieces(&mut ring, &file, pieces)?;
    if tail.is_some() {
        file.set_len(data.len() as u64)?;
    }
    Ok(())
}

/// A new file written with `O_DIRECT` piece by piece, at any offsets and in any order (the
/// parts of a download as they land), through a ring of its own, or `pwrite` when no ring
/// can be had (or none is wanted).
pub struct PieceWriter {
    file: File,
    ring: Option<Ring>,
    /// The file's final length.
    len: u64,
}

impl PieceWriter {
    /// Creates `path` (mode 0600; it must not exist) for a file of `len` bytes, written
    /// through io_uring if `uring`.
    pub fn create(path: &Path, len: u64, uring: bool) -> io::Result<Self> {
        let file = direct::create_new(path, len)?;
        let ring = if uring {
            Ring::new(WRITES_IN_FLIGHT as u32)
                .map_err(|e| tracing::debug!(error = %e, "no io_uring ring for a staged write; pwrite instead"))
                .ok()
        } else {
            None
        };
        Ok(Self { file, ring, len })
    }

    /// Writes `data` at byte `at`. `at` and `data`'s address must be [`ALIGN`]ed, and so
    /// must its length unless it ends the file: then its last partial block is written from
    /// a zero-padded copy and the file cut to its length. `InvalidInput` otherwise.
    pub fn write_at(&mut self, at: u64, data: &[u8]) -> io::Result<()> {
        let end = at.saturating_add(data.len() as u64);
        let body = data.len() & !(ALIGN - 1);
        if at % ALIGN as u64 != 0
            || !direct::is_aligned(data)
            || end > self.len
            || (body != data.len() && end != self.len)
        {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a staged piece off the block boundaries",
            ));
        }
        let tail = direct::padded_tail(data)?;
        let mut pieces: Vec<(u64, &[u8])> = data[..body]
            .chunks(WRITE_CHUNK)
            .enumerate()
            .map(|(i, c)| (at + (i * WRITE_CHUNK) as u64, c))
            .collect();
        if let Some(t) = &tail {
            pieces.push((at + body as u64, &t[..]));
        }
        match self.ring.as_mut() {
            Some(ring) => write_pieces(ring, &self.file, pieces)?,
            None => {
                use std::os::unix::fs::FileExt;
                for (at, bytes) in pieces {
                    self.file.write_all_at(bytes, at)?;
                }
            }
        }
        if tail.is_some() {
            self.file.set_len(self.len)?;
        }
        Ok(())
    }
}

/// Writes each piece at its offset, up to the ring's depth at once, resubmitting the rest
/// of a short write. Returns only when no write is in flight (the pieces are the caller's
/// memory); the first error, after the writes in flight completed.
fn write_pieces(ring: &mut Ring, file: &File, mut pieces: Vec<(u64, &[u8])>) -> io::Result<()> {
    pieces.reverse();
    // Pieces in flight, by user_data: (offset, bytes).
    let mut flying: Vec<Option<(u64, &[u8])>> = vec![None; WRITES_IN_FLIGHT];
    let mut first_error: Option<io::Error> = None;
    loop {
        while first_error.is_none() {
            let Some(slot) = flying.iter().position(Option::is_none) else {
                break;
            };
            let Some((at, bytes)) = pieces.pop() else {
                break;
            };
            let len = bytes.len().min(MAX_OP);
            let sqe = opcode::Write::new(types::Fd(file.as_raw_fd()), bytes.as_ptr(), len as u32)
                .offset(at)
                .build()
                .user_data(slot as u64);
            // SAFETY: `bytes` borrows the caller's data (or the padded tail, owned by the
            // caller of this function), and `file` is borrowed: both outlive this function,
            // which returns only once every write it queued has completed (`ring.in_flight`
            // is 0). The kernel only reads the memory.
            match unsafe { ring.push(&sqe) } {
                Ok(()) => flying[slot] = Some((at, &bytes[..len])),
                Err(e) => first_error = Some(e),
            }
        }
        if ring.in_flight == 0 {
            return match first_error {
                Some(e) => Err(e),
                None => Ok(()),
            };
        }
        let done = wait_for_writes(ring);
        for (slot, res) in done {
            let Some((at, bytes)) = flying.get_mut(slot as usize).and_then(Option::take) else {
                continue;
            };
            if res < 0 {
                first_error.get_or_insert(io::Error::from_raw_os_error(-res));
            } else if (res as usize) < bytes.len() {
                if res == 0 {
                    first_error.get_or_insert(io::Error::from(io::ErrorKind::WriteZero));
                } else {
                    // A short write: the rest goes again, next.
                    let n = res as usize;
                    pieces.push((at + n as u64, &bytes[n..]));
                }
            }
        }
    }
}

/// [`Ring::wait`] for writes: their memory is the caller's, so this never gives up while one
/// is in flight; a ring that keeps failing is waited on again (and logged), not left.
fn wait_for_writes(ring: &mut Ring) -> Vec<(u64, i32)> {
    let mut tries = 0u64;
    loop {
        match ring.wait() {
            Ok(done) => return done,
            Err(e) => {
                if tries % 1000 == 0 {
                    tracing::error!(error = %e, in_flight = ring.in_flight, "io_uring_enter fails with writes in flight; waiting for them");
                }
                tries += 1;
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }
}

/// Pieces read ahead of a [`read_in_order`] caller.
const AHEAD: usize = 4;

/// Reads the first `len` bytes of `file` (opened with `O_DIRECT`) in order, in `piece`-byte
/// pieces (a multiple of [`ALIGN`]), and hands each to `take` in turn, while up to [`AHEAD`]
/// pieces are read ahead through a ring of its own. The pieces' buffers are registered with
/// the ring (fixed buffers): the same few buffers are read into again and again, so their
/// pages are pinned once, not on every read. `UnexpectedEof` if the file is shorter. Falls
/// back to one `pread` at a time without a ring.
pub fn read_in_order(
    file: &File,
    len: u64,
    piece: usize,
    mut take: impl FnMut(&[u8]),
) -> io::Result<()> {
    let piece = direct::round_up(piece.max(1)).unwrap_or(ALIGN).min(MAX_OP);
    let pieces = len.div_ceil(piece as u64);
    let mut bufs = (0..AHEAD.min(pieces as usize).max(1))
        .map(|_| AlignedBuf::zeroed(piece))
        .collect::<io::Result<Vec<_>>>()?;
    let mut ring = match Ring::new(AHEAD as u32) {
        Ok(r) => r,
        Err(_) => return read_in_order_pread(file, len, &mut bufs[0], take),
    };
    let iovecs: Vec<libc::iovec> = bufs
        .iter_mut()
        .map(|b| libc::iovec {
            iov_base: b.as_mut_ptr().cast(),
            iov_len: b.capacity(),
        })
        .collect();
    // SAFETY: the buffers stay allocated (owned by `bufs`, which is dropped after `ring`:
    // declared before it) for as long as the ring that registered them lives, or are leaked
    // with it.
    let fixed = unsafe { ring.ring.submitter().register_buffers(&iovecs) }.is_ok();
    // The length of piece `k`.
    let want = |k: u64| (len - k * piece as u64).min(piece as u64) as usize;
    let (mut next, mut done) = (0u64, 0u64);
    // Bytes read into each buffer, once its read completed.
    let mut got: Vec<Option<io::Result<usize>>> = bufs.iter().map(|_| None).collect();
    let mut failed: Option<io::Error> = None;
    loop {
        while failed.is_none() && next < pieces && next < done + bufs.len() as u64 {
            let slot = (next % bufs.len() as u64) as usize;
            let span = direct::round_up(want(next)).unwrap_or(piece);
            let at = next * piece as u64;
            let ptr = bufs[slot].as_mut_ptr();
            let fd = types::Fd(file.as_raw_fd());
            let sqe = if fixed {
                opcode::ReadFixed::new(fd, ptr, span as u32, slot as u16)
                    .offset(at)
                    .build()
            } else {
                opcode::Read::new(fd, ptr, span as u32).offset(at).build()
            };
            // SAFETY: buffer `slot` (`span` ≤ its capacity) is not read by anyone until this
            // read's completion was reaped below (its piece is consumed only after), and
            // this function does not return while a read is in flight (or leaks the buffers
            // with the ring); `file` is borrowed for the whole call.
            match unsafe { ring.push(&sqe.user_data(slot as u64)) } {
                Ok(()) => next += 1,
                Err(e) => failed = Some(e),
            }
        }
        // Consume the pieces that are done, in order.
        while failed.is_none() && done < next {
            let slot = (done % bufs.len() as u64) as usize;
            let Some(result) = got[slot].take() else {
                break;
            };
            let w = want(done);
            let n = match result {
                Ok(n) if n >= w => n,
                // A short read before the end: read the piece again, synchronously.
                Ok(_) => {
                    match direct::read_exact_into(file, &mut bufs[slot], done * piece as u64, w) {
                        Ok(_) => w,
                        Err(e) => {
                            failed = Some(e);
                            break;
                        }
                    }
                }
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            };
            // SAFETY: the completed read wrote `n` bytes from the buffer's start.
            unsafe { bufs[slot].assume_init(n) };
            bufs[slot].set_len(w);
            take(&bufs[slot]);
            done += 1;
        }
        if ring.in_flight == 0 {
            if let Some(e) = failed {
                return Err(e);
            }
            if done == pieces {
                return Ok(());
            }
            continue;
        }
        match ring.wait() {
            Ok(completions) => {
                for (slot, res) in completions {
                    if let Some(g) = got.get_mut(slot as usize) {
                        *g = Some(if res < 0 {
                            Err(io::Error::from_raw_os_error(-res))
                        } else {
                            Ok(res as usize)
                        });
                    }
                }
            }
            Err(e) => {
                tracing::error!(error = %e, "io_uring_enter failed with reads in flight; ring abandoned");
                std::mem::forget(ring);
                std::mem::forget(bufs);
                return Err(e);
            }
        }
    }
}

/// [`read_in_order`] with one `pread` at a time into `buf`.
fn read_in_order_pread(
    file: &File,
    len: u64,
    buf: &mut AlignedBuf,
    mut take: impl FnMut(&[u8]),
) -> io::Result<()> {
    let piece = buf.capacity();
    let mut at = 0u64;
    while at < len {
        let want = (len - at).min(piece as u64) as usize;
        take(direct::read_exact_into(file, buf, at, want)?);
        at += want as u64;
    }
    Ok(())
}

/// Checks that io_uring with `O_DIRECT` works in `dir` (whose file system takes direct I/O):
/// a probe file written and read back through rings, then removed.
pub fn probe(dir: &Path) -> io::Result<()> {
    let path = dir.join(format!("uring-direct-probe.{}", std::process::id()));
    let result = (|| -> io::Result<()> {
        // Through a ring of its own: `write_new` falls back to pwrite silently.
        Ring::new(1)?;
        let mut data = AlignedBuf::zeroed(2 * ALIGN + 100)?;
        for (i, b) in data.iter_mut().enumerate() {
            *b = (i % 251) as u8;
        }
        write_new(&path, &data)?;
        let file = direct::open_read(&path)?;
        let mut queue = ReadQueue::new(2)?;
        queue.push((), Arc::new(file), 50, 2 * ALIGN);
        let mut got = Vec::new();
        while !queue.is_empty() {
            got.extend(queue.wait());
        }
        match got.pop() {
            Some(((), Ok(back))) if back[..] == data[50..50 + 2 * ALIGN] => Ok(()),
            Some(((), Err(e))) => Err(e),
            _ => Err(io::Error::other("io_uring direct read gave other bytes")),
        }
    })();
    let _ = std::fs::remove_file(&path);
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A temporary folder whose file system takes direct I/O (the system's temp folder, else
    /// /var/tmp, else the folder the tests run in: the crate's); the test fails when there is
    /// none, since it could check nothing.
    fn direct_dir() -> tempfile::TempDir {
        let mut candidates = vec![std::env::temp_dir(), "/var/tmp".into()];
        candidates.extend(std::env::current_dir());
        for dir in candidates {
            if let Ok(t) = tempfile::tempdir_in(&dir) {
                if direct::probe(t.path()) {
                    return t;
                }
            }
        }
        panic!("no folder here takes O_DIRECT (tried the temp folder, /var/tmp, the crate)");
    }

    /// `size` bytes of a pattern that differs at every offset of a block.
    fn pattern(size: usize) -> AlignedBuf {
        let mut data = AlignedBuf::zeroed(size).unwrap();
        for (i, b) in data.iter_mut().enumerate() {
            *b = (i * 7 % 251) as u8 ^ (i >> 12) as u8;
        }
        data
    }

    /// Awkward ranges of a `size`-byte file: unaligned starts and lengths, the whole file,
    /// the last byte, ranges over block boundaries.
    fn ranges(size: usize) -> Vec<(usize, usize)> {
        [
            (0, size),
            (1, size - 1),
            (size / 3, size - size / 3),
            (size - 1, 1),
            (ALIGN - 1, 2),
            (ALIGN + 17, 3 * ALIGN + 5),
            (5, 0),
        ]
        .into_iter()
        .filter(|&(off, len)| off + len <= size)
        .collect()
    }

    #[test]
    fn a_ring_is_there_and_completes_a_no_op() {
        // Not a skip where io_uring is missing: these tests need it.
        Ring::new(4).expect("io_uring with a working no-op");
    }

    #[test]
    fn fills_written_through_the_ring_read_back_exactly() {
        let dir = direct_dir();
        probe(dir.path()).expect("io_uring with O_DIRECT works in a folder that takes O_DIRECT");
        for size in [
            1,
            100,
            ALIGN,
            ALIGN + 1,
            WRITE_CHUNK,
            3 * WRITE_CHUNK + 4097,
            (WRITES_IN_FLIGHT + 3) * WRITE_CHUNK - 1,
        ] {
            let data = pattern(size);
            let path = dir.path().join(format!("f{size}"));
            write_new(&path, &data).unwrap();
            let back = std::fs::read(&path).unwrap();
            assert!(back == data[..], "size {size}: the file holds other bytes");
            assert!(
                write_new(&path, &data).is_err(),
                "an existing file is refused"
            );
        }
        let unaligned = vec![1u8; ALIGN + 1];
        let off = usize::from(direct::is_aligned(&unaligned));
        let e = write_new(&dir.path().join("u"), &unaligned[off..]).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    }

    /// A new cache file has its blocks and its (block-rounded) size from the start, so that
    /// no write of it extends it (see `direct::reserve`), and ends at its exact length with
    /// its bytes, its parts written in any order, through the ring or `pwrite`.
    #[test]
    fn new_files_are_reserved_whole_before_their_pieces_and_end_exact() {
        use std::os::unix::fs::MetadataExt;
        let dir = direct_dir();
        for (n, (size, uring)) in [
            (3 * WRITE_CHUNK + 4097, true),
            (3 * WRITE_CHUNK + 4097, false),
            (2 * WRITE_CHUNK, true),
        ]
        .into_iter()
        .enumerate()
        {
            let data = pattern(size);
            let path = dir.path().join(format!("p{n}"));
            let mut w = PieceWriter::create(&path, size as u64, uring).unwrap();
            let meta = std::fs::metadata(&path).unwrap();
            let rounded = size.div_ceil(ALIGN) * ALIGN;
            assert_eq!(
                meta.len(),
                rounded as u64,
                "size {size}: sized before any write"
            );
            assert!(
                meta.blocks() * 512 >= rounded as u64,
                "size {size}: {} bytes of blocks reserved",
                meta.blocks() * 512
            );
            // The last part first, then the rest backwards.
            let mut parts: Vec<usize> = (0..size).step_by(WRITE_CHUNK).collect();
            parts.reverse();
            for at in parts {
                let end = (at + WRITE_CHUNK).min(size);
                w.write_at(at as u64, &data[at..end]).unwrap();
            }
            drop(w);
            assert!(std::fs::read(&path).unwrap() == data[..], "size {size}");
        }
        let data = pattern(WRITE_CHUNK + 1);
        let path = dir.path().join("whole");
        write_new(&path, &data).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().len(), data.len() as u64);
        assert!(std::fs::read(&path).unwrap() == data[..]);
    }

    #[test]
    fn single_reads_through_the_threads_ring_give_the_files_bytes() {
        let dir = direct_dir();
        for size in [1, ALIGN - 3, ALIGN, 5 * ALIGN + 77, 300_001] {
            let data = pattern(size);
            let path = dir.path().join(format!("f{size}"));
            std::fs::write(&path, &data[..]).unwrap();
            let file = direct::open_read(&path).unwrap();
            for (off, len) in ranges(size) {
                let got = read_exact_at(&file, off as u64, len).unwrap();
                assert!(
                    got[..] == data[off..off + len],
                    "size {size} at {off}+{len}"
                );
            }
            // Across the end, and past it.
            for (off, len) in [(size - 1, 2), (size, 1), (size + ALIGN, 10)] {
                let e = read_exact_at(&file, off as u64, len).unwrap_err();
                assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof, "{off}+{len}");
            }
        }
        let used_a_ring = THREAD.with(|c| c.borrow().as_ref().map(|r| r.in_flight));
        assert_eq!(
            used_a_ring,
            Some(0),
            "the reads went through this thread's ring"
        );
    }

    #[test]
    fn files_read_in_order_through_fixed_buffers_come_back_whole() {
        let dir = direct_dir();
        for size in [1, ALIGN, 3 * ALIGN + 5, 9 * ALIGN] {
            let data = pattern(size);
            let path = dir.path().join(format!("f{size}"));
            std::fs::write(&path, &data[..]).unwrap();
            let file = direct::open_read(&path).unwrap();
            for piece in [ALIGN, 2 * ALIGN] {
                let mut back = Vec::new();
                read_in_order(&file, size as u64, piece, |b| {
                    assert!(b.len() <= piece);
                    back.extend_from_slice(b)
                })
                .unwrap();
                assert!(back == data[..], "size {size} in pieces of {piece}");
            }
            let e = read_in_order(&file, size as u64 + 1, ALIGN, |_| {}).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof, "size {size}");
        }
    }

    #[test]
    fn many_reads_in_flight_come_back_each_with_its_bytes() {
        let dir = direct_dir();
        let size = 2 << 20;
        let data = pattern(size);
        let path = dir.path().join("shard");
        std::fs::write(&path, &data[..]).unwrap();
        let file = Arc::new(direct::open_read(&path).unwrap());
        let mut queue = ReadQueue::new(8).unwrap();
        // Reads of 0 to ~200 KB at awkward offsets, more than the queue's depth, and some
        // that run past the end.
        let mut asked: Vec<(usize, usize)> = (0..100)
            .map(|k: usize| ((k * 104_729 + k * k * 31) % size, (k * 2_003) % 200_000))
            .collect();
        asked.push((size - 10, 20));
        let mut pending: Vec<usize> = (0..asked.len()).rev().collect();
        let mut results = vec![None; asked.len()];
        let mut most_in_flight = 0;
        while !pending.is_empty() || !queue.is_empty() {
            while queue.has_room() {
                let Some(k) = pending.pop() else { break };
                let (off, len) = asked[k];
                queue.push(k, file.clone(), off as u64, len);
            }
            most_in_flight = most_in_flight.max(queue.len());
            for (k, read) in queue.wait() {
                results[k] = Some(read.map_err(|e| e.kind()));
            }
        }
        assert!(!queue.is_broken());
        assert!(most_in_flight >= 8, "the queue ran full: {most_in_flight}");
        for (k, &(off, len)) in asked.iter().enumerate() {
            match results[k].take() {
                Some(Ok(b)) if off + len <= size => {
                    assert!(b[..] == data[off..off + len], "read {k}: {off}+{len}")
                }
                Some(Err(io::ErrorKind::UnexpectedEof)) if off + len > size => {}
                other => panic!("read {k} at {off}+{len}: {other:?}"),
            }
        }
    }
}
