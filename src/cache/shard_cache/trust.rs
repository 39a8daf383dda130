//! File trust: which cached files are trusted as they are (checked against their recorded
//! checksum in this process and unchanged since), and re-hashing those that are new or
//! changed.

use super::ShardCache;
use crate::cache::file_sum::FileSum;
use crate::cache::io::{self, DirectPath};
use crate::cache::stats::Counters;
use crate::cache::CacheError;
use std::fs::File;

/// The recorded checksum of one cached shard and the file (inode, size, mtime) it was last
/// verified against; `None` until verified in this process (an adopted shard).
#[derive(Debug, Clone, Copy)]
pub(super) struct Trust {
    pub(super) sum: FileSum,
    pub(super) verified: Option<FileStamp>,
}

/// Identity and version of a file: a change means its bytes must be checked again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct FileStamp {
    ino: u64,
    size: u64,
    mtime_ns: i128,
}

/// The checksum of the kind of `like` of the first `len` bytes of `file`, read in 1 MiB
/// pieces: with `O_DIRECT` as `direct` says (through io_uring, a few pieces read ahead of
/// the hash, or pread), else through the page cache into one buffer.
fn hash_file(
    file: &File,
    len: u64,
    direct: Option<DirectPath>,
    like: FileSum,
) -> std::io::Result<FileSum> {
    use std::os::unix::fs::FileExt;
    const PIECE: usize = 1 << 20;
    let mut hasher = like.hasher();
    if direct == Some(DirectPath::Uring) {
        io::uring_direct::read_in_order(file, len, PIECE, |b| hasher.update(b))?;
        return Ok(hasher.finish());
    }
    let mut buf = io::direct::AlignedBuf::zeroed(PIECE)?;
    let mut at = 0u64;
    while at < len {
        let want = (len - at).min(PIECE as u64) as usize;
        if direct.is_some() {
            hasher.update(io::direct::read_exact_into(file, &mut buf, at, want)?);
        } else {
            file.read_exact_at(&mut buf[..want], at)?;
            hasher.update(&buf[..want]);
        }
        at += want as u64;
    }
    Ok(hasher.finish())
}

impl FileStamp {
    pub(super) fn of(meta: &std::fs::Metadata) -> Self {
        use std::os::unix::fs::MetadataExt;
        FileStamp {
            ino: meta.ino(),
            size: meta.len(),
            mtime_ns: meta.mtime() as i128 * 1_000_000_000 + meta.mtime_nsec() as i128,
        }
    }
}

impl ShardCache {
    /// Checks the cached file of `shard` against its recorded checksum when the file is new to
    /// this process or changed since it was last checked. False (and the file removed) when
    /// it does not match.
    pub(super) fn verify_file(
        &self,
        shard: usize,
        file: &File,
        meta: &std::fs::Metadata,
    ) -> Result<bool, CacheError> {
        let stamp = FileStamp::of(meta);
        if self.trusted_as_is(shard, stamp) {
            return Ok(true);
        }
        let _one = self.verifying.lock().unwrap_or_else(|p| p.into_inner());
        // Another thread may have checked it while this one waited.
        if self.trusted_as_is(shard, stamp) {
            return Ok(true);
        }
        let Some(t) = self
            .trust
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&shard)
            .copied()
        else {
            return Ok(true);
        };
        let path = self.shard_path(shard)?;
        let got = hash_file(file, meta.len(), self.direct, t.sum)
            .map_err(|e| CacheError::io("read", &path, e))?;
        if got == t.sum {
            if let Some(t) = self
                .trust
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get_mut(&shard)
            {
                t.verified = Some(stamp);
            }
            return Ok(true);
        }
        Counters::add(&self.counters.verify_failures, 1);
        tracing::warn!(shard, path = %path.display(), expected = %t.sum, got = %got, "cached shard does not match its checksum (changed on disk); fetching it again");
        self.trust
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&shard);
        let _ = std::fs::remove_file(&path);
        Ok(false)
    }

    /// A cached shard file opened for reading, past the page cache when cached files are.
    pub(super) fn open_cached(&self, path: &std::path::Path) -> std::io::Result<File> {
        if self.direct.is_some() {
            io::direct::open_read(path)
        } else {
            File::open(path)
        }
    }

    /// Whether the cached file of `shard`, as `stamp` describes it now, is trusted without
    /// hashing it: checked against its recorded checksum in this process and unchanged since
    /// (or with no recorded checksum to check).
    pub(super) fn trusted_as_is(&self, shard: usize, stamp: FileStamp) -> bool {
        self.trust
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&shard)
            .is_none_or(|t| t.verified == Some(stamp))
    }
}
