//! `ShardCache`: the disk tier with budget, pins, single flight and prefetch, plus the
//! memory tier in front of it. See the module notes in `cache/mod.rs`.

use super::dataset::Dataset;
use super::download_budget::{DownloadBudget, Urgency, IDLE_BUFFER_LIFETIME};
use super::io::{self, FileReader};
use super::layout::{Durability, Layout};
use super::memory::{MemoryTier, Provenance};
use super::policy::{Candidate, EvictionContext, EvictionPolicy, LruPolicy};
use super::preload::{Advice, Preloaded};
use super::stats::{CacheStats, Counters};
use super::{CacheError, CacheOptions};
use crate::mds::ShardHeader;
use crate::store::ObjectKey;
use bytes::Bytes;
use std::collections::HashMap;
use std::fs::File;
use std::ops::Range;
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};
use std::time::Instant;

/// One fill in progress; waiters block on `cv` until `result` is set, or until the shard's
/// verified bytes are in (`verified`, for [`ShardCache::sample`]: served before they are on
/// disk).
#[derive(Debug, Default)]
struct Flight {
    state: Mutex<FlightState>,
    cv: Condvar,
}

#[derive(Debug, Default)]
struct FlightState {
    /// The downloaded and verified shard, from the moment it is checked until the fill ends.
    verified: Option<Bytes>,
    result: Option<Result<(), CacheError>>,
}

impl Flight {
    fn lock(&self) -> MutexGuard<'_, FlightState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The shard's bytes passed every check: readers of single samples need not wait for
    /// the disk write.
    fn publish(&self, raw: Bytes) {
        let mut st = self.lock();
        if st.result.is_none() {
            st.verified = Some(raw);
        }
        drop(st);
        self.cv.notify_all();
    }

    fn finish(&self, r: Result<(), CacheError>) {
        let mut st = self.lock();
        st.result = Some(r);
        // The shard is on disk now (or the fill failed): let go of its bytes.
        st.verified = None;
        drop(st);
        self.cv.notify_all();
    }

    fn wait(&self) -> Result<(), CacheError> {
        let mut st = self.lock();
        loop {
            if let Some(r) = st.result.as_ref() {
                return r.clone();
            }
            st = self.cv.wait(st).unwrap_or_else(|p| p.into_inner());
        }
    }

    /// The verified bytes as soon as they are in; `None` when the fill ended first (the
    /// shard is resident, or the fill failed: look at the slot again).
    fn wait_verified(&self) -> Option<Bytes> {
        let mut st = self.lock();
        loop {
            if let Some(b) = st.verified.as_ref() {
                return Some(b.clone());
            }
            if st.result.is_some() {
                return None;
            }
            st = self.cv.wait(st).unwrap_or_else(|p| p.into_inner());
        }
    }
}

/// Whether `acquire` may block until other fills finish or readers unpin to make room.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RoomWait {
    /// Reads: wait for room; fail only when the pinned shards leave no room at all.
    Wait,
    /// Prefetch: give up quietly when there is no room right now.
    GiveUp,
}

/// What `make_room` did.
enum Room<'a> {
    /// Room was made; the lock is still held.
    Made(MutexGuard<'a, State>),
    /// It waited for a change (fill finished, unpin, eviction); look at the slot again.
    Retry,
    /// No room now, and the caller does not wait.
    NotNow,
}

/// Cleans up a fill that did not finish normally (its thread panicked): frees the slot and the
/// reservation and wakes the waiters, so no `Flight::wait` hangs forever.
struct FillGuard<'a> {
    cache: &'a ShardCache,
    shard: usize,
    need: u64,
    flight: Arc<Flight>,
    armed: bool,
}

impl Drop for FillGuard<'_> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        {
            let mut st = self.cache.lock();
            st.reserved = st.reserved.saturating_sub(self.need);
            if let Some(slot) = st.slots.get_mut(self.shard) {
                *slot = Slot::Absent;
            }
        }
        self.cache.room.notify_all();
        Counters::add(&self.cache.counters.fill_failures, 1);
        self.flight
            .finish(Err(CacheError::FillAborted { shard: self.shard }));
    }
}

#[derive(Debug, Clone)]
enum Slot {
    Absent,
    Filling(Arc<Flight>),
    Resident {
        bytes: u64,
        pins: u32,
        last_use: u64,
        /// The cached file, opened on first read and kept open while the shard is resident
        /// (a read then costs no open/close).
        file: Option<Arc<File>>,
    },
}

#[derive(Debug)]
struct State {
    slots: Vec<Slot>,
    usage: u64,
    reserved: u64,
    clock: u64,
}

/// Shards of one dataset on local disk within a byte budget, with a memory tier in front.
///
/// All methods are blocking and safe to call from many threads (FUSE worker threads); do not
/// call them from inside a tokio runtime.
pub struct ShardCache {
    dataset: Arc<Dataset>,
    layout: Layout,
    keys: Vec<ObjectKey>,
    limit: u64,
    opts: CacheOptions,
    state: Mutex<State>,
    /// Notified whenever room may have appeared: a fill finished or failed, a reader unpinned,
    /// a shard was evicted or forgotten.
    room: Condvar,
    policy: Arc<dyn EvictionPolicy>,
    reader: Arc<dyn FileReader>,
    /// Cached shard files are written and read past the page cache (`O_DIRECT`): the mount's
    /// own files hold the bytes readers read in RAM, once (see `io::direct`).
    direct: bool,
    memory: MemoryTier,
    /// Samples the readahead asked for, read from direct-I/O files ahead of their reader.
    preloaded: Arc<Preloaded>,
    /// Reads ahead for the preload threads; `None` when cached files go through the page
    /// cache (the advice is then `posix_fadvise`).
    preload_tx: Mutex<Option<mpsc::SyncSender<PreloadJob>>>,
    counters: Arc<Counters>,
    prefetch_tx: Mutex<Option<mpsc::Sender<usize>>>,
    /// What each resident shard's bytes must hash to, and the file state last found to match.
    trust: Mutex<HashMap<usize, Trust>>,
    /// Serializes checksum verifications, so a shard is hashed once however many readers wait.
    verifying: Mutex<()>,
    /// Bounds the bytes of shards downloading at once.
    downloads: Arc<DownloadBudget>,
    _lock: File,
}

/// The recorded checksum of one cached shard and the file (inode, size, mtime) it was last
/// verified against; `None` until verified in this process (an adopted shard).
#[derive(Debug, Clone, Copy)]
struct Trust {
    sum: u64,
    verified: Option<FileStamp>,
}

/// Identity and version of a file: a change means its bytes must be checked again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FileStamp {
    ino: u64,
    size: u64,
    mtime_ns: i128,
}

/// Where sample `i` lies in a whole shard of `len` bytes with this header; `None` when the
/// header has no such sample or its offsets run past the shard.
fn sample_span(header: &ShardHeader, i: u32, len: usize) -> Option<std::ops::Range<usize>> {
    let r = header.sample_range(i).ok()?;
    let (start, end) = (usize::try_from(r.start).ok()?, usize::try_from(r.end).ok()?);
    (start <= end && end <= len).then_some(start..end)
}

/// xxh3-64 of the first `len` bytes of `file`, read in 1 MiB pieces into one buffer
/// (`direct`: the file was opened with `O_DIRECT`).
fn hash_file(file: &File, len: u64, direct: bool) -> std::io::Result<u64> {
    use std::os::unix::fs::FileExt;
    const PIECE: usize = 1 << 20;
    let mut hasher = xxhash_rust::xxh3::Xxh3::new();
    let mut buf = io::direct::AlignedBuf::zeroed(PIECE)?;
    let mut at = 0u64;
    while at < len {
        let want = (len - at).min(PIECE as u64) as usize;
        if direct {
            hasher.update(io::direct::read_exact_into(file, &mut buf, at, want)?);
        } else {
            file.read_exact_at(&mut buf[..want], at)?;
            hasher.update(&buf[..want]);
        }
        at += want as u64;
    }
    Ok(hasher.digest())
}

impl FileStamp {
    fn of(meta: &std::fs::Metadata) -> Self {
        use std::os::unix::fs::MetadataExt;
        FileStamp {
            ino: meta.ino(),
            size: meta.len(),
            mtime_ns: meta.mtime() as i128 * 1_000_000_000 + meta.mtime_nsec() as i128,
        }
    }
}

impl std::fmt::Debug for ShardCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShardCache")
            .field("dir", &self.layout.root)
            .field("limit", &self.limit)
            .finish_non_exhaustive()
    }
}

impl ShardCache {
    /// Opens (or creates) the cache folder of `dataset` under `opts.cache_dir` with LRU
    /// eviction. Complete shards left by earlier runs are adopted without refetching.
    pub fn open(dataset: Arc<Dataset>, opts: CacheOptions) -> Result<Arc<ShardCache>, CacheError> {
        Self::open_with_policy(dataset, opts, Arc::new(LruPolicy))
    }

    /// Like [`ShardCache::open`] with a custom eviction policy.
    pub fn open_with_policy(
        dataset: Arc<Dataset>,
        opts: CacheOptions,
        policy: Arc<dyn EvictionPolicy>,
    ) -> Result<Arc<ShardCache>, CacheError> {
        let shards = dataset.index().shards();
        let limit = opts.cache_limit.unwrap_or(u64::MAX);
        if let Some((i, big)) = shards.iter().enumerate().max_by_key(|(_, s)| s.raw.bytes) {
            if big.raw.bytes > limit {
                return Err(CacheError::BudgetTooSmall {
                    limit,
                    shard: i,
                    basename: big.raw.basename.clone(),
                    bytes: big.raw.bytes,
                });
            }
        }
        let keys = shards
            .iter()
            .map(|s| ObjectKey::new(s.raw.basename.clone()))
            .collect::<Result<Vec<_>, _>>()?;
        let layout = Layout::new(&opts.cache_dir, &dataset.id().key());
        let meta = serde_json::json!({
            "source": dataset.id().source,
            "index_sha256": dataset.id().index_sha256,
            "layout": super::layout::LAYOUT_VERSION,
        });
        let lock = layout.prepare(meta.to_string().as_bytes())?;
        let reader = io::select(opts.io, opts.uring_depth)?;
        let direct = opts.direct_io && io::direct_wanted()? && io::direct::probe(&layout.tmp);
        tracing::info!(
            direct,
            "cached shard files {} the page cache",
            if direct { "bypass" } else { "go through" }
        );

        // Adopt complete shards; delete anything else under shards/.
        let by_name: HashMap<&str, usize> = keys
            .iter()
            .enumerate()
            .map(|(i, k)| (k.as_str(), i))
            .collect();
        let mut found = layout.scan()?;
        found.sort_by_key(|(_, _, mtime)| *mtime);
        let mut slots = vec![Slot::Absent; shards.len()];
        let mut trust = HashMap::new();
        let (mut usage, mut clock) = (0u64, 0u64);
        for (rel, size, _) in found {
            let recorded = by_name
                .get(rel.as_str())
                .and_then(|&i| layout.read_sum(&keys[i]).map(|sum| (i, sum)));
            match recorded {
                Some((i, sum)) if size == shards[i].raw.bytes => {
                    trust.insert(
                        i,
                        Trust {
                            sum,
                            verified: None,
                        },
                    );
                    clock += 1;
                    slots[i] = Slot::Resident {
                        bytes: size,
                        pins: 0,
                        last_use: clock,
                        file: None,
                    };
                    usage += size;
                }
                _ => {
                    let p = layout.shards.join(&rel);
                    tracing::info!(path = %p.display(), "removing stray or incomplete cache file");
                    let _ = std::fs::remove_file(&p);
                }
            }
        }
        let adopted = slots
            .iter()
            .filter(|s| matches!(s, Slot::Resident { .. }))
            .count();
        tracing::info!(dir = %layout.root.display(), adopted, usage, "shard cache opened");
        // With direct I/O, part of the memory tier's share holds samples read ahead instead.
        let preload_cap = if direct { opts.memory_limit / 8 * 3 } else { 0 };
        let cache = Arc::new(ShardCache {
            counters: dataset.counters.clone(),
            memory: MemoryTier::new(opts.memory_limit - preload_cap),
            preloaded: Arc::new(Preloaded::new(preload_cap)),
            preload_tx: Mutex::new(None),
            dataset,
            layout,
            keys,
            limit,
            state: Mutex::new(State {
                slots,
                usage,
                reserved: 0,
                clock,
            }),
            room: Condvar::new(),
            downloads: Arc::new(DownloadBudget::with_loan(
                opts.download_memory,
                opts.download_loan,
            )),
            policy,
            reader,
            direct,
            prefetch_tx: Mutex::new(None),
            opts,
            trust: Mutex::new(trust),
            verifying: Mutex::new(()),
            _lock: lock,
        });
        for (i, s) in cache.lock().slots.iter().enumerate() {
            if let Slot::Resident { bytes, .. } = s {
                cache.policy.inserted(i, *bytes);
            }
        }
        // A smaller budget than last time: evict until usage <= limit (need 0), no further.
        {
            let st = cache.lock();
            if st.usage > cache.limit {
                match cache.make_room(st, usize::MAX, 0, RoomWait::GiveUp, Instant::now())? {
                    Room::Made(_) => {}
                    Room::Retry | Room::NotNow => {
                        let st = cache.lock();
                        return Err(CacheError::Full {
                            shard: usize::MAX,
                            need: 0,
                            limit: cache.limit,
                            pinned: 0,
                            filling: st.reserved,
                        });
                    }
                }
            }
        }
        cache.start_prefetchers();
        if direct && preload_cap > 0 {
            cache.start_preloaders();
        }
        Ok(cache)
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The dataset this cache serves.
    pub fn dataset(&self) -> &Arc<Dataset> {
        &self.dataset
    }

    /// The dataset's cache folder (`<cache-dir>/v1/<dataset key>`).
    pub fn dir(&self) -> &std::path::Path {
        &self.layout.root
    }

    /// Where shard `shard` lives (or would live) on disk.
    pub fn shard_path(&self, shard: usize) -> Result<std::path::PathBuf, CacheError> {
        Ok(self.layout.shard_path(self.key(shard)?))
    }

    fn key(&self, shard: usize) -> Result<&ObjectKey, CacheError> {
        self.keys.get(shard).ok_or(CacheError::NoSuchShard {
            shard,
            shards: self.keys.len(),
        })
    }

    /// Whether `shard` is complete on disk right now.
    pub fn is_resident(&self, shard: usize) -> bool {
        matches!(self.lock().slots.get(shard), Some(Slot::Resident { .. }))
    }

    /// Whether sample `i` of `shard` can be read now without waiting for the store: the
    /// sample in memory (not counted as a use), or the shard on disk.
    pub fn can_read_now(&self, shard: usize, i: u32) -> bool {
        self.memory.contains_sample(shard, i) || self.is_resident(shard)
    }

    /// The shard on disk, fetching it if needed (one download however many threads ask),
    /// pinned against eviction until the handle is dropped.
    pub fn get(self: &Arc<Self>, shard: usize) -> Result<ShardHandle, CacheError> {
        match self.get_checked(shard)? {
            Some(h) => Ok(h),
            // The cached file failed its checksum and is gone: fetch it again, once.
            None => self.get_checked(shard)?.ok_or_else(|| CacheError::Corrupt {
                shard,
                file: self
                    .shard_path(shard)
                    .unwrap_or_default()
                    .display()
                    .to_string(),
                reason: "a freshly cached copy failed its checksum too (failing disk?)".into(),
            }),
        }
    }

    /// Checks the cached file of `shard` against its recorded xxh3 when the file is new to
    /// this process or changed since it was last checked. False (and the file removed) when
    /// it does not match.
    fn verify_file(
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
        let got = hash_file(file, meta.len(), self.direct)
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
        tracing::warn!(shard, path = %path.display(), expected = format!("{:016x}", t.sum), got = format!("{got:016x}"), "cached shard does not match its checksum (changed on disk); fetching it again");
        self.trust
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&shard);
        let _ = std::fs::remove_file(&path);
        Ok(false)
    }

    /// A cached shard file opened for reading, past the page cache when cached files are.
    fn open_cached(&self, path: &std::path::Path) -> std::io::Result<File> {
        if self.direct {
            io::direct::open_read(path)
        } else {
            File::open(path)
        }
    }

    /// Whether the cached file of `shard`, as `stamp` describes it now, is trusted without
    /// hashing it: checked against its recorded xxh3 in this process and unchanged since (or
    /// with no recorded xxh3 to check).
    fn trusted_as_is(&self, shard: usize, stamp: FileStamp) -> bool {
        self.trust
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&shard)
            .is_none_or(|t| t.verified == Some(stamp))
    }

    /// The open file of resident `shard`: the one kept in its slot, else opened now and kept.
    /// A kept file whose name was unlinked behind our back is dropped and the path reopened.
    fn resident_file(
        &self,
        shard: usize,
        path: &std::path::Path,
    ) -> std::io::Result<(Arc<File>, std::fs::Metadata)> {
        use std::os::unix::fs::MetadataExt;
        let kept = match self.lock().slots.get(shard) {
            Some(Slot::Resident { file: Some(f), .. }) => Some(f.clone()),
            _ => None,
        };
        if let Some(f) = kept {
            match f.metadata() {
                Ok(m) if m.nlink() > 0 => return Ok((f, m)),
                _ => tracing::debug!(shard, "cached file was unlinked; reopening its path"),
            }
        }
        let f = Arc::new(self.open_cached(path)?);
        let meta = f.metadata()?;
        if let Some(Slot::Resident { file, .. }) = self.lock().slots.get_mut(shard) {
            *file = Some(f.clone());
        }
        Ok((f, meta))
    }

    fn get_checked(self: &Arc<Self>, shard: usize) -> Result<Option<ShardHandle>, CacheError> {
        self.acquire(shard, true, RoomWait::Wait)?;
        let path = self.shard_path(shard)?;
        match self.resident_file(shard, &path) {
            Ok((f, meta)) => {
                match self.verify_file(shard, &f, &meta) {
                    Ok(true) => {}
                    Ok(false) => {
                        self.unpin(shard);
                        self.forget(shard);
                        return Ok(None);
                    }
                    Err(e) => {
                        self.unpin(shard);
                        return Err(e);
                    }
                }
                let len = meta.len();
                self.policy.touched(shard);
                Ok(Some(ShardHandle {
                    cache: self.clone(),
                    shard,
                    file: f,
                    len,
                }))
            }
            Err(e) => {
                // Deleted (or unreadable) behind our back: forget it so the next call refetches.
                self.unpin(shard);
                self.forget(shard);
                Err(CacheError::io("open", path, e))
            }
        }
    }

    /// Starts fetching `shard` in the background if it is not on disk; returns at once.
    /// Failures are logged and counted in `fill_failures`.
    pub fn prefetch(&self, shard: usize) {
        if shard >= self.keys.len() || !matches!(self.lock().slots.get(shard), Some(Slot::Absent)) {
            return;
        }
        if let Some(tx) = self
            .prefetch_tx
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
        {
            let _ = tx.send(shard);
        }
    }

    /// Makes `shard` resident (fetching if needed) without keeping a pin. Blocking; when the
    /// budget is taken by other fills or pinned shards it waits for room, and reports
    /// [`CacheError::Full`] only when the pinned shards alone leave no room for this one.
    pub fn ensure(&self, shard: usize) -> Result<(), CacheError> {
        self.acquire(shard, false, RoomWait::Wait).map(|_| ())
    }

    /// Like [`ShardCache::ensure`] for prefetching: never waits for room. Returns `Ok(false)`
    /// (and fetches nothing) when the shard would not fit now without waiting.
    pub fn ensure_if_room(&self, shard: usize) -> Result<bool, CacheError> {
        self.acquire(shard, false, RoomWait::GiveUp)
    }

    /// Evicts `shard` now if it is resident and unpinned; returns whether it did.
    pub fn evict(&self, shard: usize) -> bool {
        let mut st = self.lock();
        match st.slots.get(shard) {
            Some(Slot::Resident { pins: 0, .. }) => {
                self.remove(&mut st, shard);
                drop(st);
                self.room.notify_all();
                true
            }
            _ => false,
        }
    }

    /// The parsed header of `shard`: from memory, from the cached file, by one ranged GET
    /// when the shard is uncompressed and not local, else by fetching the whole shard.
    /// The header may come from a ranged read (not hash-checked): use it for sizes only.
    pub fn header(self: &Arc<Self>, shard: usize) -> Result<Arc<ShardHeader>, CacheError> {
        if let Some(h) = self.memory.header_any(shard) {
            Counters::add(&self.counters.memory_hits, 1);
            return Ok(h);
        }
        Counters::add(&self.counters.memory_misses, 1);
        if let Some(raw) = self.flight_verified(shard) {
            // On its way: its verified header (the fill put it in memory before publishing).
            if let Some(h) = self.memory.header(shard) {
                return Ok(h);
            }
            return Ok(Arc::new(
                ShardHeader::parse(&raw).map_err(|e| self.corrupt(shard, e))?,
            ));
        }
        let header = if self.is_resident(shard) || !self.dataset.is_ranged(shard)? {
            return self.get(shard)?.header();
        } else {
            Arc::new(self.dataset.fetch_header(shard)?)
        };
        self.memory
            .put_header(shard, Provenance::Ranged, header.clone());
        Ok(header)
    }

    /// Sample `i` of `shard`: memory tier, else the verified bytes of a fill in progress (a
    /// read does not wait for the disk write), else the cached file (fetching the shard if
    /// needed). Verified bytes only; when the disk cannot take the shard, the verified samples
    /// the failed fill left in memory still answer.
    pub fn sample(self: &Arc<Self>, shard: usize, i: u32) -> Result<Bytes, CacheError> {
        if let Some(b) = self.memory.sample(shard, i) {
            Counters::add(&self.counters.memory_hits, 1);
            return Ok(b);
        }
        if let Some(b) = self.preloaded.take((shard, i)) {
            // Kept in the tier from here, for the sample's other columns.
            Counters::add(&self.counters.preload_hits, 1);
            if self.tier_has_room(b.len() as u64) {
                self.memory
                    .put_sample(shard, i, Provenance::Verified, b.clone());
            }
            return Ok(b);
        }
        if let Some(b) = self.sample_from_flight(shard, i)? {
            // A read that waited for its shard's download.
            Counters::add(&self.counters.disk_misses, 1);
            return Ok(b);
        }
        match self.get(shard) {
            Ok(h) => h.sample(i),
            Err(e @ CacheError::Io { .. }) => self.memory.sample(shard, i).ok_or(e),
            Err(e) => Err(e),
        }
    }

    /// Asks the kernel to start reading sample `i` of `shard` from the cached file into the
    /// page cache (`posix_fadvise(WILLNEED)`), so a read that comes soon finds it there
    /// instead of waiting for the disk. Does nothing (false) unless the shard is resident with
    /// its file open and its verified header in memory: it never blocks on the store, the disk
    /// or a checksum. (It does not look in the memory tier first: a look-up there would count
    /// as a use of the sample in the tier's admission policy, and advising pages already in
    /// the page cache costs little.) Nothing to do either when cached files bypass the page
    /// cache.
    pub fn advise_sample(&self, shard: usize, i: u32) -> Advice {
        let Some(header) = self.memory.header(shard) else {
            return Advice::Skipped;
        };
        let Ok(range) = header.sample_range(i) else {
            return Advice::Skipped;
        };
        let file = match self.lock().slots.get(shard) {
            Some(Slot::Resident { file: Some(f), .. }) => f.clone(),
            _ => return Advice::Skipped,
        };
        if self.direct {
            return self.preload(shard, i, file, range);
        }
        let (Ok(offset), Ok(len)) = (
            libc::off_t::try_from(range.start),
            libc::off_t::try_from(range.end.saturating_sub(range.start)),
        ) else {
            return Advice::Skipped;
        };
        use std::os::fd::AsRawFd;
        // SAFETY: the descriptor is open for as long as `file` lives; the call reads no memory.
        let rc = unsafe {
            libc::posix_fadvise(file.as_raw_fd(), offset, len, libc::POSIX_FADV_WILLNEED)
        };
        if rc == 0 {
            Counters::add(&self.counters.advised, 1);
            Advice::Started
        } else {
            Advice::Skipped
        }
    }

    /// Queues a read of sample `i` of `shard` (bytes `range` of `file`) into
    /// [`Preloaded`], when the file is trusted as it is now (checked against its recorded
    /// xxh3 in this process, or written by it), the sample is not in memory yet, and there is
    /// room.
    fn preload(&self, shard: usize, i: u32, file: Arc<File>, range: Range<u64>) -> Advice {
        if self.preloaded.is_off() || self.memory.contains_sample(shard, i) {
            return Advice::Skipped;
        }
        let Ok(meta) = file.metadata() else {
            return Advice::Skipped;
        };
        if !self.trusted_as_is(shard, FileStamp::of(&meta)) || range.end > meta.len() {
            return Advice::Skipped;
        }
        let len = range.end - range.start;
        if !self.tier_has_room(len) {
            return Advice::Full;
        }
        let advice = self.preloaded.reserve((shard, i), len);
        if advice != Advice::Started {
            return advice;
        }
        let job = PreloadJob {
            shard,
            i,
            file,
            range,
        };
        let sent = match self
            .preload_tx
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
        {
            Some(tx) => tx
                .try_send(job)
                .map_err(|e| matches!(e, mpsc::TrySendError::Full(_))),
            None => Err(false),
        };
        match sent {
            Ok(()) => {
                Counters::add(&self.counters.advised, 1);
                Advice::Started
            }
            Err(full) => {
                self.preloaded.cancel((shard, i));
                if full {
                    Advice::Full
                } else {
                    Advice::Skipped
                }
            }
        }
    }

    /// Sample `i` without filling the disk tier: memory, else the verified bytes of a fill in
    /// progress (waiting for them: the shard is on its way anyway, and ranged GETs beside its
    /// download would fetch the same bytes twice), else the cached file if resident, else
    /// ranged GETs (header + sample) for an uncompressed shard, else a full fill.
    /// Ranged bytes are not hash-checked: they answer `stat`, never a read.
    pub fn sample_direct(self: &Arc<Self>, shard: usize, i: u32) -> Result<Bytes, CacheError> {
        if let Some(b) = self.memory.sample_any(shard, i) {
            Counters::add(&self.counters.memory_hits, 1);
            return Ok(b);
        }
        if let Some(b) = self.sample_from_flight(shard, i)? {
            return Ok(b);
        }
        if self.is_resident(shard) || !self.dataset.is_ranged(shard)? {
            return self.get(shard)?.sample(i);
        }
        Counters::add(&self.counters.memory_misses, 1);
        let header = self.header(shard)?;
        let r = header.sample_range(i).map_err(|_| {
            self.out_of_range(shard, format!("sample {i} of {}", header.num_samples()))
        })?;
        let b = self.dataset.fetch_range(shard, r)?;
        if self.tier_has_room(b.len() as u64) {
            self.memory
                .put_sample(shard, i, Provenance::Ranged, b.clone());
        }
        Ok(b)
    }

    /// The stored length of sample `i` of `shard` from the shard's header alone, for `stat`:
    /// the header comes from memory, the cached file, a fill in progress, or one ranged GET
    /// of an uncompressed remote shard (then kept in memory for the shard's other samples;
    /// not hash-checked: sizes only).
    pub fn sample_len(self: &Arc<Self>, shard: usize, i: u32) -> Result<u64, CacheError> {
        if let Some(b) = self.memory.sample_any(shard, i) {
            return Ok(b.len() as u64);
        }
        let header = self.header(shard)?;
        let r = header.sample_range(i).map_err(|_| {
            self.out_of_range(shard, format!("sample {i} of {}", header.num_samples()))
        })?;
        Ok(r.end.saturating_sub(r.start))
    }

    fn out_of_range(&self, shard: usize, what: String) -> CacheError {
        CacheError::OutOfRange {
            shard,
            file: self
                .keys
                .get(shard)
                .map(|k| k.to_string())
                .unwrap_or_default(),
            what,
        }
    }

    /// How long whole-shard downloads took so far.
    pub fn fetch_latency(&self) -> crate::latency::LatencySnapshot {
        self.counters.fetch_latency.snapshot()
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> CacheStats {
        let c = &self.counters;
        let st = self.lock();
        let (mut resident, mut pinned) = (0, 0);
        for s in &st.slots {
            if let Slot::Resident { pins, .. } = s {
                resident += 1;
                if *pins > 0 {
                    pinned += 1;
                }
            }
        }
        let read_ahead = self.preloaded.stats();
        CacheStats {
            bytes_fetched: Counters::load(&c.bytes_fetched),
            shards_fetched: Counters::load(&c.shards_fetched),
            ranged_fetches: Counters::load(&c.ranged_fetches),
            memory_hits: Counters::load(&c.memory_hits),
            memory_misses: Counters::load(&c.memory_misses),
            disk_hits: Counters::load(&c.disk_hits),
            disk_misses: Counters::load(&c.disk_misses),
            evictions: Counters::load(&c.evictions),
            fill_failures: Counters::load(&c.fill_failures),
            disk_write_failures: Counters::load(&c.disk_write_failures),
            samples_advised: Counters::load(&c.advised),
            samples_read_ahead: Counters::load(&c.preloaded),
            read_ahead_hits: Counters::load(&c.preload_hits),
            read_ahead_bytes: self.preloaded.bytes(),
            read_ahead_full: read_ahead.full,
            read_ahead_late: read_ahead.late,
            read_ahead_unused: read_ahead.unused,
            verify_failures: Counters::load(&c.verify_failures),
            repaired_downloads: Counters::load(&c.repaired_downloads),
            parts_refetched: Counters::load(&c.parts_refetched),
            usage_bytes: st.usage,
            limit_bytes: self.limit,
            resident_shards: resident,
            memory_tier_bytes: self.memory.bytes(),
            downloading_bytes: self.downloads.in_use(),
            idle_download_buffer_bytes: self.downloads.idle_buffer_bytes(),
            pinned_shards: pinned,
            io_backend: if self.direct {
                "pread-direct".into()
            } else {
                self.reader.name().into()
            },
        }
    }

    /// Resident (and, if `pin`, pinned) on return (`Ok(true)`), or the error of the fill.
    /// `Ok(false)`: no room now and `wait` is [`RoomWait::GiveUp`]; nothing was done.
    ///
    /// A read (`pin`) that waited on a fill started by someone else (readahead, another read)
    /// which failed starts one fill of its own before it fails: a read fails only after a fill
    /// made for it failed past the retry budget, never because of another fill's bad luck.
    fn acquire(&self, shard: usize, pin: bool, wait: RoomWait) -> Result<bool, CacheError> {
        let need = self.dataset.shard(shard)?.raw.bytes;
        let mut counted = false;
        let mut second_chance = pin;
        let deadline = Instant::now() + self.opts.pinned_wait;
        loop {
            let mut st = self.lock();
            st.clock += 1;
            let now = st.clock;
            let slot = st.slots.get_mut(shard).ok_or(CacheError::NoSuchShard {
                shard,
                shards: self.keys.len(),
            })?;
            match slot {
                Slot::Resident { pins, last_use, .. } => {
                    if pin {
                        *pins += 1;
                    }
                    *last_use = now;
                    if !counted {
                        Counters::add(&self.counters.disk_hits, 1);
                    }
                    return Ok(true);
                }
                Slot::Filling(flight) => {
                    let flight = flight.clone();
                    drop(st);
                    if !counted {
                        Counters::add(&self.counters.disk_misses, 1);
                        counted = true;
                    }
                    match flight.wait() {
                        // Resident now (or evicted again already): look again.
                        Ok(()) => {}
                        // The failed fill left the slot absent: look again and fill it.
                        Err(e) if second_chance => {
                            second_chance = false;
                            tracing::debug!(shard, error = %e, "a fill this read waited on failed; fetching again");
                        }
                        Err(e) => return Err(e),
                    }
                }
                Slot::Absent => {
                    if !counted {
                        Counters::add(&self.counters.disk_misses, 1);
                        counted = true;
                    }
                    let mut st = match self.make_room(st, shard, need, wait, deadline)? {
                        Room::Made(st) => st,
                        // The slot may have changed while waiting: look again.
                        Room::Retry => continue,
                        Room::NotNow => return Ok(false),
                    };
                    let flight = Arc::new(Flight::default());
                    st.slots[shard] = Slot::Filling(flight.clone());
                    st.reserved = st.reserved.saturating_add(need);
                    drop(st);
                    // A caller that waits (a read) is a demand: its download goes before the
                    // readahead's, in download memory and in connections.
                    let demand = wait == RoomWait::Wait;
                    self.run_fill(shard, need, &flight, pin, demand)?;
                    return Ok(true);
                }
            }
        }
    }

    /// Fills the slot of `shard`, which the caller set to `Filling(flight)` with `need` bytes
    /// reserved: downloads it, then makes it resident (pinned once if `pin`) or absent again,
    /// and tells the flight's waiters.
    fn run_fill(
        &self,
        shard: usize,
        need: u64,
        flight: &Arc<Flight>,
        pin: bool,
        demand: bool,
    ) -> Result<(), CacheError> {
        let mut guard = FillGuard {
            cache: self,
            shard,
            need,
            flight: flight.clone(),
            armed: true,
        };
        let result = self.fill(shard, need, demand, flight);
        guard.armed = false;
        let mut st = self.lock();
        st.reserved = st.reserved.saturating_sub(need);
        match result {
            Ok((bytes, file)) => {
                st.clock += 1;
                let last_use = st.clock;
                st.slots[shard] = Slot::Resident {
                    bytes,
                    pins: u32::from(pin),
                    last_use,
                    file,
                };
                st.usage = st.usage.saturating_add(bytes);
                drop(st);
                self.room.notify_all();
                self.policy.inserted(shard, bytes);
                flight.finish(Ok(()));
                Ok(())
            }
            Err(e) => {
                st.slots[shard] = Slot::Absent;
                drop(st);
                self.room.notify_all();
                Counters::add(&self.counters.fill_failures, 1);
                flight.finish(Err(e.clone()));
                Err(e)
            }
        }
    }

    /// Sample `i` of `shard` from the verified bytes of a fill in progress (started by the
    /// readahead or another read), as soon as they are checked: the read does not wait for
    /// the disk write. `None` when nobody fills the shard or the fill ended first: read it the
    /// usual way (which fills it on this thread when it is absent).
    fn sample_from_flight(&self, shard: usize, i: u32) -> Result<Option<Bytes>, CacheError> {
        let Some(raw) = self.flight_verified(shard) else {
            return Ok(None);
        };
        let header = match self.memory.header(shard) {
            Some(h) => h,
            None => Arc::new(ShardHeader::parse(&raw).map_err(|e| self.corrupt(shard, e))?),
        };
        let r = sample_span(&header, i, raw.len()).ok_or_else(|| {
            self.out_of_range(
                shard,
                format!(
                    "sample {i} of {} in {} bytes",
                    header.num_samples(),
                    raw.len()
                ),
            )
        })?;
        // A copy: a slice would keep the whole shard in memory as long as it lives.
        Ok(Some(io::direct::kept_copy(&raw[r])))
    }

    /// The verified bytes of the fill of `shard` in progress, waiting until they pass their
    /// checks; `None` when nobody fills it or the fill ended first (look at the slot again).
    fn flight_verified(&self, shard: usize) -> Option<Bytes> {
        let flight = match self.lock().slots.get(shard) {
            Some(Slot::Filling(f)) => f.clone(),
            _ => return None,
        };
        flight.wait_verified()
    }

    /// A verified shard whose header does not parse.
    fn corrupt(&self, shard: usize, e: impl std::fmt::Display) -> CacheError {
        CacheError::Corrupt {
            shard,
            file: self.key(shard).map(|k| k.to_string()).unwrap_or_default(),
            reason: e.to_string(),
        }
    }

    /// Downloads, verifies, decompresses and writes one shard (of `size` uncompressed bytes)
    /// atomically. Returns its size, and the written file opened for reading (when it could
    /// be: its first read then need not open it, and the readahead can read it ahead).
    fn fill(
        &self,
        shard: usize,
        size: u64,
        demand: bool,
        flight: &Flight,
    ) -> Result<(u64, Option<Arc<File>>), CacheError> {
        // A read waits for it: its download goes before the readahead's, in download memory
        // and in connections.
        let urgency = if demand {
            Urgency::Demand
        } else {
            Urgency::Prefetch
        };
        let memory = self
            .downloads
            .acquire_with_loan(size, urgency, &|| self.tier_unused());
        let _demand = crate::store::demand_scope(demand);
        let started = Instant::now();
        let key = self.key(shard)?;
        let durability = if self.direct {
            Durability::Direct
        } else {
            Durability::Unsynced
        };
        let tag = format!("shard{shard}");
        // Written to disk on a thread of its own while a long serial hash of its last bytes
        // runs (a plain ETag MD5); otherwise written after its bytes are published.
        let stage = |bytes: &[u8]| {
            let sum = xxhash_rust::xxh3::xxh3_64(bytes);
            self.layout.stage(bytes, &tag, durability).map(|s| (s, sum))
        };
        let (raw, staged) = self.dataset.fetch_shard_into(
            shard,
            self.opts.verify_attempts,
            Some(&memory),
            Some(&stage),
        )?;
        let fetched_in = started.elapsed();
        self.counters.fetch_latency.observe(fetched_in);
        if let Ok(h) = ShardHeader::parse(&raw) {
            self.memory
                .put_header(shard, Provenance::Verified, Arc::new(h));
        }
        flight.publish(raw.clone());
        let dest = self.layout.shard_path(key);
        let sum = match &staged {
            Some((_, sum)) => *sum,
            None => xxhash_rust::xxh3::xxh3_64(&raw),
        };
        let written = self.layout.write_sum(key, sum).and_then(|()| match staged {
            Some((file, _)) => self.layout.commit(file, &dest),
            None => self.layout.write_atomically(&raw, &dest, &tag, durability),
        });
        if let Err(e) = written {
            // A full or failing cache disk: the verified bytes are in hand, so readers can
            // still be served from the memory tier when it can hold them; the next read
            // of another sample tries the disk again.
            Counters::add(&self.counters.disk_write_failures, 1);
            let kept = self.keep_in_memory(shard, &raw);
            tracing::warn!(
                shard,
                error = %e,
                served_from_memory = kept,
                "cannot write to the cache disk"
            );
            return Err(e);
        }
        // Written and checked just now: trusted as it is on disk.
        let opened = self.open_cached(&dest);
        let (file, meta) = match opened.and_then(|f| f.metadata().map(|m| (f, m))) {
            Ok((f, m)) => (Some(Arc::new(f)), Some(m)),
            Err(_) => (None, std::fs::metadata(&dest).ok()),
        };
        let verified = meta.map(|m| FileStamp::of(&m));
        self.trust
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(shard, Trust { sum, verified });
        Counters::add(&self.counters.shards_fetched, 1);
        tracing::debug!(
            shard,
            bytes = raw.len(),
            fetch_ms = fetched_in.as_millis() as u64,
            total_ms = started.elapsed().as_millis() as u64,
            "shard cached"
        );
        Ok((raw.len() as u64, file))
    }

    /// Puts every sample of a verified shard into the memory tier when it fits in half of
    /// the tier's sample budget (so one shard cannot flush everything else). True if kept.
    fn keep_in_memory(&self, shard: usize, raw: &Bytes) -> bool {
        if raw.len() as u64 > self.memory.sample_budget() / 2
            || !self.tier_has_room(raw.len() as u64)
        {
            return false;
        }
        let Ok(header) = ShardHeader::parse(raw) else {
            return false;
        };
        for i in 0..header.num_samples() {
            let Some(r) = sample_span(&header, i, raw.len()) else {
                return false;
            };
            // Copies: a slice would hold the download buffer, and with it the download
            // budget, for as long as the tier keeps the sample.
            self.memory.put_sample(
                shard,
                i,
                Provenance::Verified,
                io::direct::kept_copy(&raw[r]),
            );
        }
        true
    }

    /// Bytes the memory tier and the samples read ahead hold now (both within `memory_limit`).
    fn tier_held(&self) -> u64 {
        self.memory.bytes().saturating_add(self.preloaded.bytes())
    }

    /// Bytes of the tier's share unused now, which downloads may borrow (see
    /// `DownloadBudget::acquire_with_loan`). moka settles its count lazily, so a loan can
    /// overshoot by the few inserts it lags behind.
    fn tier_unused(&self) -> u64 {
        self.opts.memory_limit.saturating_sub(self.tier_held())
    }

    /// Whether `len` more bytes may go into the tier or the read-ahead now: always, unless
    /// downloads have borrowed part of the tier's share, which then stays free for them until
    /// they give it back.
    fn tier_has_room(&self, len: u64) -> bool {
        let lent = self.downloads.lent();
        lent == 0
            || self.tier_held().saturating_add(lent).saturating_add(len) <= self.opts.memory_limit
    }

    /// Evicts until `need` more bytes fit, asking the policy for victims.
    ///
    /// When no victim is left, room can still appear: fills in progress finish (their
    /// reservation turns into evictable shards) and readers unpin. Then, with
    /// [`RoomWait::Wait`], it waits on `room` and returns [`Room::Retry`]; with
    /// [`RoomWait::GiveUp`] it returns [`Room::NotNow`]. When the pinned shards plus this one
    /// exceed the limit it waits for unpins until `deadline` only. [`CacheError::Full`] when
    /// that runs out or nothing can change (no fill in progress, no pin to wait for, and the
    /// policy refuses every candidate).
    fn make_room<'a>(
        &'a self,
        mut st: MutexGuard<'a, State>,
        incoming: usize,
        need: u64,
        wait: RoomWait,
        deadline: Instant,
    ) -> Result<Room<'a>, CacheError> {
        while st.usage.saturating_add(st.reserved).saturating_add(need) > self.limit {
            let mut candidates = Vec::new();
            let mut pinned = Vec::new();
            let mut pinned_bytes = 0u64;
            for (i, s) in st.slots.iter().enumerate() {
                if let Slot::Resident {
                    bytes,
                    pins,
                    last_use,
                    ..
                } = s
                {
                    if *pins == 0 {
                        candidates.push(Candidate {
                            shard: i,
                            bytes: *bytes,
                            last_use: *last_use,
                        });
                    } else {
                        pinned.push(i);
                        pinned_bytes = pinned_bytes.saturating_add(*bytes);
                    }
                }
            }
            let ctx = EvictionContext {
                candidates: &candidates,
                pinned: &pinned,
                incoming,
                need,
                usage: st.usage.saturating_add(st.reserved),
                limit: self.limit,
                prefetch: wait == RoomWait::GiveUp,
            };
            let victim = self
                .policy
                .choose_victim(&ctx)
                .filter(|v| candidates.iter().any(|c| c.shard == *v));
            if let Some(v) = victim {
                self.remove(&mut st, v);
                continue;
            }
            let possible = pinned_bytes.saturating_add(need) <= self.limit;
            // Something that may free room is under way: a fill, or (when the policy had
            // nothing to choose from) a pinned reader that will let go.
            let may_change = st.reserved > 0 || (candidates.is_empty() && pinned_bytes > 0);
            if may_change && wait == RoomWait::GiveUp {
                return Ok(Room::NotNow);
            }
            if possible && may_change {
                // A fill in progress always ends (see `FillGuard`), so this wait does too.
                drop(self.room.wait(st).unwrap_or_else(|p| p.into_inner()));
                return Ok(Room::Retry);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if may_change && !left.is_zero() {
                // Only unpins can make room: wait for them, but not forever.
                let (st, _) = self
                    .room
                    .wait_timeout(st, left)
                    .unwrap_or_else(|p| p.into_inner());
                drop(st);
                return Ok(Room::Retry);
            }
            if wait == RoomWait::GiveUp {
                return Ok(Room::NotNow);
            }
            return Err(CacheError::Full {
                shard: incoming,
                need,
                limit: self.limit,
                pinned: pinned_bytes,
                filling: st.reserved,
            });
        }
        Ok(Room::Made(st))
    }

    fn remove(&self, st: &mut State, shard: usize) {
        if let Some(Slot::Resident { bytes, .. }) = st.slots.get(shard).cloned() {
            st.slots[shard] = Slot::Absent;
            st.usage = st.usage.saturating_sub(bytes);
            if let Ok(k) = self.key(shard) {
                let _ = std::fs::remove_file(self.layout.shard_path(k));
            }
            Counters::add(&self.counters.evictions, 1);
            self.policy.removed(shard);
            tracing::debug!(shard, bytes, "shard evicted");
        }
    }

    fn forget(&self, shard: usize) {
        let mut st = self.lock();
        if let Some(Slot::Resident { bytes, pins: 0, .. }) = st.slots.get(shard).cloned() {
            st.slots[shard] = Slot::Absent;
            st.usage = st.usage.saturating_sub(bytes);
            drop(st);
            self.room.notify_all();
        }
    }

    fn unpin(&self, shard: usize) {
        let mut st = self.lock();
        if let Some(Slot::Resident { pins, .. }) = st.slots.get_mut(shard) {
            *pins = pins.saturating_sub(1);
            if *pins == 0 {
                drop(st);
                self.room.notify_all();
            }
        }
    }

    fn start_prefetchers(self: &Arc<Self>) {
        let (tx, rx) = mpsc::channel::<usize>();
        let rx = Arc::new(Mutex::new(rx));
        for n in 0..self.opts.prefetch_threads.max(1) {
            let weak: Weak<ShardCache> = Arc::downgrade(self);
            let rx = rx.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("shardfs-prefetch-{n}"))
                .spawn(move || loop {
                    // Waking now and then also frees download buffers nobody used for a
                    // while, so an idle mount gives that memory back.
                    let job = rx
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .recv_timeout(IDLE_BUFFER_LIFETIME / 3);
                    let Some(cache) = weak.upgrade() else { return };
                    cache.downloads.free_idle(IDLE_BUFFER_LIFETIME);
                    let shard = match job {
                        Ok(shard) => shard,
                        Err(mpsc::RecvTimeoutError::Timeout) => continue,
                        Err(mpsc::RecvTimeoutError::Disconnected) => return,
                    };
                    match cache.ensure_if_room(shard) {
                        Ok(true) => {}
                        Ok(false) => tracing::debug!(shard, "prefetch skipped: no room now"),
                        Err(e) => tracing::warn!(shard, error = %e, "prefetch failed"),
                    }
                });
            if let Err(e) = spawned {
                tracing::warn!(error = %e, "cannot start prefetch thread");
            }
        }
        *self.prefetch_tx.lock().unwrap_or_else(|p| p.into_inner()) = Some(tx);
    }

    /// Starts the threads that read samples ahead into [`Preloaded`]: enough of them to keep
    /// a few disk reads in flight (a direct read takes ~120 µs and the disk serves several
    /// at once), behind a queue as deep as the readahead's advice runs.
    fn start_preloaders(self: &Arc<Self>) {
        let (tx, rx) = mpsc::sync_channel::<PreloadJob>(PRELOAD_QUEUE);
        let rx = Arc::new(Mutex::new(rx));
        for n in 0..PRELOAD_THREADS {
            let rx = rx.clone();
            let preloaded = self.preloaded.clone();
            let counters = self.counters.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("shardfs-preload-{n}"))
                .spawn(move || loop {
                    let job = rx.lock().unwrap_or_else(|p| p.into_inner()).recv();
                    let Ok(job) = job else { return };
                    let key = (job.shard, job.i);
                    if !preloaded.begin(key) {
                        continue;
                    }
                    let len = usize::try_from(job.range.end - job.range.start).unwrap_or(0);
                    match io::direct::read_exact_at(&job.file, job.range.start, len) {
                        Ok(b) => {
                            Counters::add(&counters.preloaded, 1);
                            preloaded.put(key, b);
                        }
                        Err(e) => {
                            // The reader will read it itself, and see the error if it stays.
                            tracing::debug!(shard = job.shard, sample = job.i, error = %e, "read ahead failed");
                            preloaded.cancel(key);
                        }
                    }
                });
            if let Err(e) = spawned {
                tracing::warn!(error = %e, "cannot start preload thread");
            }
        }
        *self.preload_tx.lock().unwrap_or_else(|p| p.into_inner()) = Some(tx);
    }
}

/// A sample to read ahead: bytes `range` of the open cached `file` of `shard`.
struct PreloadJob {
    shard: usize,
    i: u32,
    file: Arc<File>,
    range: Range<u64>,
}

/// Threads reading samples ahead (direct I/O only).
const PRELOAD_THREADS: usize = 4;
/// Reads ahead queued for them at most.
const PRELOAD_QUEUE: usize = 1024;

impl Drop for ShardCache {
    fn drop(&mut self) {
        // Closing the channels ends the prefetch and preload threads.
        self.prefetch_tx.get_mut().map(|t| t.take()).ok();
        self.preload_tx.get_mut().map(|t| t.take()).ok();
    }
}

/// An open, pinned shard: it stays on disk (is never evicted) while this handle lives.
pub struct ShardHandle {
    cache: Arc<ShardCache>,
    shard: usize,
    file: Arc<File>,
    len: u64,
}

impl std::fmt::Debug for ShardHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ShardHandle(shard {}, {} bytes)", self.shard, self.len)
    }
}

impl ShardHandle {
    /// The shard number.
    pub fn shard(&self) -> usize {
        self.shard
    }

    /// Size of the uncompressed shard file.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// True for an empty file (never for a valid shard).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// `len` bytes at `offset` of the cached file (io_uring or pread).
    pub fn read_at(&self, offset: u64, len: usize) -> Result<Bytes, CacheError> {
        if offset
            .checked_add(len as u64)
            .is_none_or(|end| end > self.len)
        {
            return Err(self.cache.out_of_range(
                self.shard,
                format!("bytes {offset}+{len} of a {}-byte file", self.len),
            ));
        }
        let read = if self.cache.direct {
            io::direct::read_exact_at(&self.file, offset, len)
        } else {
            self.cache
                .reader
                .read_exact_at(&self.file, offset, len)
                .map(Bytes::from)
        };
        read.map_err(|e| {
            CacheError::io(
                "read",
                self.cache.shard_path(self.shard).unwrap_or_default(),
                e,
            )
        })
    }

    /// The parsed header (memory tier, else read from the file).
    pub fn header(&self) -> Result<Arc<ShardHeader>, CacheError> {
        if let Some(h) = self.cache.memory.header(self.shard) {
            return Ok(h);
        }
        let path = || {
            self.cache
                .shard_path(self.shard)
                .map(|p| p.display().to_string())
                .unwrap_or_default()
        };
        let count = self.read_at(0, 4.min(self.len as usize))?;
        let n = ShardHeader::sample_count(&count).map_err(|e| CacheError::Corrupt {
            shard: self.shard,
            file: path(),
            reason: e.to_string(),
        })?;
        let len = crate::mds::header_len(n);
        if len > self.len {
            return Err(CacheError::Corrupt {
                shard: self.shard,
                file: path(),
                reason: format!("header of {n} samples is longer than the file"),
            });
        }
        let bytes = self.read_at(0, len as usize)?;
        let h = Arc::new(ShardHeader::parse(&bytes).map_err(|e| CacheError::Corrupt {
            shard: self.shard,
            file: path(),
            reason: e.to_string(),
        })?);
        self.cache
            .memory
            .put_header(self.shard, Provenance::Verified, h.clone());
        Ok(h)
    }

    /// The bytes of sample `i` (memory tier, else the file).
    pub fn sample(&self, i: u32) -> Result<Bytes, CacheError> {
        if let Some(b) = self.cache.memory.sample(self.shard, i) {
            Counters::add(&self.cache.counters.memory_hits, 1);
            return Ok(b);
        }
        Counters::add(&self.cache.counters.memory_misses, 1);
        let h = self.header()?;
        let r = h.sample_range(i).map_err(|_| {
            self.cache
                .out_of_range(self.shard, format!("sample {i} of {}", h.num_samples()))
        })?;
        let b = self.read_at(r.start, (r.end - r.start) as usize)?;
        self.cache
            .memory
            .put_sample(self.shard, i, Provenance::Verified, b.clone());
        Ok(b)
    }
}

impl Drop for ShardHandle {
    fn drop(&mut self) {
        self.cache.unpin(self.shard);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fill_s_verified_bytes_reach_its_waiters_before_it_ends_and_are_let_go_after() {
        let flight = Arc::new(Flight::default());
        let waiter = {
            let f = flight.clone();
            std::thread::spawn(move || f.wait_verified())
        };
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert!(!waiter.is_finished(), "nothing verified yet");
        let raw = Bytes::from(vec![7u8; 1 << 20]);
        flight.publish(raw.clone());
        let got = waiter.join().expect("waiter");
        assert_eq!(
            got.as_deref(),
            Some(&raw[..]),
            "served before the fill ends"
        );
        drop(got);
        flight.finish(Ok(()));
        assert!(
            flight.wait_verified().is_none(),
            "after the fill: read the disk"
        );
        assert!(flight.wait().is_ok());
        // The flight holds no reference to the shard's bytes once the fill ended.
        assert!(raw.try_into_mut().is_ok(), "the bytes are ours alone again");

        // A fill that fails before its bytes are verified wakes its waiters with nothing.
        let failed = Arc::new(Flight::default());
        let waiter = {
            let f = failed.clone();
            std::thread::spawn(move || f.wait_verified())
        };
        failed.finish(Err(CacheError::FillAborted { shard: 3 }));
        assert!(waiter.join().expect("waiter").is_none());
        // Bytes published after the end are not kept.
        failed.publish(Bytes::from_static(b"late"));
        assert!(failed.wait_verified().is_none());
    }
}
