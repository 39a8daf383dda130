//! Allocator settings for the long-running daemon (glibc builds only).
//!
//! The daemon allocates a whole shard (MiBs) per download and frees it soon after, on many
//! threads. glibc raises its mmap threshold to the size of every freed mmapped block (up to
//! 32 MiB), so after the first shard such buffers come from the per-thread arenas instead,
//! whose freed memory stays in the process: RSS climbs over hours although nothing leaks.
//! A fixed threshold keeps big buffers in mmap (returned to the kernel on free), and fewer
//! arenas bound what small allocations can strand. See mallopt(3), "M_MMAP_THRESHOLD".
//!
//! Users keep the last word: nothing is changed when `GLIBC_TUNABLES` or a `MALLOC_*`
//! variable is set. musl builds (the release artifacts) have an allocator that returns large
//! blocks by itself, so this does nothing there.

/// Blocks of at least this size are mmapped (and unmapped on free).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const MMAP_THRESHOLD: i32 = 1 << 20;

/// Most malloc arenas (glibc's default is 8 per core).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const ARENA_MAX: i32 = 4;

/// Applies the daemon's allocator settings. Call before any thread starts.
pub fn tune_for_daemon() {
    let user_set = std::env::vars_os().any(|(k, _)| {
        let k = k.to_string_lossy();
        k == "GLIBC_TUNABLES" || k.starts_with("MALLOC_")
    });
    if user_set {
        return;
    }
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: mallopt only changes allocator parameters; it is called while the process
        // is still single-threaded. A zero return (refused) leaves glibc's defaults in place.
        let ok = unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1
                && libc::mallopt(libc::M_ARENA_MAX, ARENA_MAX) == 1
        };
        if !ok {
            tracing::debug!("mallopt refused the daemon's allocator settings");
        }
    }
}
