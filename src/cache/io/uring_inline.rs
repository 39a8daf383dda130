//! The inline io_uring reader: one small ring per calling thread, submitted and reaped by
//! that thread. No hand-off between threads, so a page-cache hit costs one `io_uring_enter`
//! (like one `pread`) instead of two thread wake-ups. `bench/store_cache.rs` measured it at
//! 0.6–0.95× pread, against 0.01–0.85× for the ring threads of `uring.rs`, on a busy
//! 2-vCPU VM; it is what `IoMode::Auto` uses.

use super::FileReader;
use io_uring::{opcode, types, IoUring};
use std::cell::RefCell;
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::sync::Arc;

const MAX_READ: usize = 1 << 30;

thread_local! {
    static RING: RefCell<Option<IoUring>> = const { RefCell::new(None) };
}

/// Reads through a per-thread io_uring, on the calling thread.
#[derive(Debug)]
pub(crate) struct InlineUringReader;

impl InlineUringReader {
    /// Checks that io_uring works here (set-up and a no-op round trip).
    pub(crate) fn new() -> io::Result<Self> {
        with_ring(|ring| {
            let nop = opcode::Nop::new().build().user_data(0);
            // SAFETY: a no-op references no memory.
            unsafe { ring.submission().push(&nop) }
                .map_err(|_| io::Error::other("io_uring queue full"))?;
            ring.submit_and_wait(1)?;
            match ring.completion().next() {
                Some(c) if c.result() >= 0 => Ok(InlineUringReader),
                Some(c) => Err(io::Error::from_raw_os_error(-c.result())),
                None => Err(io::Error::other("io_uring no-op did not complete")),
            }
        })
    }
}

fn with_ring<T>(f: impl FnOnce(&mut IoUring) -> io::Result<T>) -> io::Result<T> {
    RING.with(|cell| {
        let mut slot = cell
            .try_borrow_mut()
            .map_err(|_| io::Error::other("io_uring ring busy"))?;
        if slot.is_none() {
            *slot = Some(IoUring::new(4)?);
        }
        match slot.as_mut() {
            Some(ring) => f(ring),
            None => Err(io::Error::other("no io_uring ring")),
        }
    })
}

/// Why a read failed: `Done` errors left no request in flight; `InFlight` ones may have (a
/// failed `io_uring_enter` after submission), so buffer and ring must never be reused.
enum ReadError {
    Done(io::Error),
    InFlight(io::Error),
}

/// One read into `buf`; returns the byte count.
fn read_into(
    ring: &mut IoUring,
    file: &File,
    offset: u64,
    buf: &mut [std::mem::MaybeUninit<u8>],
) -> Result<usize, ReadError> {
    let sqe = opcode::Read::new(
        types::Fd(file.as_raw_fd()),
        buf.as_mut_ptr().cast::<u8>(),
        buf.len() as u32,
    )
    .offset(offset)
    .build()
    .user_data(1);
    // SAFETY: `buf` and `file` stay borrowed until this function returns, and it returns
    // only after this entry's completion was reaped, or with `InFlight`, after which the
    // caller leaks both the buffer and the ring, so the kernel never writes into memory
    // that is reused.
    unsafe { ring.submission().push(&sqe) }
        .map_err(|_| ReadError::Done(io::Error::other("io_uring queue full")))?;
    loop {
        match ring.submit_and_wait(1) {
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(ReadError::InFlight(e)),
        }
        if let Some(c) = ring.completion().next() {
            return if c.result() < 0 {
                Err(ReadError::Done(io::Error::from_raw_os_error(-c.result())))
            } else {
                Ok(c.result() as usize)
            };
        }
    }
}

impl FileReader for InlineUringReader {
    fn name(&self) -> &'static str {
        "io_uring-inline"
    }

    fn read_exact_at(&self, file: &Arc<File>, offset: u64, len: usize) -> io::Result<Vec<u8>> {
        // Uninitialised capacity: the kernel fills it; zero-filling first would cost a memset.
        let mut buf: Vec<u8> = Vec::with_capacity(len);
        let mut done = 0;
        // Outer error: a read may be in flight; inner: an ordinary failure.
        let result: io::Result<io::Result<()>> = with_ring(|ring| {
            while done < len {
                let end = (done + MAX_READ).min(len);
                let spare = &mut buf.spare_capacity_mut()[done..end];
                match read_into(ring, file, offset + done as u64, spare) {
                    Ok(0) => {
                        let eof = io::Error::new(
                            io::ErrorKind::UnexpectedEof,
                            "file shorter than the requested range",
                        );
                        return Ok(Err(eof));
                    }
                    Ok(n) => done += n,
                    Err(ReadError::Done(e)) => return Ok(Err(e)),
                    Err(ReadError::InFlight(e)) => return Err(e),
                }
            }
            Ok(Ok(()))
        });
        match result {
            Ok(Ok(())) => {
                // SAFETY: the kernel wrote all `len` bytes (done == len).
                unsafe { buf.set_len(len) };
                Ok(buf)
            }
            Ok(Err(e)) => Err(e),
            Err(e) => {
                // Leak the buffer and this thread's ring (the kernel keeps both valid); the
                // next call on this thread sets up a fresh ring.
                tracing::error!(error = %e, "io_uring_enter failed with a read in flight; ring abandoned");
                std::mem::forget(buf);
                RING.with(|cell| {
                    if let Ok(mut slot) = cell.try_borrow_mut() {
                        if let Some(ring) = slot.take() {
                            std::mem::forget(ring);
                        }
                    }
                });
                Err(e)
            }
        }
    }
}
