//! The on-disk layout of one dataset's cache, and the atomic fill that writes it.
//!
//! ```text
//! <cache-dir>/v1/<dataset key>/          one folder per DatasetId (source URL + index digest)
//!     dataset.json                       {source, index_sha256}: for humans and tools
//!     .lock                              flock: one process per dataset folder
//!     tmp/<shard>.<pid>.<n>.part         fills in progress (deleted at open)
//!     shards/<raw basename>              complete, verified, uncompressed shards
//!     sums/<raw basename>.xxh3           xxh3-64 of the shard's bytes, written before the shard,
//!     sums/<raw basename>.crc64nvme      or the store's CRC64NVME of them (see `file_sum.rs`)
//! ```
//! A shard without its sum is not adopted (it is refetched); an adopted shard is hashed against
//! its sum before its first use, and again whenever its file changes under the cache.
//! A file under `shards/` exists only if it was written in full, fsynced and renamed into
//! place, so its existence (with the size index.json gives) records completeness durably;
//! there is no separate journal to get out of step. Basenames may contain folders
//! ("3/shard.00000.mds"); they are validated as [`ObjectKey`]s and so cannot escape.

use super::file_sum::FileSum;
use super::io::{direct, uring_direct::PieceWriter, DirectPath};
use super::CacheError;
use crate::store::ObjectKey;
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Version of the layout; bump when it changes so old folders are ignored, not misread.
pub const LAYOUT_VERSION: &str = "v1";

/// A file written under `tmp/` by [`Layout::stage`], not renamed into place yet; removed when
/// dropped uncommitted.
#[derive(Debug)]
pub(crate) struct Staged {
    path: PathBuf,
    sync: Durability,
}

impl Drop for Staged {
    fn drop(&mut self) {
        if !self.path.as_os_str().is_empty() {
            let _ = fs::remove_file(&self.path);
        }
    }
}

/// Creates `path` (mode 0600; it must not exist) for writing through the page cache.
fn create_new(path: &Path) -> Result<File, CacheError> {
    use std::os::unix::fs::OpenOptionsExt;
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| CacheError::io("create", path, e))
}

/// A staged file written piece by piece ([`Layout::stage_in_pieces`]); removed when dropped
/// unfinished.
pub(crate) struct StagedPieces {
    staged: Staged,
    out: PieceOut,
}

enum PieceOut {
    /// Past the page cache.
    Direct(Box<PieceWriter>),
    /// Through it (a file system without direct I/O, or a cache that does not want it).
    Buffered(File),
}

impl crate::fetch::PartSink for StagedPieces {
    fn write_at(&mut self, at: u64, bytes: &[u8]) -> std::io::Result<()> {
        StagedPieces::write_at(self, at, bytes)
    }
}

impl StagedPieces {
    /// Writes `bytes`, the file's bytes from `at`. With direct I/O, `at` and the bytes'
    /// address must lie on block boundaries, and their length too unless they end the file.
    pub fn write_at(&mut self, at: u64, bytes: &[u8]) -> std::io::Result<()> {
        match &mut self.out {
            PieceOut::Direct(w) => w.write_at(at, bytes),
            PieceOut::Buffered(f) => {
                use std::os::unix::fs::FileExt;
                f.write_all_at(bytes, at)
            }
        }
    }

    /// Every piece written: the staged file, synced if its durability asks, to commit.
    pub fn finish(self) -> Result<Staged, CacheError> {
        if let (Durability::Synced, PieceOut::Buffered(f)) = (self.staged.sync, &self.out) {
            f.sync_all()
                .map_err(|e| CacheError::io("fsync", &self.staged.path, e))?;
        }
        Ok(self.staged)
    }
}

/// Paths of one dataset's cache folder.
#[derive(Debug, Clone)]
pub(crate) struct Layout {
    pub root: PathBuf,
    pub shards: PathBuf,
    pub sums: PathBuf,
    pub tmp: PathBuf,
}

/// Whether [`Layout::write_atomically`] waits for the bytes to reach the disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// fsync the file and its folder: `dest` survives a power loss whole or not at all.
    Synced,
    /// Leave write-back to the kernel. For shard files: a power loss can leave one torn, but
    /// every adopted shard is hashed against its recorded checksum before first use, so a torn
    /// file is refetched, never served — and the fill path does not wait for the disk.
    Unsynced,
    /// As `Unsynced`, written past the page cache (`O_DIRECT`, see `io::direct`; through
    /// io_uring or pwrite as the [`DirectPath`] says) when the bytes start on a block
    /// boundary; the usual way when they do not, or when the file system refuses direct
    /// writes.
    Direct(DirectPath),
}

impl Layout {
    pub fn new(cache_dir: &Path, dataset_key: &str) -> Self {
        let root = cache_dir.join(LAYOUT_VERSION).join(dataset_key);
        Layout {
            shards: root.join("shards"),
            sums: root.join("sums"),
            tmp: root.join("tmp"),
            root,
        }
    }

    /// Creates the folders (mode 0700: cached data is the dataset owner's), refuses any of
    /// them that is a symlink, takes the folder lock, writes `dataset.json`, and empties `tmp/`.
    pub fn prepare(&self, dataset_json: &[u8]) -> Result<File, CacheError> {
        use std::os::unix::fs::DirBuilderExt;
        for d in [&self.root, &self.shards, &self.sums, &self.tmp] {
            fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(d)
                .map_err(|e| CacheError::io("create folder", d, e))?;
            let is_link = fs::symlink_metadata(d)
                .map(|m| m.file_type().is_symlink())
                .unwrap_or(false);
            if is_link {
                return Err(CacheError::Config(format!(
                    "cache folder {} is a symlink; refusing to follow it (use a real folder as --cache-dir)",
                    d.display()
                )));
            }
        }
        let lock_path = self.root.join(".lock");
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(|e| CacheError::io("open", &lock_path, e))?;
        // flock(2): released when the file closes, including on kill -9. (`File::try_lock`
        // would do, but needs Rust 1.89 and the crate declares 1.85.)
        // SAFETY: flock on a descriptor we own and keep open; no memory is involved.
        if unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            return Err(CacheError::Config(format!(
                "cache folder {} is in use by another shardfs process for the same dataset; use a different --cache-dir",
                self.root.display()
            )));
        }
        for entry in fs::read_dir(&self.tmp).map_err(|e| CacheError::io("list", &self.tmp, e))? {
            let path = entry
                .map_err(|e| CacheError::io("list", &self.tmp, e))?
                .path();
            let _ = fs::remove_file(&path);
        }
        let meta = self.root.join("dataset.json");
        if !meta.exists() {
            self.write_atomically(dataset_json, &meta, "dataset", Durability::Synced)?;
        }
        Ok(lock)
    }

    /// Where shard file `basename` lives.
    pub fn shard_path(&self, basename: &ObjectKey) -> PathBuf {
        basename
            .segments()
            .fold(self.shards.clone(), |p, s| p.join(s))
    }

    /// Where a checksum of shard `basename` of the kind named `extension` is kept.
    pub fn sum_path(&self, basename: &ObjectKey, extension: &str) -> PathBuf {
        let mut p = basename
            .segments()
            .fold(self.sums.clone(), |p, s| p.join(s))
            .into_os_string();
        p.push(".");
        p.push(extension);
        PathBuf::from(p)
    }

    /// Records the checksum of shard `basename` (before the shard itself is renamed into
    /// place). A sum of another kind recorded earlier is removed first, so a crash leaves at
    /// most the new one, or none (then the shard is fetched again).
    pub fn write_sum(&self, basename: &ObjectKey, sum: FileSum) -> Result<(), CacheError> {
        for other in FileSum::EXTENSIONS {
            if other != sum.extension() {
                let stale = self.sum_path(basename, other);
                match fs::remove_file(&stale) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => return Err(CacheError::io("remove", &stale, e)),
                }
            }
        }
        let dest = self.sum_path(basename, sum.extension());
        let parent = dest.parent().unwrap_or(&self.sums);
        fs::create_dir_all(parent).map_err(|e| CacheError::io("create folder", parent, e))?;
        let tmp = dest.with_extension(format!("{}.tmp", sum.extension()));
        {
            use std::os::unix::fs::OpenOptionsExt;
            let mut f = OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .open(&tmp)
                .map_err(|e| CacheError::io("create", &tmp, e))?;
            f.write_all(sum.to_text().as_bytes())
                .map_err(|e| CacheError::io("write", &tmp, e))?;
        }
        fs::rename(&tmp, &dest).map_err(|e| CacheError::io("rename into", &dest, e))
    }

    /// The recorded checksum of shard `basename`, if there is a readable one.
    pub fn read_sum(&self, basename: &ObjectKey) -> Option<FileSum> {
        FileSum::EXTENSIONS.iter().find_map(|ext| {
            let text = fs::read_to_string(self.sum_path(basename, ext)).ok()?;
            FileSum::parse(ext, &text)
        })
    }

    /// Writes `data` to a temporary file and renames it to `dest`, so `dest` never holds part
    /// of `data` while this process runs or after it is killed. With [`Durability::Synced`] the
    /// file and folder are fsynced too, so that also holds after a power loss.
    pub fn write_atomically(
        &self,
        data: &[u8],
        dest: &Path,
        tag: &str,
        sync: Durability,
    ) -> Result<(), CacheError> {
        let staged = self.stage(data, tag, sync)?;
        self.commit(staged, dest)
    }

    /// A new name under `tmp/` for a file named after `tag`, removed when dropped.
    fn new_staged(&self, tag: &str, sync: Durability) -> Staged {
        static SEQ: AtomicU64 = AtomicU64::new(0);
        Staged {
            path: self.tmp.join(format!(
                "{tag}.{}.{}.part",
                std::process::id(),
                SEQ.fetch_add(1, Ordering::Relaxed)
            )),
            sync,
        }
    }

    /// [`Layout::stage`] for a file of `len` bytes that arrives in pieces (the parts of a
    /// download, in any order): written as they come by [`StagedPieces::write_at`], then
    /// [`StagedPieces::finish`]ed and committed as a staged file is.
    pub fn stage_in_pieces(
        &self,
        len: u64,
        tag: &str,
        sync: Durability,
    ) -> Result<StagedPieces, CacheError> {
        let staged = self.new_staged(tag, sync);
        let tmp = &staged.path;
        if let Durability::Direct(path) = sync {
            match path.piece_writer(tmp, len) {
                Ok(w) => {
                    return Ok(StagedPieces {
                        staged,
                        out: PieceOut::Direct(Box::new(w)),
                    })
                }
                // EINVAL: this file system takes no direct I/O; write it the usual way.
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                    let _ = fs::remove_file(tmp);
                }
                Err(e) => return Err(CacheError::io("create", tmp, e)),
            }
        }
        let file = create_new(tmp)?;
        Ok(StagedPieces {
            staged,
            out: PieceOut::Buffered(file),
        })
    }

    /// The first half of [`Layout::write_atomically`]: `data` written to a new file under
    /// `tmp/` (named after `tag`), to be renamed into place by [`Layout::commit`] once its
    /// bytes are known good, or removed (when the [`Staged`] is dropped).
    pub fn stage(&self, data: &[u8], tag: &str, sync: Durability) -> Result<Staged, CacheError> {
        let staged = self.new_staged(tag, sync);
        let tmp = &staged.path;
        if let (Durability::Direct(path), true) = (sync, direct::is_aligned(data)) {
            match path.write_new(tmp, data) {
                Ok(()) => return Ok(staged),
                // EINVAL: alignments this file system does not take; write it the usual way.
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                    tracing::debug!(path = %tmp.display(), "direct write refused; writing through the page cache");
                    let _ = fs::remove_file(tmp);
                }
                Err(e) => return Err(CacheError::io("write", tmp, e)),
            }
        }
        let mut f = create_new(tmp)?;
        f.write_all(data)
            .map_err(|e| CacheError::io("write", tmp, e))?;
        if sync == Durability::Synced {
            f.sync_all().map_err(|e| CacheError::io("fsync", tmp, e))?;
        }
        Ok(staged)
    }

    /// Renames a staged file to `dest` (creating its folder), fsyncing the folder when it was
    /// staged [`Durability::Synced`]. A failed commit removes the staged file.
    pub fn commit(&self, mut staged: Staged, dest: &Path) -> Result<(), CacheError> {
        let tmp = std::mem::take(&mut staged.path);
        let result = self.rename_into(&tmp, dest, staged.sync);
        if result.is_err() {
            let _ = fs::remove_file(&tmp);
        }
        result
    }

    /// Moves the written `tmp` to `dest` (creating its folder), fsyncing the folder when
    /// `sync` asks.
    fn rename_into(&self, tmp: &Path, dest: &Path, sync: Durability) -> Result<(), CacheError> {
        let parent = dest.parent().unwrap_or(&self.root);
        fs::create_dir_all(parent).map_err(|e| CacheError::io("create folder", parent, e))?;
        fs::rename(tmp, dest).map_err(|e| CacheError::io("rename into", dest, e))?;
        if sync == Durability::Synced {
            File::open(parent)
                .and_then(|d| d.sync_all())
                .map_err(|e| CacheError::io("fsync folder", parent, e))?;
        }
        Ok(())
    }

    /// Every regular file under `shards/`, as (relative key string, size, mtime nanos).
    pub fn scan(&self) -> Result<Vec<(String, u64, u128)>, CacheError> {
        let mut out = Vec::new();
        let mut stack = vec![self.shards.clone()];
        while let Some(dir) = stack.pop() {
            for entry in fs::read_dir(&dir).map_err(|e| CacheError::io("list", &dir, e))? {
                let entry = entry.map_err(|e| CacheError::io("list", &dir, e))?;
                let path = entry.path();
                let meta = entry
                    .metadata()
                    .map_err(|e| CacheError::io("stat", &path, e))?;
                if meta.file_type().is_symlink() {
                    // Never followed: a link could point anywhere. Removed like any stray file.
                    tracing::warn!(path = %path.display(), "removing a symlink from the cache folder");
                    let _ = fs::remove_file(&path);
                } else if meta.is_dir() {
                    stack.push(path);
                } else if let Ok(rel) = path.strip_prefix(&self.shards) {
                    let rel = rel
                        .to_string_lossy()
                        .replace(std::path::MAIN_SEPARATOR, "/");
                    let mtime = meta
                        .modified()
                        .ok()
                        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                        .map_or(0, |d| d.as_nanos());
                    out.push((rel, meta.len(), mtime));
                }
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_staged_file_is_renamed_into_place_when_committed_and_removed_when_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::new(dir.path(), "k");
        let _lock = layout.prepare(b"{}").unwrap();
        let tmp_files = || fs::read_dir(&layout.tmp).unwrap().count();
        let key = ObjectKey::new("d/shard.00000.mds").unwrap();
        let dest = layout.shard_path(&key);
        for sync in [
            Durability::Unsynced,
            Durability::Direct(DirectPath::Pread),
            Durability::Direct(DirectPath::Uring),
        ] {
            let data = direct::AlignedBuf::zeroed(3 << 12).unwrap();
            let staged = layout.stage(&data, "shard0", sync).unwrap();
            assert_eq!(tmp_files(), 1);
            assert!(!dest.exists(), "not in place before the commit");
            drop(staged);
            assert_eq!(tmp_files(), 0, "dropped uncommitted: removed");
            let staged = layout.stage(b"shard bytes", "shard0", sync).unwrap();
            layout.commit(staged, &dest).unwrap();
            assert_eq!(tmp_files(), 0);
            assert_eq!(fs::read(&dest).unwrap(), b"shard bytes");
            fs::remove_file(&dest).unwrap();
        }
    }
}
