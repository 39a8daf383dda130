//! What the daemon's memory is made of now: `status.json`'s `memory` section.
//!
//! The resident size alone does not say whether a long run leaks: it also grows while the
//! bounded buffers (memory tier, downloads) fill up to their limits, and malloc keeps freed
//! memory in its arenas without returning it. This splits the resident size into what the
//! allocator has handed out, what it holds free, and the page pool's buffers, so a growing
//! number points at its cause (bench/soak.py prints them per minute).

use serde::{Deserialize, Serialize};

use super::io::page_pool;

/// One reading of the process's memory.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ProcessMemory {
    /// Resident bytes of the whole process (`VmRSS`), `None` when `/proc` is unreadable.
    pub rss_bytes: Option<u64>,
    /// Threads of the process now.
    pub threads: Option<u64>,
    /// Bytes malloc has handed out from its arenas and not got back (glibc's `mallinfo2`;
    /// `None` with another C library).
    pub heap_in_use_bytes: Option<u64>,
    /// Bytes of large blocks malloc mapped one by one (handed out; resident only as far as
    /// they are written, so this may exceed the resident size).
    pub heap_mapped_bytes: Option<u64>,
    /// Free bytes malloc keeps in its arenas for later allocations instead of returning them
    /// to the kernel (`None` with another C library).
    pub heap_free_bytes: Option<u64>,
    /// Bytes of page-aligned buffers mapped apart from malloc (in use and free).
    pub page_pool_mapped_bytes: u64,
    /// Of those, bytes kept free for reuse.
    pub page_pool_free_bytes: u64,
}

/// Gives memory nothing needed lately back to the kernel (the page pool's buffers that no
/// read took since the previous call) and returns how many bytes. The daemon calls it every
/// few seconds.
pub fn release_idle() -> usize {
    page_pool::release_idle()
}

/// The process's memory now.
pub fn snapshot() -> ProcessMemory {
    let (rss_bytes, threads) = proc_status();
    let (heap_in_use_bytes, heap_mapped_bytes, heap_free_bytes) = heap();
    let pool = page_pool::usage();
    ProcessMemory {
        rss_bytes,
        threads,
        heap_in_use_bytes,
        heap_mapped_bytes,
        heap_free_bytes,
        page_pool_mapped_bytes: pool.mapped_bytes as u64,
        page_pool_free_bytes: pool.free_bytes as u64,
    }
}

/// `VmRSS` (in bytes) and `Threads` from `/proc/self/status`.
fn proc_status() -> (Option<u64>, Option<u64>) {
    let Ok(text) = std::fs::read_to_string("/proc/self/status") else {
        return (None, None);
    };
    parse_proc_status(&text)
}

/// `VmRSS` (in bytes) and `Threads` from the text of a `/proc/PID/status` file.
fn parse_proc_status(text: &str) -> (Option<u64>, Option<u64>) {
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|n| n.parse::<u64>().ok())
    };
    (
        field("VmRSS:").and_then(|kib| kib.checked_mul(1024)),
        field("Threads:"),
    )
}

/// Bytes malloc has handed out from its arenas, in large blocks mapped one by one, and bytes
/// it holds free.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn heap() -> (Option<u64>, Option<u64>, Option<u64>) {
    // SAFETY: mallinfo2 only reads the allocator's own statistics (taking its arena locks).
    let m = unsafe { libc::mallinfo2() };
    (
        Some(m.uordblks as u64),
        Some(m.hblkhd as u64),
        Some(m.fordblks as u64),
    )
}

/// Malloc's statistics: unknown without glibc.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn heap() -> (Option<u64>, Option<u64>, Option<u64>) {
    (None, None, None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_status_fields_are_parsed_and_odd_text_gives_none() {
        let text = "Name:\tshardfs\nVmPeak:\t  99999 kB\nVmRSS:\t   40960 kB\nThreads:\t65\n";
        assert_eq!(parse_proc_status(text), (Some(40960 * 1024), Some(65)));
        assert_eq!(parse_proc_status(""), (None, None));
        assert_eq!(
            parse_proc_status("VmRSS:\tlots kB\nThreads:\n"),
            (None, None)
        );
        assert_eq!(
            parse_proc_status(&format!("VmRSS:\t{} kB\n", u64::MAX)),
            (None, None)
        );
    }

    #[test]
    fn a_snapshot_sees_this_process_and_the_pool_buffers_it_maps() {
        let before = snapshot();
        assert!(before.rss_bytes.unwrap() > 0);
        assert!(before.threads.unwrap() >= 1);
        #[cfg(target_env = "gnu")]
        assert!(before.heap_in_use_bytes.unwrap() > 0);
        // A big mapping (beyond the pool's classes, so no other test shares it) shows up in
        // the pool's mapped bytes until it is returned. Other tests map and unmap at the same
        // time, so only the presence of our own bytes is certain, not the exact total.
        let size = 64 << 20;
        let ptr = page_pool::map(size).unwrap();
        let during = snapshot();
        assert!(during.page_pool_mapped_bytes >= size as u64);
        // SAFETY: mapped above with `size` bytes, not used after.
        unsafe { page_pool::unmap(ptr, size) };
        assert!(page_pool::usage().free_bytes <= page_pool::RETAIN_BYTES);
    }
}
