//! Reading and writing cached shard files.
//!
//! Past the page cache (`O_DIRECT`, the default where the cache folder's file system takes
//! it, see `direct.rs`), [`choose_direct`] picks once per cache how: io_uring
//! (`uring_direct.rs`: several reads or writes in flight from few threads) where the kernel
//! has it, else `pread`/`pwrite` (`direct.rs`). The choice is logged once and shown as
//! `io_backend` in `status.json`: `io_uring-direct` or `pread-direct`.
//!
//! Through the page cache, all readers implement [`FileReader`]. [`select`] picks one once
//! per cache: `IoMode::Auto` tries io_uring with one ring per reading thread
//! (`uring_inline.rs`) and falls back to pread when a ring cannot be set up or its first
//! no-op cannot complete (old kernels, seccomp filters in containers, `io_uring_disabled`).
//! The choice is logged once. `IoMode::Uring` selects the dedicated ring threads of
//! `uring.rs` instead (slower for page-cache hits, see the bench).
//! `SHARDFS_IO=pread|uring|uring-inline|auto` overrides both (`pread`: no io_uring at all).

pub(crate) mod direct;
pub(crate) mod page_pool;
mod pread;
mod uring;
pub(crate) mod uring_direct;
mod uring_inline;

use super::{CacheError, IoMode};
use bytes::Bytes;
use std::fs::File;
use std::path::Path;
use std::sync::Arc;

pub(crate) use pread::PreadReader;
pub(crate) use uring::UringReader;
pub(crate) use uring_inline::InlineUringReader;

/// Positional reads of whole byte ranges from open files.
pub(crate) trait FileReader: Send + Sync + std::fmt::Debug {
    /// "io_uring" or "pread", for logs and stats.
    fn name(&self) -> &'static str;
    /// Reads exactly `len` bytes at `offset`; `UnexpectedEof` if the file is shorter.
    fn read_exact_at(&self, file: &Arc<File>, offset: u64, len: usize) -> std::io::Result<Vec<u8>>;
}

/// Whether cached shard files may bypass the page cache (`SHARDFS_DIRECT_IO=on|off|auto`,
/// default auto: when the cache folder's file system takes it, see [`direct::probe`]).
pub(crate) fn direct_wanted() -> Result<bool, CacheError> {
    match std::env::var("SHARDFS_DIRECT_IO")
        .ok()
        .as_deref()
        .map(str::trim)
    {
        None | Some("") | Some("auto") | Some("on") => Ok(true),
        Some("off") => Ok(false),
        Some(other) => Err(CacheError::Config(format!(
            "SHARDFS_DIRECT_IO={other:?}: expected auto, on or off"
        ))),
    }
}

/// `mode` after the `SHARDFS_IO` override.
pub(crate) fn effective_mode(mode: IoMode) -> Result<IoMode, CacheError> {
    Ok(
        match std::env::var("SHARDFS_IO").ok().as_deref().map(str::trim) {
            Some("pread") => IoMode::Pread,
            Some("uring") | Some("io_uring") => IoMode::Uring,
            Some("uring-inline") => IoMode::UringInline,
            Some("auto") => IoMode::Auto,
            Some(other) if !other.is_empty() => {
                return Err(CacheError::Config(format!(
                    "SHARDFS_IO={other:?}: expected pread, uring, uring-inline or auto"
                )))
            }
            _ => mode,
        },
    )
}

/// How cached files that bypass the page cache are read and written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DirectPath {
    /// io_uring (`uring_direct.rs`).
    Uring,
    /// `pread(2)` / `pwrite(2)` on the calling thread (`direct.rs`).
    Pread,
}

impl DirectPath {
    /// The name `status.json` shows as `io_backend`.
    pub fn name(self) -> &'static str {
        match self {
            DirectPath::Uring => "io_uring-direct",
            DirectPath::Pread => "pread-direct",
        }
    }

    /// `len` bytes at `offset` of `file` (opened with `O_DIRECT`); `UnexpectedEof` if the
    /// file is shorter.
    pub fn read_exact_at(self, file: &File, offset: u64, len: usize) -> std::io::Result<Bytes> {
        match self {
            DirectPath::Uring => uring_direct::read_exact_at(file, offset, len),
            DirectPath::Pread => direct::read_exact_at(file, offset, len),
        }
    }

    /// Creates `path` for a file of `len` bytes written piece by piece with `O_DIRECT` (see
    /// [`uring_direct::PieceWriter`]).
    pub fn piece_writer(self, path: &Path, len: u64) -> std::io::Result<uring_direct::PieceWriter> {
        uring_direct::PieceWriter::create(path, len, self == DirectPath::Uring)
    }

    /// Creates `path` and writes `data` (aligned, see [`direct::is_aligned`]) with `O_DIRECT`.
    pub fn write_new(self, path: &Path, data: &[u8]) -> std::io::Result<()> {
        match self {
            DirectPath::Uring => uring_direct::write_new(path, data),
            DirectPath::Pread => direct::write_new(path, data),
        }
    }
}

/// How a cache whose folder `dir` takes direct I/O reads and writes its files, for `mode`
/// (after the `SHARDFS_IO` override): io_uring when `mode` allows it and `uring_works` (the
/// check that a ring reads and writes direct there; [`uring_direct::probe`] outside tests)
/// says so, else pread/pwrite. Logged once.
pub(crate) fn choose_direct(
    mode: IoMode,
    dir: &Path,
    uring_works: impl FnOnce(&Path) -> std::io::Result<()>,
) -> DirectPath {
    if mode == IoMode::Pread {
        tracing::info!("cached shard files bypass the page cache, read and written with pread/pwrite (requested)");
        return DirectPath::Pread;
    }
    match uring_works(dir) {
        Ok(()) => {
            tracing::info!(
                "cached shard files bypass the page cache, read and written through io_uring"
            );
            DirectPath::Uring
        }
        Err(e) => {
            tracing::info!(error = %e, "io_uring with O_DIRECT unavailable; cached shard files bypass the page cache with pread/pwrite");
            DirectPath::Pread
        }
    }
}

/// The reader for `mode` (after the `SHARDFS_IO` override).
pub(crate) fn select(mode: IoMode, depth: u32) -> Result<Arc<dyn FileReader>, CacheError> {
    let mode = effective_mode(mode)?;
    // One ring per reading thread; `Auto` falls back to pread where it cannot be had.
    let inline = || {
        InlineUringReader::new().map(|r| -> Arc<dyn FileReader> {
            tracing::info!("cached shard reads use io_uring, one ring per reading thread");
            Arc::new(r)
        })
    };
    let unavailable = |e| CacheError::Config(format!("io_uring requested but unavailable: {e}"));
    match mode {
        IoMode::Pread => {
            tracing::info!("cached shard reads use pread (requested)");
            Ok(Arc::new(PreadReader))
        }
        IoMode::Uring => match UringReader::new(depth) {
            Ok(r) => {
                tracing::info!(depth, "cached shard reads use io_uring");
                Ok(Arc::new(r))
            }
            Err(e) => Err(unavailable(e)),
        },
        IoMode::UringInline => inline().map_err(unavailable),
        IoMode::Auto => inline().or_else(|e| {
            tracing::info!(error = %e, "io_uring unavailable; cached shard reads use pread");
            Ok(Arc::new(PreadReader))
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn check(reader: &dyn FileReader) {
        let mut f = tempfile::tempfile().unwrap();
        let data: Vec<u8> = (0..300_000u32).map(|i| (i * 7 % 251) as u8).collect();
        f.write_all(&data).unwrap();
        let f = Arc::new(f);
        for (off, len) in [
            (0usize, 4usize),
            (10, 4096),
            (123_457, 65_536),
            (299_990, 10),
            (0, 300_000),
            (5, 0),
        ] {
            let got = reader.read_exact_at(&f, off as u64, len).unwrap();
            assert_eq!(
                &got[..],
                &data[off..off + len],
                "{} at {off}+{len}",
                reader.name()
            );
        }
        let e = reader.read_exact_at(&f, 299_999, 10).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::UnexpectedEof);
    }

    /// Checks an io_uring reader alone and shared by `threads` threads; a reader that cannot
    /// start is a failure, not a skip (the tests need a kernel with io_uring).
    fn check_shared<R: FileReader + 'static>(reader: std::io::Result<R>, threads: usize) {
        match reader {
            Ok(r) => {
                check(&r);
                let r = Arc::new(r);
                let hs: Vec<_> = (0..threads)
                    .map(|_| {
                        let r = r.clone();
                        std::thread::spawn(move || check(&*r))
                    })
                    .collect();
                for h in hs {
                    h.join().unwrap();
                }
            }
            Err(e) => panic!("io_uring unavailable, so this test cannot run: {e}"),
        }
    }

    #[test]
    fn direct_io_takes_io_uring_when_it_works_and_pread_when_it_is_refused_or_not_wanted() {
        let dir = Path::new("/nonexistent");
        let works = |_: &Path| Ok(());
        let refused = |_: &Path| Err(std::io::Error::from_raw_os_error(libc::EPERM));
        for mode in [IoMode::Auto, IoMode::Uring, IoMode::UringInline] {
            assert_eq!(choose_direct(mode, dir, works), DirectPath::Uring);
            // Refused as a seccomp filter or io_uring_disabled would: the fallback.
            assert_eq!(choose_direct(mode, dir, refused), DirectPath::Pread);
        }
        let never_asked = |_: &Path| -> std::io::Result<()> { panic!("io_uring probed") };
        assert_eq!(
            choose_direct(IoMode::Pread, dir, never_asked),
            DirectPath::Pread
        );
        assert_eq!(DirectPath::Uring.name(), "io_uring-direct");
        assert_eq!(DirectPath::Pread.name(), "pread-direct");
    }

    #[test]
    fn pread_reads_exact_ranges() {
        check(&PreadReader);
    }

    #[test]
    fn inline_uring_reads_exact_ranges_when_available() {
        check_shared(InlineUringReader::new(), 4);
    }

    #[test]
    fn uring_reads_exact_ranges_when_available() {
        // Many threads share the ring.
        check_shared(UringReader::new(8), 8);
    }
}
