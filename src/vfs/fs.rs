//! The filesystem core: lookups, attributes, paged listings and reads over computed names.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use bytes::Bytes;

use crate::latency::LatencyHistogram;
use std::time::{Instant, SystemTime};

use super::error::{FailedOp, VfsError};
use super::inode::{ColumnNo, Epoch, Fixed, Ino, LocalRank, Node, Position, SampleId, MAX_EPOCHS};
use super::landed::LandedPush;
use super::names::{file_name, parse_epoch_dir, parse_file_name, parse_rank_dir, width_for};
use super::push::{PushBatch, PushPages, PushedBytes, SiblingPush};
use super::recent::{KnownSizes, Named, RecentNames, SizeState};
use super::source::{ColumnRead, Location, SampleSource, SourceError};
use super::status::ErrorLog;

mod listed_sizes;
mod page_cache;
use crate::plan::{OrderCache, RankOrder};
use crate::readahead::Readahead;
use crate::status::{ListedFilesStatus, MountStatus, ReadaheadStatus};
use listed_sizes::LISTED_SIZE_WAIT;

/// Kind of a node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A folder.
    Dir,
    /// A regular file.
    File,
}

/// Attributes of a node, as `stat` shows them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Attr {
    /// Inode number.
    pub ino: Ino,
    /// File or folder.
    pub kind: Kind,
    /// Exact size in bytes.
    pub size: u64,
    /// Permission bits.
    pub perm: u16,
    /// Modification time.
    pub mtime: SystemTime,
    /// Whether the attributes never change (long TTLs are safe); false for `status.json`.
    pub immutable: bool,
}

/// One listing entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirEntry {
    /// Inode number.
    pub ino: Ino,
    /// Name.
    pub name: String,
    /// File or folder.
    pub kind: Kind,
    /// Offset to pass back to continue the listing after this entry.
    pub next_offset: u64,
}

/// Settings of the tree.
#[derive(Clone, Debug)]
pub struct VfsConfig {
    /// Global rank number of each local rank served by this node.
    pub global_ranks: Vec<u64>,
    /// How many `epoch-E` folders a listing of `rank-R/` shows.
    pub epochs_listed: u64,
    /// The first epoch listed: the resumed one when resuming, else 0.
    pub first_epoch_listed: u64,
}

/// The read-only filesystem as a plain Rust value (no FUSE types).
pub struct Vfs {
    source: Arc<dyn SampleSource>,
    readahead: Arc<Readahead>,
    /// The served ranks' read orders (the plan's; the readahead walks the same ones).
    orders: Arc<OrderCache>,
    index_json: Bytes,
    config: VfsConfig,
    errors: ErrorLog,
    mounted_at: SystemTime,
    started: Instant,
    /// The `status.json` bytes as of the last `getattr`: reads serve this snapshot, so the
    /// content always matches the size the kernel was given.
    status_snapshot: std::sync::Mutex<(Bytes, SystemTime)>,
    /// How long sample-file reads took (from the request to the bytes, waits included).
    read_latency: LatencyHistogram,
    /// The rank folder position each sample was last opened through (reads of a sample
    /// inode do not say it).
    recent: RecentNames,
    /// Column file sizes computed so far (listings give them without reading shards).
    sizes: Arc<KnownSizes>,
    /// Tells the kernel to forget an inode's cached size and pages, then runs the callback
    /// (set by the FUSE layer; used when a size given from unverified bytes turns out wrong).
    forget_size: std::sync::OnceLock<ForgetSize>,
    /// Hands files to the kernel's page cache (set by the FUSE layer).
    push_pages: std::sync::OnceLock<PushPages>,
    /// Which of a sample's other files to hand over when its first is read.
    push: SiblingPush,
    /// Hands a landed shard's files to the kernel's page cache (set by the FUSE layer).
    push_batch: std::sync::OnceLock<PushBatch>,
    /// The bytes of a landed shard's file still waiting to be handed over.
    pushed_bytes: std::sync::OnceLock<PushedBytes>,
    /// Which files of a landed shard to hand over.
    landed: LandedPush,
    /// Sample files listings gave out with their size, and without it.
    listed_with_size: AtomicU64,
    listed_without_size: AtomicU64,
}

/// Tells the kernel to forget inode `Ino`'s size and pages, then calls the callback.
pub type ForgetSize = Box<dyn Fn(Ino, Box<dyn FnOnce() + Send>) + Send + Sync>;

const FIRST_FILE_OFFSET: u64 = 3;

/// The position (or sample id) of a numbered entry from its `next_offset` (see
/// `Vfs::list_files`: the offset packs number and column).
fn position_of_offset(next_offset: u64) -> u64 {
    next_offset.saturating_sub(FIRST_FILE_OFFSET) >> 8
}

/// `status.json` sizes are multiples of this.
const STATUS_PAD: usize = 4096;

impl Vfs {
    /// Builds the tree over `source`, naming files by the rank orders of `orders` and
    /// telling `readahead` where each rank reads.
    pub fn new(
        source: Arc<dyn SampleSource>,
        readahead: Arc<Readahead>,
        orders: Arc<OrderCache>,
        index_json: Vec<u8>,
        config: VfsConfig,
    ) -> Self {
        Self {
            source,
            readahead,
            orders,
            index_json: Bytes::from(index_json),
            config,
            errors: ErrorLog::default(),
            mounted_at: SystemTime::now(),
            started: Instant::now(),
            status_snapshot: std::sync::Mutex::new((Bytes::new(), SystemTime::UNIX_EPOCH)),
            read_latency: LatencyHistogram::default(),
            recent: RecentNames::default(),
            sizes: Arc::new(KnownSizes::default()),
            forget_size: std::sync::OnceLock::new(),
            push_pages: std::sync::OnceLock::new(),
            push: SiblingPush::default(),
            push_batch: std::sync::OnceLock::new(),
            pushed_bytes: std::sync::OnceLock::new(),
            landed: LandedPush::default(),
            listed_with_size: AtomicU64::new(0),
            listed_without_size: AtomicU64::new(0),
        }
    }

    /// Sets how to tell the kernel to forget an inode's cached size and pages (the FUSE
    /// layer's inode invalidation). It must not block the calling request, and must run the
    /// callback once the kernel has been told (or could not be). Only the first call counts.
    pub fn set_forget_size(&self, f: ForgetSize) {
        let _ = self.forget_size.set(f);
    }

    /// The readahead scheduler (for eviction decisions and tests).
    pub fn readahead(&self) -> &Readahead {
        &self.readahead
    }

    fn local_rank_of(&self, global: u64) -> Option<LocalRank> {
        self.config
            .global_ranks
            .iter()
            .position(|&g| g == global)
            .map(|i| LocalRank(i as u32))
    }

    fn global_rank(&self, local: LocalRank) -> Result<u64, VfsError> {
        self.config
            .global_ranks
            .get(local.0 as usize)
            .copied()
            .ok_or(VfsError::NotFound)
    }

    fn order(&self, rank: LocalRank, epoch: Epoch) -> Result<RankOrder, VfsError> {
        self.global_rank(rank)?;
        Ok(self.orders.rank(epoch.0, rank.0 as usize)?)
    }

    fn ino(node: Node) -> Result<Ino, VfsError> {
        node.ino().ok_or(VfsError::NotFound)
    }

    /// Resolves `name` inside folder `parent`.
    pub fn lookup(&self, parent: Ino, name: &str) -> Result<Attr, VfsError> {
        self.getattr(self.resolve(parent, name)?)
    }

    /// The inode of `name` inside folder `parent`, without its attributes (never waits for
    /// the store). Remembers where a sample file was named, as [`Vfs::lookup`] does.
    pub fn resolve(&self, parent: Ino, name: &str) -> Result<Ino, VfsError> {
        let node = Node::from_ino(parent).ok_or(VfsError::NotFound)?;
        let child = match node {
            Node::Fixed(Fixed::Root) => match name {
                "index.json" => Node::Fixed(Fixed::IndexJson),
                "samples" => Node::Fixed(Fixed::SamplesDir),
                ".shardfs" => Node::Fixed(Fixed::ControlDir),
                _ => {
                    let global = parse_rank_dir(name).ok_or(VfsError::NotFound)?;
                    Node::RankDir(self.local_rank_of(global).ok_or(VfsError::NotFound)?)
                }
            },
            Node::Fixed(Fixed::ControlDir) => match name {
                "status.json" => Node::Fixed(Fixed::StatusJson),
                _ => return Err(VfsError::NotFound),
            },
            Node::RankDir(r) => {
                let e = parse_epoch_dir(name).ok_or(VfsError::NotFound)?;
                if e >= MAX_EPOCHS {
                    return Err(VfsError::NotFound);
                }
                Node::EpochDir(r, Epoch(e))
            }
            Node::EpochDir(r, e) => {
                let order = self.order(r, e)?;
                let (pos, suffix) = parse_file_name(name, width_for(order.len() as u64))
                    .ok_or(VfsError::NotFound)?;
                let sample = usize::try_from(pos)
                    .ok()
                    .and_then(|p| order.get(p))
                    .ok_or(VfsError::NotFound)?;
                let col = self.column_named(sample, suffix)?;
                // The name is a hard link to the sample's one inode. Remember where it was
                // opened, so the read that follows moves this rank's readahead cursor.
                self.recent
                    .record(sample, (r, e, Position(pos)), Named::Lookup);
                self.readahead.on_lookup(r.0 as usize, e.0, pos);
                Node::SampleFile(SampleId(sample), col)
            }
            Node::Fixed(Fixed::SamplesDir) => {
                let (id, suffix) = parse_file_name(name, width_for(self.source.num_samples()))
                    .ok_or(VfsError::NotFound)?;
                if id >= self.source.num_samples() {
                    return Err(VfsError::NotFound);
                }
                let col = self.column_named(id, suffix)?;
                Node::SampleFile(SampleId(id), col)
            }
            _ => return Err(VfsError::NotADirectory),
        };
        Self::ino(child)
    }

    /// The shard that answering `getattr` (`for_read` false) or `read` of `ino` may have to
    /// wait for: a sample file's shard when it is neither on disk nor the sample's bytes in
    /// memory (and, for attributes, the size is not known yet). Such requests are best served
    /// off the threads that answer everything else. `None`: answered without the store.
    pub fn waits_for(&self, ino: Ino, for_read: bool) -> Option<u32> {
        match Node::from_ino(ino) {
            Some(Node::SampleFile(s, c)) if for_read || self.sizes.get(s.0, c).is_none() => {
                // A sample with no shard is an error answered at once.
                let at = self.source.locate(s.0)?;
                if self.source.can_read_now(&at) || (for_read && self.held(ino).is_some()) {
                    return None;
                }
                Some(at.global_shard)
            }
            _ => None,
        }
    }

    fn column_named(&self, sample: u64, suffix: &str) -> Result<ColumnNo, VfsError> {
        let cols = self.source.columns(sample).ok_or(VfsError::NotFound)?;
        cols.iter()
            .position(|c| c.suffix == suffix)
            .map(|i| ColumnNo(i as u32))
            .ok_or(VfsError::NotFound)
    }

    fn dir_attr(&self, ino: Ino) -> Attr {
        Attr {
            ino,
            kind: Kind::Dir,
            size: 0,
            perm: 0o555,
            mtime: self.mounted_at,
            immutable: true,
        }
    }

    fn file_attr(&self, ino: Ino, size: u64) -> Attr {
        Attr {
            ino,
            kind: Kind::File,
            size,
            perm: 0o444,
            mtime: self.mounted_at,
            immutable: true,
        }
    }

    /// Attributes of `ino`, with the exact size (may wait for the shard or its header).
    pub fn getattr(&self, ino: Ino) -> Result<Attr, VfsError> {
        let node = Node::from_ino(ino).ok_or(VfsError::NotFound)?;
        match node {
            Node::Fixed(Fixed::IndexJson) => Ok(self.file_attr(ino, self.index_json.len() as u64)),
            Node::Fixed(Fixed::StatusJson) => {
                let now = SystemTime::now();
                let snapshot = Bytes::from(self.status_json());
                let size = snapshot.len() as u64;
                *self
                    .status_snapshot
                    .lock()
                    .unwrap_or_else(|e| e.into_inner()) = (snapshot, now);
                Ok(Attr {
                    size,
                    mtime: now,
                    immutable: false,
                    ..self.file_attr(ino, 0)
                })
            }
            Node::RankDir(r) => self.global_rank(r).map(|_| self.dir_attr(ino)),
            Node::EpochDir(r, _) => self.global_rank(r).map(|_| self.dir_attr(ino)),
            n if n.is_dir() => Ok(self.dir_attr(ino)),
            // Not a read: `ls -l` or `stat` of a whole epoch folder must neither move the
            // readahead cursor (only `read` does) nor count as stalls.
            Node::SampleFile(s, c) => self.sized(ino, s.0, c),
            _ => Err(VfsError::NotFound),
        }
    }

    fn sized(&self, ino: Ino, sample: u64, col: ColumnNo) -> Result<Attr, VfsError> {
        if let Some(size) = self.sizes.get(sample, col) {
            return Ok(self.file_attr(ino, size));
        }
        // Before the shard is on disk the size may come from ranged reads, which no hash
        // covers: the first read checks it against the verified bytes.
        let at = self.locate(sample)?;
        let verified = self.source.is_resident(&at);
        match self.source.file_size(&at, col.0) {
            Ok(size) => {
                if verified {
                    self.sizes.record(sample, col, size);
                } else {
                    self.sizes.record_unverified(sample, col, size);
                }
                Ok(self.file_attr(ino, size))
            }
            Err(e) => Err(self.source_failed(e, FailedOp::Size)),
        }
    }

    /// Where `sample` lives, located once for the request that asks.
    fn locate(&self, sample: u64) -> Result<Location, VfsError> {
        self.source.locate(sample).ok_or(VfsError::NotFound)
    }

    /// The attributes a listing gives an entry whose size is not known yet (size 0, to be
    /// asked again: see the FUSE layer): everything but the size as [`Vfs::getattr`] will
    /// give it, so the kernel's later look-up changes nothing else (a changed mtime would
    /// make it drop the pages handed to it meanwhile).
    pub fn placeholder_attr(&self, ino: Ino, kind: Kind) -> Attr {
        match kind {
            Kind::Dir => self.dir_attr(ino),
            _ => self.file_attr(ino, 0),
        }
    }

    /// Attributes of `ino` when they are known without reading a shard (for READDIRPLUS,
    /// which must neither fetch nor read a whole folder's shards): a sample file's size once
    /// it has been computed in this mount, or when its shard's header in memory gives it.
    pub fn attr_now(&self, ino: Ino) -> Option<Attr> {
        match Node::from_ino(ino)? {
            Node::SampleFile(s, c) => self
                .sizes
                .get(s.0, c)
                .or_else(|| self.size_now(s.0, c))
                .map(|size| self.file_attr(ino, size)),
            _ => self.getattr(ino).ok(),
        }
    }

    /// [`Vfs::readdir`] with each entry's attributes where they are known without reading a
    /// shard ([`Vfs::attr_now`]; READDIRPLUS); a rank folder's listing from its start first
    /// makes its first shards' headers ready (`ready_listed_sizes`). The kernel opens such an entry without a lookup, so a
    /// rank folder's entry with attributes is recorded as where its sample is opened.
    pub fn readdir_plus(
        &self,
        ino: Ino,
        offset: u64,
        mut add: impl FnMut(DirEntry, Option<Attr>) -> bool,
    ) -> Result<(), VfsError> {
        let folder = match Node::from_ino(ino) {
            Some(Node::EpochDir(r, e)) => Some((r, e)),
            _ => None,
        };
        if let (Some((r, e)), 0) = (folder, offset) {
            // The kernel will hold an inode for each name: the files of shards that land
            // can be handed to it.
            self.landed.on_listed(r, e);
            self.ready_listed_sizes(r, e, LISTED_SIZE_WAIT);
        }
        self.readdir(ino, offset, |entry| {
            let attr = self.attr_now(entry.ino);
            let sample_file = match Node::from_ino(entry.ino) {
                Some(Node::SampleFile(s, _)) => Some(s),
                _ => None,
            };
            if let (Some((r, e)), Some(_), Some(s)) = (folder, attr, sample_file) {
                let pos = Position(position_of_offset(entry.next_offset));
                self.recent.record(s.0, (r, e, pos), Named::Listed);
            }
            let sized = attr.is_some();
            let full = add(entry, attr);
            if sample_file.is_some() && !full {
                let counter = match sized {
                    true => &self.listed_with_size,
                    false => &self.listed_without_size,
                };
                counter.fetch_add(1, Relaxed);
            }
            full
        })
    }

    fn source_failed(&self, e: SourceError, op: FailedOp) -> VfsError {
        let e = VfsError::from_source(e, op);
        if let VfsError::Shard {
            store,
            shard,
            source,
            ..
        } = &e
        {
            self.errors.record(store, shard, source, op, e.errno());
        }
        e
    }

    /// Lists folder `ino` from `offset` (0 to start, else an entry's `next_offset`), handing
    /// entries to `add` until it returns `true` (buffer full). Folders are never built whole.
    pub fn readdir(
        &self,
        ino: Ino,
        offset: u64,
        mut add: impl FnMut(DirEntry) -> bool,
    ) -> Result<(), VfsError> {
        let node = Node::from_ino(ino).ok_or(VfsError::NotFound)?;
        if !node.is_dir() {
            return Err(VfsError::NotADirectory);
        }
        let dot = [
            (ino, ".".to_string(), Kind::Dir),
            (
                Self::ino(Node::Fixed(Fixed::Root))?,
                "..".to_string(),
                Kind::Dir,
            ),
        ];
        for (i, (e_ino, name, kind)) in dot.into_iter().enumerate() {
            if (i as u64) >= offset
                && add(DirEntry {
                    ino: e_ino,
                    name,
                    kind,
                    next_offset: i as u64 + 1,
                })
            {
                return Ok(());
            }
        }
        let start = offset.saturating_sub(2);
        let fixed = |entries: Vec<(Node, String)>,
                     add: &mut dyn FnMut(DirEntry) -> bool|
         -> Result<(), VfsError> {
            for (i, (n, name)) in entries.into_iter().enumerate().skip(start as usize) {
                let kind = if n.is_dir() { Kind::Dir } else { Kind::File };
                if add(DirEntry {
                    ino: Self::ino(n)?,
                    name,
                    kind,
                    next_offset: i as u64 + FIRST_FILE_OFFSET,
                }) {
                    break;
                }
            }
            Ok(())
        };
        match node {
            Node::Fixed(Fixed::Root) => {
                let mut entries = vec![
                    (Node::Fixed(Fixed::IndexJson), "index.json".to_string()),
                    (Node::Fixed(Fixed::SamplesDir), "samples".to_string()),
                    (Node::Fixed(Fixed::ControlDir), ".shardfs".to_string()),
                ];
                for (i, g) in self.config.global_ranks.iter().enumerate() {
                    entries.push((Node::RankDir(LocalRank(i as u32)), format!("rank-{g}")));
                }
                fixed(entries, &mut add)
            }
            Node::Fixed(Fixed::ControlDir) => fixed(
                vec![(Node::Fixed(Fixed::StatusJson), "status.json".into())],
                &mut add,
            ),
            Node::RankDir(r) => {
                self.global_rank(r)?;
                let first = self.config.first_epoch_listed.min(MAX_EPOCHS);
                let last = first
                    .saturating_add(self.config.epochs_listed)
                    .min(MAX_EPOCHS);
                let entries = (first..last)
                    .map(|e| (Node::EpochDir(r, Epoch(e)), format!("epoch-{e}")))
                    .collect();
                fixed(entries, &mut add)
            }
            Node::EpochDir(r, e) => {
                let order = self.order(r, e)?;
                if offset == 0 {
                    // A loader lists its folder, then reads it: the first download's memory
                    // is made ready meanwhile.
                    if let Some(at) = order.get(0).and_then(|s| self.source.locate(s)) {
                        self.source.prepare_to_read(&at);
                    }
                }
                let width = width_for(order.len() as u64);
                self.list_files(
                    offset,
                    order.len() as u64,
                    width,
                    |p| order.get(p as usize),
                    |_, sample, c| Node::SampleFile(SampleId(sample), c),
                    &mut add,
                )
            }
            Node::Fixed(Fixed::SamplesDir) => {
                let n = self.source.num_samples();
                self.list_files(
                    offset,
                    n,
                    width_for(n),
                    Some,
                    |_, s, c| Node::SampleFile(SampleId(s), c),
                    &mut add,
                )
            }
            _ => Err(VfsError::NotADirectory),
        }
    }

    /// Pages through `len` numbered entries, each with its sample's column files. The offset
    /// of an entry encodes (number, column), so resuming costs nothing.
    fn list_files(
        &self,
        offset: u64,
        len: u64,
        width: usize,
        sample_of: impl Fn(u64) -> Option<u64>,
        node_of: impl Fn(u64, u64, ColumnNo) -> Node,
        add: &mut dyn FnMut(DirEntry) -> bool,
    ) -> Result<(), VfsError> {
        let (mut number, mut col) = if offset < FIRST_FILE_OFFSET {
            (0, 0)
        } else {
            let key = offset - FIRST_FILE_OFFSET + 1;
            (key >> 8, (key & 0xff) as usize)
        };
        while number < len {
            let sample = sample_of(number).ok_or(VfsError::NotFound)?;
            let cols = self.source.columns(sample).unwrap_or(&[]);
            while col < cols.len() {
                let ino = Self::ino(node_of(number, sample, ColumnNo(col as u32)))?;
                let next_offset = FIRST_FILE_OFFSET + ((number << 8) | col as u64);
                let name = file_name(number, width, &cols[col].suffix);
                if add(DirEntry {
                    ino,
                    name,
                    kind: Kind::File,
                    next_offset,
                }) {
                    return Ok(());
                }
                col += 1;
            }
            number += 1;
            col = 0;
        }
        Ok(())
    }

    /// Reads up to `size` bytes of file `ino` from `offset`.
    pub fn read(&self, ino: Ino, offset: u64, size: u32) -> Result<Bytes, VfsError> {
        let node = Node::from_ino(ino).ok_or(VfsError::NotFound)?;
        let slice = |bytes: &Bytes| {
            let start = usize::try_from(offset)
                .unwrap_or(usize::MAX)
                .min(bytes.len());
            let end = start.saturating_add(size as usize).min(bytes.len());
            bytes.slice(start..end)
        };
        match node {
            Node::Fixed(Fixed::IndexJson) => Ok(slice(&self.index_json)),
            Node::Fixed(Fixed::StatusJson) => {
                let snapshot = self
                    .status_snapshot
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .0
                    .clone();
                Ok(slice(&snapshot))
            }
            Node::SampleFile(s, c) => {
                let started = Instant::now();
                // Opened through a rank folder (recently): that rank's reader is there.
                let at = self.recent.pick(s.0, |r, e, p| {
                    self.readahead.is_reading_near(r.0 as usize, e.0, p.0)
                });
                let rank = at.map(|(r, e, p)| {
                    self.readahead.on_read(r.0 as usize, e.0, p.0);
                    r
                });
                // Sizes handed out before their shard was verified are checked by a read;
                // once none is left unchecked, reads do not look.
                let state = if self.sizes.any_to_check() {
                    self.sizes.state(s.0, c)
                } else {
                    None
                };
                let at = self.locate(s.0)?;
                // A read of a shard not on disk yet is a stall, timed from here: a hold for
                // the first fetch of a cold start is part of the wait.
                let wait = StallClock {
                    resident: self.source.is_resident(&at),
                    since: Instant::now(),
                };
                let now = self.source.can_read_now(&at);
                // Its verified bytes may wait to be handed to the page cache, the pusher
                // waiting for this very read's page lock.
                let held = if now { None } else { self.held(ino) };
                if rank.is_some() && !now && held.is_none() {
                    self.readahead.hold_for_first_fetch(at.global_shard);
                }
                let r = ColumnRead {
                    at,
                    column: c.0,
                    offset,
                    size,
                };
                let data = match (held, state) {
                    (Some(bytes), _) => slice(&bytes),
                    (None, None | Some(SizeState::Verified(_))) => {
                        self.read_sample(wait, |src| src.read(r))?
                    }
                    (None, Some(SizeState::Unverified(given))) => {
                        self.read_checking_size(ino, r, wait, given)?
                    }
                    // The kernel still holds a wrong size (it retries a failed read at once):
                    // no bytes until it has forgotten it.
                    (None, Some(SizeState::Forgetting(actual))) => {
                        return Err(VfsError::SizeChanged {
                            sample: s.0,
                            column: c.0,
                            given: None,
                            actual,
                        })
                    }
                };
                if offset == 0 {
                    if rank.is_some() {
                        self.landed.on_read(c.0);
                    }
                    self.push_siblings(&at, c);
                }
                if let Some(r) = rank {
                    self.readahead.count_bytes(r.0 as usize, data.len() as u64);
                }
                self.read_latency.observe(started.elapsed());
                Ok(data)
            }
            n if n.is_dir() => Err(VfsError::IsADirectory),
            _ => Err(VfsError::NotFound),
        }
    }

    /// Runs `read` on the source, counting a stall when the sample's shard was not on disk
    /// when `wait` started.
    fn read_sample<T>(
        &self,
        wait: StallClock,
        read: impl FnOnce(&dyn SampleSource) -> Result<T, SourceError>,
    ) -> Result<T, VfsError> {
        let r = read(&*self.source);
        if !wait.resident {
            self.readahead.record_stall(wait.since.elapsed());
        }
        r.map_err(|e| self.source_failed(e, FailedOp::Read))
    }

    /// The first read of a file whose size was given from unverified bytes: the verified
    /// bytes must have that size, else the reader's view of the file is wrong. Then the read
    /// fails (EIO, one warning), the kernel is told to forget the size and pages, and reads
    /// fail until it has (state `Forgetting`); after that the file reads at its verified size.
    fn read_checking_size(
        &self,
        ino: Ino,
        r: ColumnRead,
        wait: StallClock,
        given: u64,
    ) -> Result<Bytes, VfsError> {
        let sample = r.at.sample;
        let col = ColumnNo(r.column);
        let (data, actual) = self.read_sample(wait, |src| src.read_with_size(r))?;
        if actual == given {
            self.sizes.record(sample, col, actual);
            return Ok(data);
        }
        let e = VfsError::SizeChanged {
            sample,
            column: col.0,
            given: Some(given),
            actual,
        };
        tracing::warn!(error = %e, "a file size from an unverified ranged read was wrong; reads fail until the kernel has forgotten the size");
        match self.forget_size.get() {
            Some(forget) => {
                self.sizes.record_forgetting(sample, col, actual);
                let sizes = self.sizes.clone();
                forget(ino, Box::new(move || sizes.record(sample, col, actual)));
            }
            // No kernel to tell (tests without FUSE).
            None => self.sizes.record(sample, col, actual),
        }
        Err(e)
    }

    /// The current `status.json` bytes.
    pub fn status_json(&self) -> Vec<u8> {
        let mut out = serde_json::to_vec_pretty(&self.status()).unwrap_or_default();
        // Pad with spaces to a multiple of 4 KiB: the size rarely changes between snapshots,
        // so a reader racing a refresh never sees a length that disagrees with the content.
        let padded = (out.len() + 1).div_ceil(STATUS_PAD) * STATUS_PAD;
        out.resize(padded - 1, b' ');
        out.push(b'\n');
        out
    }

    /// The scheduler's status with each rank's epoch length added (for progress views).
    fn readahead_status(&self) -> ReadaheadStatus {
        let mut status = self.readahead.status();
        for (i, r) in status.ranks.iter_mut().enumerate() {
            if let Ok(order) = self.orders.rank(r.epoch, i) {
                r.epoch_samples = Some(order.len() as u64);
            }
        }
        status
    }

    /// The settings of the tree.
    pub fn config(&self) -> &VfsConfig {
        &self.config
    }

    /// Samples in the dataset (all streams), as `samples/` lists them.
    pub fn num_samples(&self) -> u64 {
        self.source.num_samples()
    }

    /// The live counters of the mount (what `status.json` holds and `/metrics` exports).
    pub fn status(&self) -> MountStatus {
        MountStatus {
            pid: std::process::id(),
            mounted_at_unix: self
                .mounted_at
                .duration_since(SystemTime::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0),
            uptime_seconds: self.started.elapsed().as_secs_f64(),
            ranks: self.config.global_ranks.clone(),
            epochs_listed: self.config.epochs_listed,
            samples: self.source.num_samples(),
            errors: self.errors.snapshot(),
            readahead: self.readahead_status(),
            cache: self.source.status(),
            read_latency: self.read_latency.snapshot(),
            page_cache_pushes: self.push.counters().snapshot(),
            landed_pushes: self.landed.counters().snapshot(),
            listed_files: ListedFilesStatus {
                with_size: self.listed_with_size.load(Relaxed),
                without_size: self.listed_without_size.load(Relaxed),
            },
            memory: crate::cache::process_memory::snapshot(),
        }
    }
}

/// When a read began to wait for its sample, and whether the sample's shard was on disk then
/// (a read of one that was not counts as a stall).
#[derive(Debug, Clone, Copy)]
struct StallClock {
    resident: bool,
    since: Instant,
}
