//! Allocator settings for the long-running daemon (glibc builds), and its periodic return of
//! idle memory to the kernel (all builds).
//!
//! The daemon allocates a whole shard (MiBs) per download and frees it soon after, on many
//! threads. glibc raises its mmap threshold to the size of every freed mmapped block (up to
//! 32 MiB), so after the first shard such buffers come from the per-thread arenas instead,
//! whose freed memory stays in the process: RSS climbs over hours although nothing leaks.
//! A fixed threshold keeps big buffers in mmap (returned to the kernel on free), and fewer
//! arenas bound what small allocations can strand. See mallopt(3), "M_MMAP_THRESHOLD".
//!
//! A long run still strands free memory between live blocks in the arenas (a memory tier of
//! many small samples, evicted and replaced, leaves holes): every `TRIM_PERIOD` (10 s) the
//! daemon hands whole free pages back to the kernel with `malloc_trim(0)`, which takes each
//! arena's lock for a moment. See malloc_trim(3). The same thread unmaps the page pool's
//! buffers that no read took since its last turn (`process_memory::release_idle`), with any
//! C library.
//!
//! Per-thread caches are turned off for the daemon (it re-executes itself once with
//! `GLIBC_TUNABLES`, the only way to set them): see [`reexec_with_daemon_tunables`].
//!
//! Users keep the last word: nothing is changed when `GLIBC_TUNABLES` or a `MALLOC_*`
//! variable is set. musl builds (the release artifacts) have an allocator that returns large
//! blocks by itself, so only the page pool's release runs there.

use crate::cache::process_memory;

/// Blocks of at least this size are mmapped (and unmapped on free).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const MMAP_THRESHOLD: i32 = 1 << 20;

/// Most malloc arenas (glibc's default is 8 per core).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const ARENA_MAX: i32 = 4;

/// How often idle memory (the page pool's, free pages in the arenas) is given back to the
/// kernel.
const TRIM_PERIOD: std::time::Duration = std::time::Duration::from_secs(10);

/// The glibc tunables a daemon re-executes itself with: no per-thread caches. Each thread's
/// cache (tcache) keeps up to 7 freed blocks of every small size for that thread alone, and
/// the daemon has ~60 threads (FUSE, waiting requests, fetches, read-ahead): in the 64-reader
/// soak those caches grew malloc's bytes in use by ~3 MB over ten minutes, a tenth of the
/// daemon's RSS, while the live heap stayed flat. glibc reads tunables only when a process
/// starts, hence the re-exec. See the glibc manual, "Memory Allocation Tunables".
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const DAEMON_TUNABLES: &str = "glibc.malloc.tcache_count=0";

/// Set in the environment of a daemon that re-executed itself with [`DAEMON_TUNABLES`], so
/// that it knows `GLIBC_TUNABLES` is its own and not the user's.
const TUNED_ENV: &str = "SHARDFS_MALLOC_TUNED";

/// True when the user set allocator variables: then the daemon changes nothing.
fn user_set() -> bool {
    let ours = std::env::var_os(TUNED_ENV).is_some();
    std::env::vars_os().any(|(k, _)| {
        let k = k.to_string_lossy();
        (k == "GLIBC_TUNABLES" && !ours) || k.starts_with("MALLOC_")
    })
}

/// Runs this process again with the daemon's glibc tunables ([`DAEMON_TUNABLES`]), unless
/// the user set allocator variables or this process already is that run. Returns only when
/// it does not re-execute (or cannot: then the daemon runs with glibc's defaults). Call
/// before any thread starts.
pub fn reexec_with_daemon_tunables() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        use std::os::unix::process::CommandExt;
        if std::env::var_os(TUNED_ENV).is_some() || user_set() {
            return;
        }
        let mut args = std::env::args_os();
        let argv0 = args.next().unwrap_or_default();
        // /proc/self/exe: this very binary, even when its path was replaced since it started.
        let err = std::process::Command::new("/proc/self/exe")
            .arg0(argv0)
            .args(args)
            .env("GLIBC_TUNABLES", DAEMON_TUNABLES)
            .env(TUNED_ENV, "1")
            .exec();
        tracing::debug!(error = %err, "cannot re-execute with the daemon's malloc tunables");
    }
}

/// Starts a thread that gives idle memory back to the kernel every `TRIM_PERIOD`: the page
/// pool's idle buffers ([`process_memory::release_idle`]), and free arena pages with
/// `malloc_trim` (glibc builds, unless the user set allocator variables).
pub fn start_trimming() {
    let trim_arenas = cfg!(all(target_os = "linux", target_env = "gnu")) && !user_set();
    let spawned = std::thread::Builder::new()
        .name("memory-trim".into())
        .spawn(move || loop {
            std::thread::sleep(TRIM_PERIOD);
            process_memory::release_idle();
            if trim_arenas {
                trim_malloc_arenas();
            }
        });
    if let Err(e) = spawned {
        tracing::debug!(error = %e, "cannot start the memory trimming thread");
    }
}

/// Returns whole free pages of malloc's arenas to the kernel.
fn trim_malloc_arenas() {
    // SAFETY: malloc_trim only returns free memory to the kernel; it is thread-safe (it takes
    // each arena's lock).
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Applies the daemon's allocator settings. Call before any thread starts.
pub fn tune_for_daemon() {
    if user_set() {
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
