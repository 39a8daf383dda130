//! INPUT in an object store (`s3://`, `gs://`, `az://`): the objects under the URL's prefix
//! read through the crate's [`Store`] layer (retries, timeouts, bounded concurrency), in
//! bounded memory.
//!
//! - Listing: every object under the prefix, keys relative to it and sorted. A file format's
//!   inputs are the objects directly under the prefix (as a local folder's files are); an
//!   ImageFolder's classes are the first `/`-separated part of the keys. A URL under which
//!   nothing is listed is taken as one object (`s3://bucket/data.jsonl`).
//! - JSON Lines and tar objects are streamed by [`ObjectReader`]: consecutive ranged GETs of
//!   [`CHUNK`] bytes, up to [`AHEAD`] of them asked for ahead of the reader, so one object is
//!   read over several connections at once and never held whole. The objects a source reads
//!   one after the other are tied into one [`ObjectChain`] ([`chain`]), whose read-ahead
//!   crosses object boundaries: the next objects' first ranges are on their way while the
//!   reader finishes one, so neither the first bytes of each object nor a small object waits
//!   for a cold start.
//! - Parquet objects are read by ranges as the Parquet reader asks for them ([`RangedObject`]:
//!   the footer, then each page).
//! - ImageFolder images are whole-object GETs, [`AHEAD_OBJECTS`] in flight ([`ObjectQueue`]).

use super::error::{PackError, Result};
use super::source::InputFile;
use crate::store::{BlockingStore, ObjectKey, Store, StoreError, StoreExt, StoreOptions};
use bytes::Bytes;
use std::collections::VecDeque;
use std::io::Read;
use std::sync::{Arc, Mutex};
use tokio::task::JoinHandle;

/// Bytes of one ranged GET of a streamed object.
pub const CHUNK: u64 = 8 << 20;
/// Chunks of one streamed object asked for and not yet read: in flight or waiting, so the
/// network keeps going while the reader is busy with a shard (at most 96 MiB per reader).
pub const AHEAD: usize = 12;
/// Whole-object GETs (ImageFolder images) in flight at once.
pub const AHEAD_OBJECTS: usize = 32;

/// The folder (or single object) INPUT names in a store.
#[derive(Debug)]
pub struct RemoteTree {
    store: BlockingStore,
    /// The URL of the root, for messages.
    base: String,
    /// Every object under the root: (key relative to it, size), sorted by key.
    objects: Vec<(String, u64)>,
}

/// One object of a [`RemoteTree`], as an [`InputFile`] carries it.
#[derive(Debug, Clone)]
pub struct RemoteFile {
    tree: Arc<RemoteTree>,
    key: ObjectKey,
    /// The chain this object is read in, and its place there ([`chain`]).
    chain: Option<(Arc<Mutex<ObjectChain>>, usize)>,
}

fn store_err(e: StoreError) -> PackError {
    PackError::Store(e)
}

impl RemoteTree {
    /// Lists `url` (a folder, or else one object) in the store `opts` reaches.
    pub fn open(url: &str, opts: &StoreOptions) -> Result<Arc<RemoteTree>> {
        let tree = Self::list(url, opts)?;
        if !tree.objects.is_empty() {
            return Ok(Arc::new(tree));
        }
        // Nothing under it as a folder: one object, listed from its parent.
        let trimmed = url.trim_end_matches('/');
        if let Some((parent, name)) = trimmed.rsplit_once('/') {
            if !parent.ends_with('/') && !name.is_empty() {
                let mut tree = Self::list(parent, opts)?;
                tree.objects.retain(|(k, _)| k == name);
                if !tree.objects.is_empty() {
                    return Ok(Arc::new(tree));
                }
            }
        }
        Err(PackError::Options(format!("{url}: no object there")))
    }

    fn list(url: &str, opts: &StoreOptions) -> Result<RemoteTree> {
        let base = crate::store::Source::parse(url)
            .map_err(store_err)?
            .canonical()
            .to_string();
        let store = crate::store::open(url, opts).map_err(store_err)?;
        let threads = std::thread::available_parallelism().map_or(2, |n| n.get().min(4));
        let store = BlockingStore::new(store, threads).map_err(store_err)?;
        let mut objects: Vec<(String, u64)> = store
            .list(None)
            .map_err(store_err)?
            .into_iter()
            .map(|o| (o.key.as_str().to_string(), o.size))
            .collect();
        objects.sort();
        Ok(RemoteTree {
            store,
            base,
            objects,
        })
    }

    /// Every object: (key relative to the root, size), sorted by key.
    pub fn objects(&self) -> &[(String, u64)] {
        &self.objects
    }

    /// The URL of `key` (of the root for `""`), for messages.
    pub fn url(&self, key: &str) -> String {
        match ObjectKey::new(key) {
            Ok(k) => self.store.url_of(&k),
            Err(_) => format!("{}/{key}", self.base)
                .trim_end_matches('/')
                .to_string(),
        }
    }

    /// The objects directly under the root whose names `keep` accepts, as input files.
    pub fn files(self: &Arc<Self>, keep: impl Fn(&str) -> bool) -> Result<Vec<InputFile>> {
        let mut out = Vec::new();
        for (key, size) in &self.objects {
            if key.contains('/') || !keep(key) {
                continue;
            }
            out.push(self.file(key, *size)?);
        }
        if out.is_empty() {
            return Err(PackError::Options(format!(
                "{}: no input object of this format",
                self.base
            )));
        }
        Ok(out)
    }

    /// The input file of one object.
    pub fn file(self: &Arc<Self>, key: &str, size: u64) -> Result<InputFile> {
        Ok(InputFile {
            path: self.url(key).into(),
            size,
            remote: Some(RemoteFile {
                tree: Arc::clone(self),
                key: ObjectKey::new(key).map_err(store_err)?,
                chain: None,
            }),
        })
    }

    fn spawn_range(&self, key: &ObjectKey, range: std::ops::Range<u64>) -> JoinHandle<Fetch> {
        let store: Arc<dyn Store> = Arc::clone(self.store.store());
        let key = key.clone();
        self.store
            .runtime()
            .spawn(async move { store.get_range(&key, range).await })
    }

    fn spawn_whole(&self, key: &ObjectKey) -> JoinHandle<Fetch> {
        let store: Arc<dyn Store> = Arc::clone(self.store.store());
        let key = key.clone();
        self.store
            .runtime()
            .spawn(async move { store.get(&key).await })
    }

    fn wait(&self, h: JoinHandle<Fetch>, key: &ObjectKey) -> std::io::Result<Bytes> {
        match self.store.runtime().block_on(h) {
            Ok(Ok(b)) => Ok(b),
            Ok(Err(e)) => Err(std::io::Error::other(e)),
            Err(e) => Err(std::io::Error::other(format!(
                "{}: the download task failed: {e}",
                self.store.url_of(key)
            ))),
        }
    }
}

type Fetch = std::result::Result<Bytes, StoreError>;

impl RemoteFile {
    /// A reader of the object from byte `offset` on: from its chain when it has one and
    /// `offset` is 0 ([`ChainReader`]), else on its own ([`ObjectReader`]).
    pub fn open_at(&self, offset: u64, size: u64) -> Box<dyn Read + Send> {
        if let (Some((chain, idx)), 0) = (&self.chain, offset) {
            return Box::new(ChainReader {
                chain: Arc::clone(chain),
                idx: *idx,
                current: Bytes::new(),
                done: false,
            });
        }
        Box::new(ObjectReader {
            file: self.clone(),
            next: offset,
            end: size,
            inflight: VecDeque::new(),
            current: Bytes::new(),
        })
    }

    /// Bytes `[start, start + len)` of the object, in one GET.
    pub fn range(&self, start: u64, len: u64) -> std::io::Result<Bytes> {
        let h = self.tree.spawn_range(&self.key, start..start + len);
        self.tree.wait(h, &self.key)
    }

    /// The whole object.
    pub fn whole(&self) -> std::io::Result<Bytes> {
        let h = self.tree.spawn_whole(&self.key);
        self.tree.wait(h, &self.key)
    }
}

/// A streamed object: [`AHEAD`] ranged GETs of [`CHUNK`] bytes in flight, handed out in
/// order; at most `AHEAD + 1` chunks in memory.
pub struct ObjectReader {
    file: RemoteFile,
    /// Offset of the next range to ask for.
    next: u64,
    end: u64,
    inflight: VecDeque<JoinHandle<Fetch>>,
    current: Bytes,
}

impl ObjectReader {
    fn fill(&mut self) {
        while self.inflight.len() < AHEAD && self.next < self.end {
            // A small first range: a reader that looks at the start only (column inference)
            // does not wait for, or download, more.
            let len = if self.inflight.is_empty() && self.current.is_empty() {
                CHUNK / 8
            } else {
                CHUNK
            };
            let stop = (self.next + len).min(self.end);
            let h = self.file.tree.spawn_range(&self.file.key, self.next..stop);
            self.inflight.push_back(h);
            self.next = stop;
        }
    }
}

impl Read for ObjectReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while self.current.is_empty() {
            self.fill();
            let Some(h) = self.inflight.pop_front() else {
                return Ok(0);
            };
            self.current = self.file.tree.wait(h, &self.file.key)?;
            self.fill();
        }
        let n = buf.len().min(self.current.len());
        buf[..n].copy_from_slice(&self.current[..n]);
        self.current = self.current.slice(n..);
        Ok(n)
    }
}

impl Drop for ObjectReader {
    fn drop(&mut self) {
        for h in self.inflight.drain(..) {
            h.abort();
        }
    }
}

/// Ties the remote objects of `files` (read in this order, each from its start, as a source
/// reads them) into one [`ObjectChain`]; local files are left as they are.
pub fn chain(files: &mut [InputFile]) {
    let objects: Vec<(RemoteFile, u64)> = files
        .iter()
        .filter_map(|f| f.remote.clone().map(|r| (r, f.size)))
        .collect();
    if objects.is_empty() {
        return;
    }
    let chain = Arc::new(Mutex::new(ObjectChain {
        objects: objects
            .into_iter()
            .map(|(r, size)| (r.tree, r.key, size))
            .collect(),
        inflight: VecDeque::new(),
        next_object: 0,
        next_offset: 0,
        started: false,
    }));
    for (idx, r) in files
        .iter_mut()
        .filter_map(|f| f.remote.as_mut())
        .enumerate()
    {
        r.chain = Some((Arc::clone(&chain), idx));
    }
}

/// Objects streamed one after the other with one read-ahead over them all: up to [`AHEAD`]
/// ranged GETs of [`CHUNK`] bytes in flight (the first of the chain [`CHUNK`]/8), continuing
/// into the next objects as soon as the current one's ranges are all asked for.
pub struct ObjectChain {
    /// (tree, key, size) of each object, in read order.
    objects: Vec<(Arc<RemoteTree>, ObjectKey, u64)>,
    /// (object's place, its next range), in order.
    inflight: VecDeque<(usize, JoinHandle<Fetch>)>,
    next_object: usize,
    next_offset: u64,
    started: bool,
}

impl std::fmt::Debug for ObjectChain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "ObjectChain({} objects, next {}@{}, {} in flight)",
            self.objects.len(),
            self.next_object,
            self.next_offset,
            self.inflight.len()
        )
    }
}

impl ObjectChain {
    fn fill(&mut self) {
        while self.inflight.len() < AHEAD {
            let Some((tree, key, size)) = self.objects.get(self.next_object) else {
                return;
            };
            if self.next_offset >= *size {
                self.next_object += 1;
                self.next_offset = 0;
                continue;
            }
            let len = if self.started { CHUNK } else { CHUNK / 8 };
            self.started = true;
            let stop = (self.next_offset + len).min(*size);
            let h = tree.spawn_range(key, self.next_offset..stop);
            self.inflight.push_back((self.next_object, h));
            self.next_offset = stop;
        }
    }

    /// The next range of object `idx`, in order; None once it is all given.
    fn next_chunk(&mut self, idx: usize) -> std::io::Result<Option<Bytes>> {
        // What is left of objects before it (a reader that stopped early) is not wanted.
        while let Some((i, _)) = self.inflight.front() {
            if *i >= idx {
                break;
            }
            if let Some((_, h)) = self.inflight.pop_front() {
                h.abort();
            }
        }
        if self.next_object < idx {
            self.next_object = idx;
            self.next_offset = 0;
        }
        self.fill();
        match self.inflight.front() {
            Some((i, _)) if *i == idx => {}
            _ => return Ok(None),
        }
        let Some((_, h)) = self.inflight.pop_front() else {
            return Ok(None);
        };
        let (tree, key, _) = &self.objects[idx];
        let bytes = tree.wait(h, key);
        self.fill();
        bytes.map(Some)
    }
}

impl Drop for ObjectChain {
    fn drop(&mut self) {
        for (_, h) in self.inflight.drain(..) {
            h.abort();
        }
    }
}

/// One object of an [`ObjectChain`], read from its start.
pub struct ChainReader {
    chain: Arc<Mutex<ObjectChain>>,
    idx: usize,
    current: Bytes,
    done: bool,
}

impl Read for ChainReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while self.current.is_empty() {
            if self.done {
                return Ok(0);
            }
            let next = match self.chain.lock() {
                Ok(mut c) => c.next_chunk(self.idx)?,
                Err(_) => return Err(std::io::Error::other("the read-ahead broke")),
            };
            match next {
                Some(b) => self.current = b,
                None => self.done = true,
            }
        }
        let n = buf.len().min(self.current.len());
        buf[..n].copy_from_slice(&self.current[..n]);
        self.current = self.current.slice(n..);
        Ok(n)
    }
}

/// An object read by ranges as the Parquet reader asks (`parquet`'s [`ChunkReader`]).
///
/// [`ChunkReader`]: parquet::file::reader::ChunkReader
pub struct RangedObject {
    file: RemoteFile,
    size: u64,
}

impl RangedObject {
    /// The object of `file` (`size` bytes).
    pub fn new(file: RemoteFile, size: u64) -> RangedObject {
        RangedObject { file, size }
    }
}

impl parquet::file::reader::Length for RangedObject {
    fn len(&self) -> u64 {
        self.size
    }
}

/// Bytes a Parquet page header read asks for at a time.
const HEADER_CHUNK: u64 = 64 << 10;

/// Reads an object from an offset in small ranged GETs (Parquet page headers).
pub struct SmallReads {
    file: RemoteFile,
    next: u64,
    end: u64,
    current: Bytes,
}

impl Read for SmallReads {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.current.is_empty() {
            if self.next >= self.end {
                return Ok(0);
            }
            let len = HEADER_CHUNK.min(self.end - self.next);
            self.current = self.file.range(self.next, len)?;
            self.next += len;
        }
        let n = buf.len().min(self.current.len());
        buf[..n].copy_from_slice(&self.current[..n]);
        self.current = self.current.slice(n..);
        Ok(n)
    }
}

impl parquet::file::reader::ChunkReader for RangedObject {
    type T = SmallReads;

    fn get_read(&self, start: u64) -> parquet::errors::Result<SmallReads> {
        Ok(SmallReads {
            file: self.file.clone(),
            next: start,
            end: self.size,
            current: Bytes::new(),
        })
    }

    fn get_bytes(&self, start: u64, length: usize) -> parquet::errors::Result<Bytes> {
        let end = start.saturating_add(length as u64);
        if end > self.size {
            return Err(parquet::errors::ParquetError::EOF(format!(
                "bytes {start}..{end} are past the end of the object ({} bytes)",
                self.size
            )));
        }
        self.file
            .range(start, length as u64)
            .map_err(|e| parquet::errors::ParquetError::External(Box::new(e)))
    }
}

/// Whole objects fetched [`AHEAD_OBJECTS`] at a time, handed out in the order asked.
pub struct ObjectQueue {
    tree: Arc<RemoteTree>,
    /// Keys still to ask for, in order.
    keys: VecDeque<ObjectKey>,
    inflight: VecDeque<(ObjectKey, JoinHandle<Fetch>)>,
}

impl ObjectQueue {
    /// A queue over `keys` (relative to the tree's root), in this order.
    pub fn new(tree: Arc<RemoteTree>, keys: Vec<String>) -> Result<ObjectQueue> {
        let keys = keys
            .into_iter()
            .map(|k| ObjectKey::new(k).map_err(store_err))
            .collect::<Result<_>>()?;
        Ok(ObjectQueue {
            tree,
            keys,
            inflight: VecDeque::new(),
        })
    }

    /// The next object's bytes (None when all were given).
    pub fn next_object(&mut self) -> Option<std::io::Result<Bytes>> {
        while self.inflight.len() < AHEAD_OBJECTS {
            let Some(k) = self.keys.pop_front() else {
                break;
            };
            let h = self.tree.spawn_whole(&k);
            self.inflight.push_back((k, h));
        }
        let (k, h) = self.inflight.pop_front()?;
        Some(self.tree.wait(h, &k))
    }
}

impl Drop for ObjectQueue {
    fn drop(&mut self) {
        for (_, h) in self.inflight.drain(..) {
            h.abort();
        }
    }
}
