//! What the vfs needs from the dataset: columns, exact sizes and bytes of each sample.
//!
//! The vfs is written against this trait so that it can be driven by an in-memory dataset in
//! tests and by the MDS shard cache when mounted. A read locates its sample once
//! ([`SampleSource::locate`]) and hands the [`Location`] to every call that follows.

use bytes::Bytes;

use crate::cache::CacheError;
use crate::mds::MdsError;
pub use crate::plan::Location;
use crate::status::StreamCacheStatus;

/// One column as it appears in file names: `NNNNNNNN.{name}.{ext}`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ColumnFile {
    /// `{name}.{ext}`, the part of the file name after the number.
    pub suffix: String,
}

impl ColumnFile {
    /// The file suffix of column `name` whose files end in `.ext`.
    pub fn new(name: &str, ext: &str) -> Self {
        Self {
            suffix: format!("{name}.{ext}"),
        }
    }
}

/// A set of column numbers (0..256, as an inode number holds them), one bit each.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ColumnSet([u64; 4]);

impl ColumnSet {
    /// The set whose bits are `words` (column `c` is bit `c % 64` of word `c / 64`).
    pub fn from_words(words: [u64; 4]) -> Self {
        Self(words)
    }

    /// Adds column `c` (ignored past 255).
    pub fn insert(&mut self, c: u32) {
        if let Some(w) = self.0.get_mut(c as usize / 64) {
            *w |= 1 << (c % 64);
        }
    }

    /// Removes column `c`.
    pub fn remove(&mut self, c: u32) {
        if let Some(w) = self.0.get_mut(c as usize / 64) {
            *w &= !(1 << (c % 64));
        }
    }

    /// Whether column `c` is in the set.
    pub fn contains(&self, c: u32) -> bool {
        self.0
            .get(c as usize / 64)
            .is_some_and(|w| w & (1 << (c % 64)) != 0)
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.0.iter().all(|&w| w == 0)
    }
}

/// A shard that has just landed from the store: its verified bytes and their header, for
/// handing the files readers are about to read to the kernel's page cache while the bytes
/// are at hand.
pub struct LandedShard {
    /// The shard's global number (across streams).
    pub global_shard: u32,
    /// The whole shard, verified.
    pub raw: Bytes,
    /// Its header, parsed from `raw`.
    pub header: crate::mds::ShardHeader,
}

/// Told of each shard as it lands from the store ([`SampleSource::watch_landings`]). Must
/// not block: it runs on the thread of the download, which may be a reader's.
pub type OnLanded = std::sync::Arc<dyn Fn(&LandedShard) + Send + Sync>;

/// A read of one sample file: up to `size` bytes from `offset` of column `column` of the
/// sample at `at`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ColumnRead {
    /// Where the sample lives.
    pub at: Location,
    /// The column (its file).
    pub column: u32,
    /// The first byte asked for.
    pub offset: u64,
    /// How many bytes at most.
    pub size: u32,
}

/// Why a sample's bytes could not be served.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SourceError {
    /// No such sample or column.
    #[error("no such sample or column")]
    Missing,
    /// The shard could not be fetched, failed its hash, or its bytes are malformed.
    #[error("shard {shard}: {source}")]
    Shard {
        /// The dataset (its store URL) the shard belongs to.
        store: String,
        /// The shard's name (its basename in the dataset).
        shard: String,
        /// What went wrong.
        #[source]
        source: Box<ShardError>,
    },
}

/// What went wrong with a shard's bytes: the cache (and through it the store) could not give
/// them, or the verified bytes do not hold the sample the index describes.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ShardError {
    /// The cache could not serve the shard (download, check, disk or budget).
    #[error(transparent)]
    Cache(#[from] CacheError),
    /// The sample's bytes do not split into the columns the index lists.
    #[error("sample {index}: {source}")]
    Sample {
        /// The sample's index in its shard.
        index: u32,
        /// What the parser found.
        #[source]
        source: MdsError,
    },
    /// A column's bytes do not render as its encoding says.
    #[error("sample {index} column {column}: {source}")]
    Column {
        /// The sample's index in its shard.
        index: u32,
        /// The column number.
        column: u32,
        /// What the parser found.
        #[source]
        source: MdsError,
    },
    /// A column's range lies outside its sample's bytes.
    #[error("column {column} of sample {index} out of bounds")]
    ColumnOutOfBounds {
        /// The sample's index in its shard.
        index: u32,
        /// The column number.
        column: u32,
    },
}

/// The dataset as the vfs sees it: global sample ids, their column files and bytes.
pub trait SampleSource: Send + Sync {
    /// Number of samples (global ids are `0..num_samples`).
    fn num_samples(&self) -> u64;
    /// Where `sample` lives (stream, shard, index in the shard); `None` past the last one.
    fn locate(&self, sample: u64) -> Option<Location>;
    /// The column files every sample of `sample`'s stream has, in file-name order.
    fn columns(&self, sample: u64) -> Option<&[ColumnFile]>;
    /// Size of the column file when it is known without reading anything now (from a shard
    /// header in memory), and whether it comes from verified bytes; `None` otherwise.
    fn size_now(&self, _at: &Location, _column: u32) -> Option<(u64, bool)> {
        None
    }
    /// A listing of these samples' files begins: make ready, waiting up to `wait`, what
    /// [`SampleSource::size_now`] needs to size them (their shards' headers).
    fn ready_sizes(&self, _samples: &[Location], _wait: std::time::Duration) {}
    /// Exact size of the column file (may fetch the shard or its header).
    fn file_size(&self, at: &Location, column: u32) -> Result<u64, SourceError>;
    /// The bytes `r` asks for (a view of the cached sample's bytes where the file is stored
    /// as is: no copy).
    fn read(&self, r: ColumnRead) -> Result<Bytes, SourceError>;
    /// [`SampleSource::read`] and the file's whole size, both from the same verified bytes
    /// (to check a size handed out earlier from bytes no hash covers).
    fn read_with_size(&self, r: ColumnRead) -> Result<(Bytes, u64), SourceError> {
        let data = self.read(r)?;
        Ok((data, self.file_size(&r.at, r.column)?))
    }
    /// The whole files of `columns` of the sample at `at`, rendered from its verified bytes
    /// when those are in memory now (never waits for the disk or the store); columns whose
    /// bytes are not at hand are left out. For handing a sample's other files to the kernel's
    /// page cache while the reader reads its first.
    fn sibling_files(&self, _at: &Location, _columns: ColumnSet) -> Vec<(u32, Bytes)> {
        Vec::new()
    }
    /// Calls `f` with each shard that lands from the store from now on (set once).
    fn watch_landings(&self, _f: OnLanded) {}
    /// The whole files of `columns` of the sample at `at`, rendered from `landed`, the
    /// verified bytes of its shard; columns whose bytes do not split or render are left out
    /// (their reads say why).
    fn landed_files(
        &self,
        _landed: &LandedShard,
        _at: &Location,
        _columns: ColumnSet,
    ) -> Vec<(u32, Bytes)> {
        Vec::new()
    }
    /// Whether the sample's shard is on local disk now (verified).
    fn is_resident(&self, at: &Location) -> bool;
    /// Whether the sample's bytes can be read now without waiting for the store (its shard on
    /// local disk, or the sample in memory).
    fn can_read_now(&self, _at: &Location) -> bool {
        true
    }
    /// A reader is about to read the sample at `at` (its folder was listed): make ready what
    /// fetching it will need, without waiting for anything.
    fn prepare_to_read(&self, _at: &Location) {}
    /// Live counters of each stream's store and cache for `status.json`.
    fn status(&self) -> Vec<StreamCacheStatus>;
}
