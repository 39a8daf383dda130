//! Direct I/O (`O_DIRECT`) of cached shard files, past the kernel's page cache.
//!
//! A sample a reader reads through the mount lands in the page cache of the mount's own file
//! (that is what serves a later epoch from memory). Reading it out of the cached shard file
//! through the page cache as well would hold every byte twice in RAM, and fill a second set of
//! pages per byte read: on this project's bench machine (a KVM guest that hands free memory
//! back to its host) a page not touched lately costs ~10 µs to fill, so buffered reads of a
//! cold cache file ran at 471 MB/s against 1.0 GB/s direct, and a buffered write of a fresh
//! 64 MiB shard took ~165 ms of CPU against ~60 ms of device time direct.
//!
//! `O_DIRECT` wants the buffer address, file offset and length aligned to the device's
//! logical block size; [`ALIGN`] (4 KiB) covers the usual 512-byte and 4 KiB devices. A
//! read takes the aligned span around the asked range and hands back the range inside it; a
//! write writes the aligned body from its (aligned) buffer, the last partial block from a
//! zero-padded copy, then cuts the file to its length. [`probe`] checks once per cache folder
//! that its file system takes direct I/O at all (tmpfs before Linux 6.6, some network and
//! FUSE file systems do not); the cache then reads and writes the usual buffered way.
//! See open(2), "O_DIRECT".

use super::page_pool;
use bytes::Bytes;
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::ptr::NonNull;

/// Alignment of buffers, offsets and lengths for direct I/O.
pub const ALIGN: usize = 4096;

/// `n` rounded up to a multiple of [`ALIGN`] (`None` on overflow).
pub(super) fn round_up(n: usize) -> Option<usize> {
    n.checked_add(ALIGN - 1).map(|x| x & !(ALIGN - 1))
}

/// A heap buffer whose start is [`ALIGN`]-aligned and whose capacity is a multiple of it,
/// for direct I/O. A zeroed buffer has every byte of its capacity initialised (zeros, or
/// bytes left from earlier use), so its visible length may be set anywhere up to the
/// capacity; a buffer made for a read shows only what the read wrote.
pub struct AlignedBuf {
    ptr: NonNull<u8>,
    len: usize,
    cap: usize,
    /// Bytes from the start known to be initialised (the most `len` may be).
    init: usize,
    /// Where the memory came from (and goes back to).
    origin: Origin,
}

/// Where an [`AlignedBuf`]'s memory came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Origin {
    /// The global allocator.
    Allocator,
    /// mmap(2) (large zeroed buffers), unmapped on drop.
    Mapped,
    /// The page pool (mid-sized buffers for reads and kept samples), given back on drop.
    Pooled,
}

/// Zeroed buffers of at least this many bytes are mapped straight from the kernel: its pages
/// come zeroed when first touched, where the allocator would zero the whole buffer up front
/// for an alignment above 16 bytes (a 64 MiB memset before a download could start).
const MAP_AT_LEAST: usize = 1 << 20;

// SAFETY: AlignedBuf owns its allocation exclusively, like Vec<u8>.
unsafe impl Send for AlignedBuf {}
// SAFETY: shared access is read-only through `&[u8]`.
unsafe impl Sync for AlignedBuf {}

impl AlignedBuf {
    fn layout(cap: usize) -> io::Result<std::alloc::Layout> {
        std::alloc::Layout::from_size_align(cap, ALIGN)
            .map_err(|_| io::Error::new(io::ErrorKind::OutOfMemory, "buffer too large"))
    }

    /// `len` zeroed bytes (capacity `len` rounded up to [`ALIGN`]; no allocation for 0).
    pub fn zeroed(len: usize) -> io::Result<Self> {
        if len == 0 {
            return Ok(Self::empty());
        }
        let cap = round_up(len)
            .ok_or_else(|| io::Error::new(io::ErrorKind::OutOfMemory, "buffer too large"))?;
        if cap >= MAP_AT_LEAST {
            // Page-aligned, so ALIGN-aligned; pages are zero-filled on first touch.
            let ptr = page_pool::map(cap)?;
            return Ok(Self {
                ptr,
                len,
                cap,
                init: cap,
                origin: Origin::Mapped,
            });
        }
        let mut b = Self::from_allocator(cap, true)?;
        b.set_len(len);
        Ok(b)
    }

    /// `cap` bytes (a non-zero multiple of [`ALIGN`]) from the allocator: zeroed, or left
    /// uninitialised for a read to fill (then nothing is shown until the read says what it
    /// wrote).
    fn from_allocator(cap: usize, zeroed: bool) -> io::Result<Self> {
        if !zeroed && (page_pool::MIN_BYTES..=page_pool::MAX_BYTES).contains(&cap) {
            if let Some((ptr, size)) = page_pool::take(cap) {
                return Ok(Self {
                    ptr,
                    len: 0,
                    cap: size,
                    init: 0,
                    origin: Origin::Pooled,
                });
            }
        }
        let layout = Self::layout(cap)?;
        // SAFETY: the layout has a non-zero size.
        let raw = unsafe {
            if zeroed {
                std::alloc::alloc_zeroed(layout)
            } else {
                std::alloc::alloc(layout)
            }
        };
        let ptr = NonNull::new(raw)
            .ok_or_else(|| io::Error::new(io::ErrorKind::OutOfMemory, "allocation failed"))?;
        let init = if zeroed { cap } else { 0 };
        Ok(Self {
            ptr,
            len: init,
            cap,
            init,
            origin: Origin::Allocator,
        })
    }

    /// An uninitialised buffer of `span` bytes (a non-zero multiple of [`ALIGN`]) for a read
    /// to fill: from the page pool when its size is one the pool serves.
    pub(super) fn for_read(span: usize) -> io::Result<Self> {
        Self::from_allocator(span, false)
    }

    /// The start of the buffer's memory, for the kernel to read into or write from.
    pub(super) fn as_mut_ptr(&mut self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Records that the kernel wrote the first `n` bytes (at most the capacity).
    ///
    /// # Safety
    /// The first `n` bytes must have been written (a completed read reported them).
    pub(super) unsafe fn assume_init(&mut self, n: usize) {
        self.init = self.init.max(n.min(self.cap));
    }

    /// A copy of `data` (at least one byte) in a buffer of its own.
    fn copy_of(data: &[u8]) -> io::Result<Self> {
        let cap = round_up(data.len())
            .ok_or_else(|| io::Error::new(io::ErrorKind::OutOfMemory, "buffer too large"))?;
        let mut b = Self::from_allocator(cap, false)?;
        // SAFETY: the buffer holds at least `cap` ≥ data.len() bytes, owned by `b`, and does
        // not overlap `data` (it was just allocated).
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), b.ptr.as_ptr(), data.len());
        }
        b.init = data.len();
        b.len = data.len();
        Ok(b)
    }

    /// A buffer of no bytes, holding no memory.
    pub fn empty() -> Self {
        Self {
            ptr: NonNull::dangling(),
            len: 0,
            cap: 0,
            init: 0,
            origin: Origin::Allocator,
        }
    }

    /// Bytes the buffer can show without allocating.
    pub fn capacity(&self) -> usize {
        self.cap
    }

    /// Shows the first `len` bytes (at most the capacity of a zeroed buffer; contents are
    /// whatever they were).
    pub fn set_len(&mut self, len: usize) {
        self.len = len.min(self.init);
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        if self.cap == 0 {
            return;
        }
        match self.origin {
            Origin::Mapped => {
                // SAFETY: mapped in `zeroed` with exactly `cap` bytes, unmapped once.
                unsafe { page_pool::unmap(self.ptr, self.cap) };
                return;
            }
            Origin::Pooled => {
                // SAFETY: taken from the pool with exactly `cap` bytes; dropped once, so
                // nothing uses it after.
                unsafe { page_pool::give_back(self.ptr, self.cap) };
                return;
            }
            Origin::Allocator => {}
        }
        if let Ok(layout) = Self::layout(self.cap) {
            // SAFETY: allocated in `zeroed` with this very layout.
            unsafe { std::alloc::dealloc(self.ptr.as_ptr(), layout) };
        }
    }
}

impl std::ops::Deref for AlignedBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: len ≤ cap initialised bytes.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl std::ops::DerefMut for AlignedBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: len ≤ cap initialised bytes, borrowed mutably through self.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl AsRef<[u8]> for AlignedBuf {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

impl std::fmt::Debug for AlignedBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "AlignedBuf({} of {} bytes)", self.len, self.cap)
    }
}

/// Opens `path` for reading with `O_DIRECT`.
pub fn open_read(path: &Path) -> io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(path)
}

/// `pread` into the first `want` bytes of `buf`'s capacity until they are full or the file
/// ends; returns the bytes read (written by the kernel, from the start).
fn pread_full(file: &File, buf: &mut AlignedBuf, want: usize, offset: u64) -> io::Result<usize> {
    let want = want.min(buf.cap);
    let mut done = 0;
    while done < want {
        let at = offset
            .checked_add(done as u64)
            .and_then(|a| libc::off_t::try_from(a).ok())
            .ok_or_else(|| io::Error::from(io::ErrorKind::InvalidInput))?;
        // SAFETY: the kernel writes at most `want - done` bytes from `done` on, inside the
        // allocation's `cap` bytes owned by `buf`; the fd is open.
        let n = unsafe {
            libc::pread(
                file.as_raw_fd(),
                buf.ptr.as_ptr().add(done).cast(),
                want - done,
                at,
            )
        };
        match n {
            n if n < 0 => {
                let e = io::Error::last_os_error();
                if e.kind() != io::ErrorKind::Interrupted {
                    return Err(e);
                }
            }
            0 => break,
            n => {
                done += n as usize;
                // A direct read that ends off a block boundary stopped at the end of the file.
                if done % ALIGN != 0 {
                    break;
                }
            }
        }
    }
    Ok(done)
}

/// Reads exactly `len` bytes at `offset` (a multiple of [`ALIGN`]) from `file` (opened with
/// `O_DIRECT`) into the start of `buf`, whose capacity must hold `len` rounded up to
/// [`ALIGN`]; returns them. `UnexpectedEof` if the file is shorter.
pub fn read_exact_into<'a>(
    file: &File,
    buf: &'a mut AlignedBuf,
    offset: u64,
    len: usize,
) -> io::Result<&'a [u8]> {
    let span = round_up(len)
        .filter(|&span| span <= buf.cap && offset % ALIGN as u64 == 0)
        .ok_or_else(|| io::Error::from(io::ErrorKind::InvalidInput))?;
    let got = pread_full(file, buf, span, offset)?;
    // The kernel wrote the first `got` bytes.
    buf.init = buf.init.max(got);
    if got < len {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "file shorter than the requested range",
        ));
    }
    buf.set_len(len);
    Ok(buf)
}

/// Reads exactly `len` bytes at `offset` from `file` (opened with `O_DIRECT`), through an
/// aligned span around them; `UnexpectedEof` if the file is shorter.
///
/// The bytes come back in the aligned buffer itself (no copy) unless the buffer is much larger
/// than the range (a small sample), when they are copied out so a kept sample does not hold
/// a buffer many times its size.
pub fn read_exact_at(file: &File, offset: u64, len: usize) -> io::Result<Bytes> {
    if len == 0 {
        return Ok(Bytes::new());
    }
    let span = Span::around(offset, len)?;
    let mut buf = AlignedBuf::for_read(span.bytes)?;
    read_exact_into(file, &mut buf, span.start, span.lead + len)?;
    Ok(span.take(buf))
}

/// The aligned span of whole blocks around a byte range, for one direct read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Span {
    /// Where the span starts (the range's offset rounded down to [`ALIGN`]).
    pub start: u64,
    /// Bytes from the span's start to the range's.
    pub lead: usize,
    /// The range's length.
    pub len: usize,
    /// The span's length, a multiple of [`ALIGN`].
    pub bytes: usize,
}

impl Span {
    /// The span around `len` (> 0) bytes at `offset`; `InvalidInput` when it would overflow.
    pub fn around(offset: u64, len: usize) -> io::Result<Self> {
        let start = offset & !(ALIGN as u64 - 1);
        let lead = (offset - start) as usize;
        let bytes = lead
            .checked_add(len)
            .and_then(round_up)
            .filter(|_| offset.checked_add(len as u64).is_some())
            .ok_or_else(|| io::Error::from(io::ErrorKind::InvalidInput))?;
        Ok(Span {
            start,
            lead,
            len,
            bytes,
        })
    }

    /// The range out of `buf`, into which a read of the span put `got` bytes from its start:
    /// `UnexpectedEof` when that does not reach the range's end (the file is shorter).
    pub fn finish(&self, mut buf: AlignedBuf, got: usize) -> io::Result<Bytes> {
        if got < self.lead + self.len {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "file shorter than the requested range",
            ));
        }
        buf.set_len(self.lead + self.len);
        Ok(self.take(buf))
    }

    /// The range out of `buf`, whose first `lead + len` bytes the read filled: in the aligned
    /// buffer itself (no copy) unless it is much larger than the range (a small sample), when
    /// it is copied out so a kept sample does not hold a buffer many times its size.
    fn take(&self, buf: AlignedBuf) -> Bytes {
        let (lead, len) = (self.lead, self.len);
        // (A quarter: the page pool's size classes alone may add a fifth.)
        if buf.capacity() - len > len / 4 {
            return kept_copy(&buf[lead..lead + len]);
        }
        Bytes::from_owner(buf).slice(lead..lead + len)
    }
}

/// A copy of `data` to keep for a while (a sample for the memory tier): mid-sized ones in
/// page-pool buffers (`page_pool`), which strand no malloc arena pages between short-lived
/// allocations; others from the allocator.
pub fn kept_copy(data: &[u8]) -> Bytes {
    if (page_pool::MIN_BYTES..=page_pool::MAX_BYTES).contains(&data.len()) {
        if let Ok(b) = AlignedBuf::copy_of(data) {
            return Bytes::from_owner(b);
        }
    }
    Bytes::copy_from_slice(data)
}

/// True when `data` starts on an [`ALIGN`] boundary, as [`write_new`] needs.
pub fn is_aligned(data: &[u8]) -> bool {
    data.as_ptr() as usize % ALIGN == 0
}

/// Creates `path` (mode 0600; it must not exist) and writes `data` (which must start on an
/// [`ALIGN`] boundary: see [`is_aligned`]) with `O_DIRECT`: the whole blocks straight from
/// `data`, the last partial block from a zero-padded copy, then the file is cut to
/// `data.len()`. Errors as the system gives them (`EINVAL`: the file system or device does
/// not take these alignments); the caller removes a partial file.
pub fn write_new(path: &Path, data: &[u8]) -> io::Result<()> {
    use std::os::unix::fs::FileExt;
    if !is_aligned(data) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "direct write from an unaligned buffer",
        ));
    }
    let file = create_new(path, data.len() as u64)?;
    let body = data.len() & !(ALIGN - 1);
    file.write_all_at(&data[..body], 0)?;
    if let Some(tail) = padded_tail(data)? {
        file.write_all_at(&tail, body as u64)?;
        file.set_len(data.len() as u64)?;
    }
    Ok(())
}

/// Creates `path` (mode 0600; it must not exist) for writing `len` bytes with `O_DIRECT`,
/// its blocks reserved up front: see [`reserve`].
pub(super) fn create_new(path: &Path, len: u64) -> io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_DIRECT)
        .open(path)?;
    reserve(&file, path, len);
    Ok(file)
}

/// Allocates a new file's blocks for `len` bytes (rounded up to [`ALIGN`]) in one
/// `fallocate`, which also sets its size to that, so that no direct write of it reaches past
/// its end. On ext4 a direct write that extends a file is done synchronously under the
/// inode's exclusive lock, with the inode put on the orphan list and taken off again in two
/// journal transactions (`ext4_dio_write_iter`: an io_uring write of it falls back to a
/// kernel worker thread), and one into a hole also takes the exclusive lock; a write into
/// allocated (unwritten) blocks of the file's size does neither. The writer cuts the file to
/// its exact length after its last piece, as before. A file system without `fallocate`
/// (or out of space for all of it at once) is left as it is: the writes then allocate.
fn reserve(file: &File, path: &Path, len: u64) {
    use std::os::fd::AsRawFd;
    let Some(rounded) = usize::try_from(len)
        .ok()
        .and_then(round_up)
        .and_then(|r| libc::off_t::try_from(r).ok())
        .filter(|&r| r > 0)
    else {
        return;
    };
    // SAFETY: fallocate on a descriptor this function borrows; no memory is passed.
    let r = unsafe { libc::fallocate(file.as_raw_fd(), 0, 0, rounded) };
    if r != 0 {
        tracing::debug!(path = %path.display(), error = %io::Error::last_os_error(),
            "no blocks reserved for a cache file; its writes allocate them");
    }
}

/// The last partial block of `data` (its bytes past the last whole block), zero-padded to a
/// block in a buffer of its own; `None` when `data` ends on a block boundary.
pub(super) fn padded_tail(data: &[u8]) -> io::Result<Option<AlignedBuf>> {
    let body = data.len() & !(ALIGN - 1);
    if body == data.len() {
        return Ok(None);
    }
    let mut tail = AlignedBuf::zeroed(ALIGN)?;
    tail.set_len(ALIGN);
    tail[..data.len() - body].copy_from_slice(&data[body..]);
    Ok(Some(tail))
}

/// True when `dir` is on a file system that lives in the page cache itself (tmpfs, ramfs):
/// there direct I/O would keep nothing out of memory.
fn in_memory_fs(dir: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    const TMPFS_MAGIC: i64 = 0x0102_1994;
    const RAMFS_MAGIC: i64 = 0x8584_58f6;
    let Ok(c) = std::ffi::CString::new(dir.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: statfs writes one struct statfs into `st`, which is zero-initialised and sized.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a valid NUL-terminated path; `st` is writable.
    if unsafe { libc::statfs(c.as_ptr(), &mut st) } != 0 {
        return false;
    }
    #[allow(clippy::unnecessary_cast)]
    let kind = st.f_type as i64;
    kind == TMPFS_MAGIC || kind == RAMFS_MAGIC
}

/// Whether cached files in `dir` should bypass the page cache: its file system is not held in
/// memory anyway (tmpfs, ramfs) and takes direct reads and writes at [`ALIGN`] (a small probe
/// file is written, read back and removed there).
pub fn probe(dir: &Path) -> bool {
    if in_memory_fs(dir) {
        tracing::debug!(dir = %dir.display(), "cache folder is in memory (tmpfs); no direct I/O");
        return false;
    }
    let path = dir.join(format!("direct-io-probe.{}", std::process::id()));
    let result = (|| -> io::Result<bool> {
        let mut data = AlignedBuf::zeroed(ALIGN + 100)?;
        for (i, b) in data.iter_mut().enumerate() {
            *b = (i % 251) as u8;
        }
        write_new(&path, &data)?;
        let file = open_read(&path)?;
        let back = read_exact_at(&file, 50, ALIGN)?;
        Ok(back[..] == data[50..50 + ALIGN])
    })();
    let _ = std::fs::remove_file(&path);
    match result {
        Ok(ok) => ok,
        Err(e) => {
            tracing::debug!(dir = %dir.display(), error = %e, "direct I/O unavailable here");
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligned_buffers_start_on_a_block_and_round_their_capacity_up() {
        let big = AlignedBuf::zeroed(3 << 20).unwrap();
        assert!(is_aligned(&big) && big.origin == Origin::Mapped && big.iter().all(|&x| x == 0));
        let b = AlignedBuf::zeroed(5000).unwrap();
        assert!(is_aligned(&b) && b.origin != Origin::Mapped);
        assert_eq!(b.len(), 5000);
        assert_eq!(b.capacity(), 2 * ALIGN);
        assert!(b.iter().all(|&x| x == 0));
        let mut b = b;
        b.set_len(3 * ALIGN);
        assert_eq!(b.len(), 2 * ALIGN, "never past the capacity");
    }

    #[test]
    fn kept_copies_match_and_mid_sized_ones_come_from_the_page_pool() {
        let (min, max) = (page_pool::MIN_BYTES, page_pool::MAX_BYTES);
        for len in [1, 100, min - 1, min, 20_000, 333_333, max, max + 1] {
            let data: Vec<u8> = (0..len).map(|i| (i * 31 % 251) as u8).collect();
            assert_eq!(&kept_copy(&data)[..], &data[..], "{len}");
            let b = AlignedBuf::copy_of(&data).unwrap();
            assert_eq!(&b[..], &data[..], "{len}");
            assert_eq!(
                b.origin == Origin::Pooled,
                (min..=max).contains(&round_up(len).unwrap()),
                "{len}"
            );
        }
    }

    #[test]
    fn folders_in_memory_never_get_direct_io() {
        let shm = Path::new("/dev/shm");
        if shm.is_dir() && in_memory_fs(shm) {
            assert!(!probe(shm));
        }
        assert!(!in_memory_fs(Path::new("/nonexistent/folder")));
    }

    /// Writes and reads back files of awkward sizes at awkward offsets; skipped (with a
    /// message) where the temp folder's file system refuses direct I/O.
    #[test]
    fn files_written_and_read_directly_hold_exactly_their_bytes() {
        let dir = tempfile::tempdir().unwrap();
        if in_memory_fs(dir.path()) || !probe(dir.path()) {
            eprintln!(
                "direct I/O unavailable in {}; nothing to check",
                dir.path().display()
            );
            return;
        }
        for size in [
            1usize,
            100,
            ALIGN,
            ALIGN + 1,
            3 * ALIGN - 7,
            20_011,
            110_000,
            300_001,
        ] {
            let mut data = AlignedBuf::zeroed(size).unwrap();
            for (i, b) in data.iter_mut().enumerate() {
                *b = (i * 7 % 251) as u8;
            }
            let path = dir.path().join(format!("f{size}"));
            write_new(&path, &data).unwrap();
            assert_eq!(std::fs::read(&path).unwrap(), &data[..], "size {size}");
            let f = open_read(&path).unwrap();
            for (off, len) in [
                (0, size),
                (size / 3, size - size / 3),
                (size - 1, 1),
                (5, 0),
            ] {
                if off + len > size {
                    continue;
                }
                let got = read_exact_at(&f, off as u64, len).unwrap();
                assert_eq!(
                    &got[..],
                    &data[off..off + len],
                    "size {size} at {off}+{len}"
                );
            }
            let e = read_exact_at(&f, size as u64 - 1, 2).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
            // One buffer, read piece by piece from aligned offsets.
            let mut buf = AlignedBuf::zeroed(2 * ALIGN).unwrap();
            let mut at = 0;
            while at < size {
                let want = (size - at).min(2 * ALIGN);
                let got = read_exact_into(&f, &mut buf, at as u64, want).unwrap();
                assert_eq!(got, &data[at..at + want], "size {size} piece at {at}");
                at += want;
            }
            let e = read_exact_into(&f, &mut buf, 1, 10).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "an unaligned offset");
            assert!(
                write_new(&path, &data).is_err(),
                "an existing file is refused"
            );
        }
        let unaligned = vec![1u8; ALIGN + 1];
        let off = if is_aligned(&unaligned) { 1 } else { 0 };
        assert!(write_new(&dir.path().join("u"), &unaligned[off..]).is_err());
    }
}
