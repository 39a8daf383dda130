//! `CacheOptions`: where the cache lives and how big it may grow.

use std::path::PathBuf;

/// How cached shard files are read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum IoMode {
    /// io_uring when the kernel allows it, else `pread` (env `SHARDFS_IO=pread|uring` overrides);
    /// past the page cache too (`io_uring-direct`, else `pread-direct`).
    #[default]
    Auto,
    /// io_uring on dedicated ring threads; opening fails when it is unavailable.
    Uring,
    /// io_uring with one ring per reading thread, submitted inline (no thread hand-off);
    /// opening fails when it is unavailable.
    UringInline,
    /// Plain `pread(2)` (and `pwrite(2)` past the page cache): no io_uring at all.
    Pread,
}

/// Settings of a [`super::ShardCache`].
#[derive(Debug, Clone)]
pub struct CacheOptions {
    /// Root folder of the cache; datasets get subfolders. Default: [`default_cache_dir`].
    pub cache_dir: PathBuf,
    /// Byte budget of the disk tier (uncompressed shard bytes). `None` = unlimited.
    pub cache_limit: Option<u64>,
    /// Byte budget of the memory tier (headers and samples). 0 disables it.
    pub memory_limit: u64,
    /// How to read cached files.
    pub io: IoMode,
    /// Write and read cached shard files past the page cache (`O_DIRECT`) when the cache
    /// folder's file system takes it (`SHARDFS_DIRECT_IO=off` turns it off); see
    /// `io/direct.rs`.
    pub direct_io: bool,
    /// Depth of the io_uring submission queue.
    pub uring_depth: u32,
    /// Downloads of one shard attempted when its bytes fail verification (after a download
    /// in parts, the later ones are part-by-part repairs, so they cost little).
    pub verify_attempts: u32,
    /// Bytes of shards downloaded at once (each held in memory until it is verified and on
    /// disk); a shard larger than this downloads alone. 0 = no bound.
    pub download_memory: u64,
    /// Bytes more that downloads may borrow from the memory tier's share (`memory_limit`)
    /// while the tier and the read-ahead leave it unused (a cold start, when every reader waits
    /// for shards and nothing is in memory yet); the tier takes nothing new while a loan is
    /// out, except by freeing the download buffers kept past `download_memory` (borrowed
    /// bytes come back in them). 0 = no borrowing.
    pub download_loan: u64,
    /// How long a read waits for open readers to unpin shards when the pinned shards plus the
    /// one it needs exceed the budget, before it fails with `CacheError::Full`. Pins last one
    /// read call, so this only runs out when a caller holds a `ShardHandle` for long.
    pub pinned_wait: std::time::Duration,
}

impl Default for CacheOptions {
    fn default() -> Self {
        CacheOptions {
            cache_dir: default_cache_dir(),
            cache_limit: None,
            memory_limit: 256 << 20,
            io: IoMode::Auto,
            direct_io: true,
            uring_depth: 64,
            verify_attempts: 5,
            download_memory: 128 << 20,
            download_loan: 0,
            pinned_wait: std::time::Duration::from_secs(30),
        }
    }
}

/// `$XDG_CACHE_HOME/shardfs`, else `$HOME/.cache/shardfs`; `/var/cache/shardfs` for root.
pub fn default_cache_dir() -> PathBuf {
    use std::os::unix::fs::MetadataExt;
    // /proc/self belongs to the effective uid of the process.
    let root = std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0);
    if root {
        return PathBuf::from("/var/cache/shardfs");
    }
    fallback_cache_dir()
}

fn fallback_cache_dir() -> PathBuf {
    if let Some(x) = std::env::var_os("XDG_CACHE_HOME").filter(|v| !v.is_empty()) {
        return PathBuf::from(x).join("shardfs");
    }
    match std::env::var_os("HOME") {
        Some(h) => PathBuf::from(h).join(".cache/shardfs"),
        None => std::env::temp_dir().join("shardfs-cache"),
    }
}
