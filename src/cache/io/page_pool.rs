//! Page-aligned buffers of 16 KiB to 1 MiB kept apart from malloc's arenas, and reused.
//!
//! Samples read from cached files and the copies the memory tier keeps are mid-sized (a few
//! KiB to a few hundred) and live from microseconds (a read's buffer) to minutes (a sample in
//! the tier). From malloc's arenas, the long-lived ones pin pages between the short-lived
//! ones, so a long run keeps growing free memory the process cannot return: in the 10-minute
//! soak the daemon's RSS rose by a third, much of it free memory the arenas held
//! (`malloc_stats`; bench/HISTORY.md).
//! Buffers from here are whole pages mapped from the kernel, sorted into size classes of a
//! quarter octave (a buffer wastes at most a fifth of its size), and a freed buffer goes back
//! to its class's free list for the next one of that class, so the steady state asks the
//! kernel for little. Free lists hold at most [`RETAIN_BYTES`] in all; a buffer freed past
//! that is unmapped.
//!
//! Free lists also shrink to what is in use: [`release_idle`], called every few seconds,
//! unmaps the buffers of each class that no `take` needed since the call before (the
//! fewest the list held in that time, its low-water mark), the way Go's and tcmalloc's
//! scavengers return what a steady state does not cycle. Without it, the lists keep the most
//! they ever held: in the 10-minute soak their free bytes rose from 0.6 to 1.8 MB.

use std::ptr::NonNull;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// Page size the buffers are made of (and aligned to).
pub const PAGE: usize = 4096;

/// Smallest buffer served from here (smaller ones are cheap for malloc and strand little).
pub const MIN_BYTES: usize = 16 << 10;

/// Largest buffer served from here (larger ones are mapped and unmapped one by one).
pub const MAX_BYTES: usize = 1 << 20;

/// Most free bytes the free lists keep, over all classes. The samples read ahead of their
/// readers come and go in waves of many megabytes (the read-ahead's room fills, readers take
/// it); at 4 MiB, 28 % of a warm pass's reads ahead missed the lists and mapped fresh pages
/// (mmap, a zeroed page per fault, munmap from another thread), at 16 MiB 6 %, with the
/// daemon's page faults down from 66k to 15k per 8,000 samples (2026-11-28). Idle buffers
/// still go back to the kernel within seconds ([`release_idle`]).
pub const RETAIN_BYTES: usize = 16 << 20;

/// Size classes: 4 per doubling, from `MIN_BYTES` to `MAX_BYTES`, in pages.
const CLASSES: usize = 4 * 6 + 1;

/// A free buffer's address (a mapping of its class's size), kept for reuse.
struct FreeBuf(NonNull<u8>);

// SAFETY: a free buffer is owned by the free list alone; nothing else refers to it.
unsafe impl Send for FreeBuf {}

/// One size class's free buffers, most recently freed last.
struct FreeList {
    bufs: Vec<FreeBuf>,
    /// The fewest buffers the list held since the last [`release_idle`]: that many at its
    /// bottom were not needed in that time.
    low_water: usize,
}

impl FreeList {
    /// Takes the most recently freed buffer (its pages are the likeliest to be resident).
    fn pop(&mut self) -> Option<FreeBuf> {
        let buf = self.bufs.pop();
        self.low_water = self.low_water.min(self.bufs.len());
        buf
    }
}

/// The process's pool.
struct Pool {
    free: [Mutex<FreeList>; CLASSES],
    retained: AtomicUsize,
    /// Bytes [`map`] gave out and [`unmap`] has not returned (buffers in use and free).
    mapped: AtomicUsize,
}

static POOL: Pool = Pool {
    free: [const {
        Mutex::new(FreeList {
            bufs: Vec::new(),
            low_water: 0,
        })
    }; CLASSES],
    retained: AtomicUsize::new(0),
    mapped: AtomicUsize::new(0),
};

/// How much memory the buffers mapped here hold now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolUsage {
    /// Bytes mapped by [`map`] and not unmapped yet: buffers in use, the free lists, and the
    /// large zeroed buffers mapped one by one.
    pub mapped_bytes: usize,
    /// Of those, bytes on the free lists waiting for reuse (at most [`RETAIN_BYTES`]).
    pub free_bytes: usize,
}

/// The pool's memory now (for `status.json`'s memory section).
pub fn usage() -> PoolUsage {
    PoolUsage {
        mapped_bytes: POOL.mapped.load(Ordering::Relaxed),
        free_bytes: POOL.retained.load(Ordering::Relaxed),
    }
}

/// The size class of a `len`-byte buffer (`len` in `MIN_BYTES..=MAX_BYTES`), and its size.
fn class_of(len: usize) -> (usize, usize) {
    let pages = len.div_ceil(PAGE).max(MIN_BYTES / PAGE);
    // Octave k holds 2^k..2^(k+1) pages (k = 2 for 16 KiB), in four steps of 2^k / 4.
    let k = usize::BITS as usize - 1 - pages.leading_zeros() as usize;
    let step = (1usize << k) / 4;
    let quarter = (pages - (1 << k)).div_ceil(step);
    // quarter is 0..=4; 4 is the next octave's first class.
    let class = (k - 2) * 4 + quarter;
    let size_pages = (1 << k) + quarter * step;
    (class, size_pages * PAGE)
}

/// The size of class `class`'s buffers (the inverse of [`class_of`]).
fn class_size(class: usize) -> usize {
    let k = class / 4 + 2;
    let quarter = class % 4;
    ((1 << k) + quarter * ((1 << k) / 4)) * PAGE
}

/// A page-aligned buffer of at least `len` bytes (`len` in `MIN_BYTES..=MAX_BYTES`), its
/// contents left from earlier use or zero, and the size it really has. `None` when the kernel
/// has no memory to map.
pub fn take(len: usize) -> Option<(NonNull<u8>, usize)> {
    debug_assert!((MIN_BYTES..=MAX_BYTES).contains(&len));
    let (class, size) = class_of(len);
    let reused = POOL.free[class]
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .pop();
    if let Some(FreeBuf(ptr)) = reused {
        POOL.retained.fetch_sub(size, Ordering::Relaxed);
        return Some((ptr, size));
    }
    map(size).ok().map(|p| (p, size))
}

/// Mappings of at least this many bytes (download buffers: a shard each) ask for transparent
/// huge pages: a fresh 64 MiB buffer then takes 32 page faults instead of 16,384, and a
/// profile of a cold pass had the faults of fresh 4 KiB pages (allocation, memory-cgroup
/// charge, LRU, clearing) at ~30 % of the daemon's CPU (2026-11-28).
const HUGE_PAGES_AT_LEAST: usize = 4 << 20;

/// `size` bytes of fresh private anonymous memory from the kernel: page-aligned, and zero
/// until first written.
pub fn map(size: usize) -> std::io::Result<NonNull<u8>> {
    // SAFETY: a fresh private anonymous mapping; the kernel picks a page-aligned address.
    let raw = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            size,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if raw == libc::MAP_FAILED {
        return Err(std::io::Error::last_os_error());
    }
    if size >= HUGE_PAGES_AT_LEAST {
        // SAFETY: advice on the mapping just made, of exactly `size` bytes. Refused (no
        // transparent huge pages here), the buffer keeps its small pages.
        unsafe { libc::madvise(raw, size, libc::MADV_HUGEPAGE) };
    }
    POOL.mapped.fetch_add(size, Ordering::Relaxed);
    NonNull::new(raw.cast::<u8>())
        .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::OutOfMemory, "mmap gave null"))
}

/// Returns memory that [`map`] gave to the kernel.
///
/// # Safety
/// `ptr` and `size` must come from one call of [`map`], and nothing may use the memory after.
pub unsafe fn unmap(ptr: NonNull<u8>, size: usize) {
    // SAFETY: (caller) a mapping of exactly `size` bytes that nothing uses any more.
    unsafe { libc::munmap(ptr.as_ptr().cast(), size) };
    POOL.mapped.fetch_sub(size, Ordering::Relaxed);
}

/// Gives back a buffer that [`take`] returned with this `size`: kept for reuse while the
/// free lists hold under [`RETAIN_BYTES`], else unmapped.
///
/// # Safety
/// `ptr` and `size` must come from one call of [`take`], and nothing may use the buffer
/// after this call.
pub unsafe fn give_back(ptr: NonNull<u8>, size: usize) {
    let (class, class_size) = class_of(size);
    debug_assert_eq!(class_size, size);
    if POOL.retained.fetch_add(size, Ordering::Relaxed) + size <= RETAIN_BYTES {
        POOL.free[class]
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .bufs
            .push(FreeBuf(ptr));
        return;
    }
    POOL.retained.fetch_sub(size, Ordering::Relaxed);
    // SAFETY: (caller) mapped by `take` with exactly `size` bytes, not used any more.
    unsafe { unmap(ptr, size) };
}

/// Unmaps the free buffers no `take` needed since the previous call (each class's
/// low-water mark), and returns how many bytes that gave back. Call it periodically.
pub fn release_idle() -> usize {
    let mut released = 0;
    for (class, list) in POOL.free.iter().enumerate() {
        let idle: Vec<FreeBuf> = {
            let mut list = list.lock().unwrap_or_else(|p| p.into_inner());
            let n = list.low_water.min(list.bufs.len());
            let idle = list.bufs.drain(..n).collect();
            list.low_water = list.bufs.len();
            idle
        };
        let size = class_size(class);
        for FreeBuf(ptr) in idle {
            POOL.retained.fetch_sub(size, Ordering::Relaxed);
            // SAFETY: a free-list buffer of its class's size, owned by nobody else now.
            unsafe { unmap(ptr, size) };
            released += size;
        }
    }
    released
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_cover_every_size_with_little_waste() {
        let mut last = class_of(MIN_BYTES);
        for len in (MIN_BYTES..=MAX_BYTES).step_by(512) {
            let (class, size) = class_of(len);
            assert!(class < CLASSES, "{len}: class {class}");
            assert!(size >= len && size % PAGE == 0, "{len}: {size}");
            assert!(
                size - len <= len / 4 + PAGE,
                "{len} bytes in a {size}-byte buffer"
            );
            // Classes only grow with the length, and one class is one size.
            assert!(class >= last.0);
            if class == last.0 {
                assert_eq!(size, last.1);
            }
            last = (class, size);
        }
        assert_eq!(class_of(MIN_BYTES), (0, MIN_BYTES));
        assert_eq!(class_of(MAX_BYTES), (CLASSES - 1, MAX_BYTES));
        for class in 0..CLASSES {
            assert_eq!(class_of(class_size(class)), (class, class_size(class)));
        }
        // A class's own size maps back to it (give_back relies on that).
        for len in [MIN_BYTES, 20 << 10, 100 << 10, 333 << 10, MAX_BYTES] {
            let (class, size) = class_of(len);
            assert_eq!(class_of(size), (class, size));
        }
    }

    #[test]
    fn a_buffer_given_back_is_the_next_one_taken_of_its_class() {
        // A class no other test of this process uses, so the free list is this test's.
        let len = 700 << 10;
        let (ptr, size) = take(len).unwrap();
        assert_eq!(ptr.as_ptr() as usize % PAGE, 0);
        // SAFETY: a fresh buffer of `size` bytes.
        unsafe { std::ptr::write_bytes(ptr.as_ptr(), 7, size) };
        // SAFETY: from `take`, not used after.
        unsafe { give_back(ptr, size) };
        let (again, size2) = take(len - 1000).unwrap();
        assert_eq!((again, size2), (ptr, size));
        // SAFETY: from `take`, not used after.
        unsafe { give_back(again, size2) };
    }

    #[test]
    fn buffers_no_take_needed_for_a_period_are_unmapped() {
        // A class no other test of this process uses; only this test calls release_idle.
        let len = 800 << 10;
        let (class, size) = class_of(len);
        let listed = || POOL.free[class].lock().unwrap().bufs.len();
        // Puts `n` fresh buffers on the free list, as give_back does below its retain limit
        // (which other tests' buffers could reach).
        let park = |n: usize| {
            for _ in 0..n {
                let ptr = map(size).unwrap();
                POOL.retained.fetch_add(size, Ordering::Relaxed);
                POOL.free[class].lock().unwrap().bufs.push(FreeBuf(ptr));
            }
        };
        let take_and_park = || {
            let (ptr, got) = take(len).unwrap();
            assert_eq!(got, size);
            // SAFETY: from `take`, not used after.
            unsafe { unmap(ptr, got) };
            park(1);
        };
        park(3);
        // The mark was set before these were freed: none of them has been idle a period.
        release_idle();
        assert_eq!(listed(), 3);
        // One is taken (and one freed again) within the next period: two were idle.
        take_and_park();
        assert!(release_idle() >= 2 * size);
        assert_eq!(listed(), 1);
        // A buffer taken in every period stays.
        take_and_park();
        release_idle();
        take_and_park();
        release_idle();
        assert_eq!(listed(), 1);
        // After a period without a take, it goes too.
        release_idle();
        assert_eq!(listed(), 0);
    }
}
