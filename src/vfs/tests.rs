//! The vfs against a model: an in-memory dataset and permutation orders.

use super::*;
use crate::cache::CacheError;
use crate::fetch::ShardFault;
use crate::order::OrderError;
use crate::plan::{Location, NextUse, OrderCache, OrderSource, MIN_KEEP_EPOCHS};
use crate::readahead::{Readahead, ReadaheadOptions, ShardSource};
use crate::store::{StoreError, TransientKind};
use inode::{ColumnNo, Node, SampleId};
use source::ShardError;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

/// Sample `s` has `1 + s % 3` columns; column `c` holds `s`'s decimal repeated `c + 1` times.
struct Memory {
    n: u64,
    cols: Vec<ColumnFile>,
    per_shard: u64,
    fetches: AtomicU64,
    broken_shard: Option<u32>,
    /// How the broken shard fails (default: a hash mismatch).
    failure: std::sync::Mutex<Option<CacheError>>,
    /// A sample whose size, before its shard is read, comes out 3 bytes too long (as from a
    /// damaged ranged read); `u64::MAX`: none.
    size_lie: AtomicU64,
    /// Whether shards count as read (verified) for sizes.
    resident: std::sync::atomic::AtomicBool,
    /// Whether reads must wait for the store (no shard on disk, no sample in memory): a cold
    /// start, where a read may be held for the first fetch.
    cold: std::sync::atomic::AtomicBool,
    /// How long each fetch takes.
    fetch_delay: std::sync::Mutex<std::time::Duration>,
    /// Fetches begun.
    fetches_begun: AtomicU64,
    /// Samples named to [`SampleSource::prepare_to_read`], in order.
    prepared: std::sync::Mutex<Vec<u64>>,
    /// Told of shards that land ([`Memory::land`]).
    landings: std::sync::Mutex<Option<source::OnLanded>>,
    /// Shards whose header is "in memory": their samples' first column is sized without a
    /// read ([`SampleSource::size_now`]).
    headers: std::sync::Mutex<std::collections::BTreeSet<usize>>,
    /// The shards each [`SampleSource::ready_sizes`] call named, in call order.
    readied: std::sync::Mutex<Vec<Vec<usize>>>,
    /// Whether [`SampleSource::ready_sizes`] brings headers in (a dataset whose first column
    /// is its only variable-size one); off, nothing is sized from headers.
    sized_by_headers: std::sync::atomic::AtomicBool,
}

impl Memory {
    fn bytes(s: u64, c: u32) -> Vec<u8> {
        s.to_string().repeat(c as usize + 1).into_bytes()
    }

    /// Global shard `shard` lands from the store (its bytes are the model's, so the landed
    /// bytes themselves are an empty shard).
    fn land(&self, shard: u32) {
        let f = self.landings.lock().unwrap().clone();
        if let Some(f) = f {
            let raw = bytes::Bytes::from_static(&[0, 0, 0, 0, 8, 0, 0, 0]);
            f(&source::LandedShard {
                global_shard: shard,
                header: crate::mds::ShardHeader::parse(&raw).unwrap(),
                raw,
            });
        }
    }
}

impl ShardSource for Memory {
    fn shard_of(&self, sample: u64) -> Option<u32> {
        (sample < self.n).then_some((sample / self.per_shard) as u32)
    }
    fn shard_bytes(&self, _shard: u32) -> u64 {
        1000
    }
    fn is_resident(&self, _shard: u32) -> bool {
        self.resident.load(Relaxed)
    }
    fn fetch(&self, _shard: u32, _urgent: bool) -> Result<(), crate::cache::CacheError> {
        self.fetches_begun.fetch_add(1, Relaxed);
        let delay = *self.fetch_delay.lock().unwrap();
        std::thread::sleep(delay);
        self.fetches.fetch_add(1, Relaxed);
        Ok(())
    }
}

impl SampleSource for Memory {
    fn num_samples(&self) -> u64 {
        self.n
    }
    fn locate(&self, sample: u64) -> Option<Location> {
        let shard = self.shard_of(sample)?;
        Some(Location {
            sample,
            stream: 0,
            shard: shard as usize,
            global_shard: shard,
            index: (sample % self.per_shard) as u32,
        })
    }
    fn is_resident(&self, _at: &Location) -> bool {
        self.resident.load(Relaxed)
    }
    fn sibling_files(&self, at: &Location, columns: source::ColumnSet) -> Vec<(u32, bytes::Bytes)> {
        let count = self.columns(at.sample).map_or(0, |c| c.len() as u32);
        (0..count)
            .filter(|&c| columns.contains(c))
            .map(|c| (c, bytes::Bytes::from(Self::bytes(at.sample, c))))
            .collect()
    }
    fn can_read_now(&self, _at: &Location) -> bool {
        !self.cold.load(Relaxed)
    }
    fn prepare_to_read(&self, at: &Location) {
        self.prepared.lock().unwrap().push(at.sample);
    }
    fn watch_landings(&self, f: source::OnLanded) {
        *self.landings.lock().unwrap() = Some(f);
    }
    fn landed_files(
        &self,
        landed: &source::LandedShard,
        at: &Location,
        columns: source::ColumnSet,
    ) -> Vec<(u32, bytes::Bytes)> {
        if landed.global_shard != at.global_shard {
            return Vec::new();
        }
        self.sibling_files(at, columns)
    }
    fn columns(&self, sample: u64) -> Option<&[ColumnFile]> {
        (sample < self.n).then(|| &self.cols[..1 + (sample % 3) as usize])
    }
    fn size_now(&self, at: &Location, column: u32) -> Option<(u64, bool)> {
        if column != 0 || !self.headers.lock().unwrap().contains(&at.shard) {
            return None;
        }
        let resident = self.resident.load(Relaxed);
        let lie = if at.sample == self.size_lie.load(Relaxed) && !resident {
            3
        } else {
            0
        };
        Some((Self::bytes(at.sample, 0).len() as u64 + lie, resident))
    }
    fn ready_sizes(&self, samples: &[Location], _wait: std::time::Duration) {
        let shards: Vec<usize> = samples.iter().map(|at| at.shard).collect();
        if self.sized_by_headers.load(Relaxed) {
            self.headers.lock().unwrap().extend(shards.iter().copied());
        }
        self.readied.lock().unwrap().push(shards);
    }
    fn file_size(&self, at: &Location, column: u32) -> Result<u64, SourceError> {
        let sample = at.sample;
        let lie = if sample == self.size_lie.load(Relaxed) && !self.resident.load(Relaxed) {
            3
        } else {
            0
        };
        let whole = ColumnRead {
            at: *at,
            column,
            offset: 0,
            size: u32::MAX,
        };
        self.read(whole).map(|b| b.len() as u64 + lie)
    }
    fn read_with_size(&self, r: ColumnRead) -> Result<(bytes::Bytes, u64), SourceError> {
        // The verified bytes: their own length, whatever a size look-up said before.
        let whole = Self::bytes(r.at.sample, r.column).len() as u64;
        Ok((self.read(r)?, whole))
    }
    fn read(&self, r: ColumnRead) -> Result<bytes::Bytes, SourceError> {
        let ColumnRead {
            at,
            column,
            offset,
            size,
        } = r;
        let sample = at.sample;
        if Some(self.shard_of(sample).ok_or(SourceError::Missing)?) == self.broken_shard {
            let failure = self.failure.lock().unwrap().clone();
            return Err(SourceError::Shard {
                store: "file:///data".into(),
                shard: "shard.00001.mds".into(),
                source: Box::new(ShardError::Cache(failure.unwrap_or(CacheError::Shard(
                    ShardFault::Corrupt {
                        shard: 1,
                        file: "file:///data/shard.00001.mds".into(),
                        reason: "hash mismatch".into(),
                    },
                )))),
            });
        }
        let b = Self::bytes(sample, column);
        let start = (offset as usize).min(b.len());
        let end = start.saturating_add(size as usize).min(b.len());
        Ok(bytes::Bytes::copy_from_slice(&b[start..end]))
    }
    fn status(&self) -> Vec<crate::status::StreamCacheStatus> {
        let stats = crate::cache::CacheStats {
            shards_fetched: self.fetches.load(Relaxed),
            ..Default::default()
        };
        vec![crate::status::StreamCacheStatus {
            stats,
            ..Default::default()
        }]
    }
}

/// The status file as the mount writes it, read back into its type.
fn status_file(v: &Vfs) -> crate::status::MountStatus {
    serde_json::from_slice(&v.status_json()).unwrap()
}

/// Rank r of `ranks` gets samples r, r+ranks, ... in reverse order, rotated by the epoch.
struct Strided {
    n: u64,
    global: Vec<u64>,
    world: u64,
}

impl OrderSource for Strided {
    fn node_orders(&self, epoch: u64) -> Result<Vec<Vec<u64>>, OrderError> {
        Ok(self
            .global
            .iter()
            .map(|&g| model_order(self.n, self.world, g, epoch))
            .collect())
    }
}

fn model_order(n: u64, world: u64, rank: u64, epoch: u64) -> Vec<u64> {
    let mut v: Vec<u64> = (rank..n).step_by(world as usize).collect();
    v.reverse();
    let k = (epoch as usize) % v.len().max(1);
    v.rotate_left(k);
    v
}

fn vfs(n: u64, global: Vec<u64>, world: u64, broken_shard: Option<u32>) -> Vfs {
    vfs_over(memory(n, broken_shard), global, world)
}

fn memory(n: u64, broken_shard: Option<u32>) -> Arc<Memory> {
    let cols = vec![
        ColumnFile::new("a", "bin"),
        ColumnFile::new("b.c", "txt"),
        ColumnFile::new("z", "npy"),
    ];
    Arc::new(Memory {
        n,
        cols,
        per_shard: 10,
        fetches: AtomicU64::new(0),
        broken_shard,
        failure: std::sync::Mutex::new(None),
        size_lie: AtomicU64::new(u64::MAX),
        resident: std::sync::atomic::AtomicBool::new(false),
        cold: std::sync::atomic::AtomicBool::new(false),
        fetch_delay: std::sync::Mutex::new(std::time::Duration::ZERO),
        fetches_begun: AtomicU64::new(0),
        prepared: std::sync::Mutex::new(Vec::new()),
        landings: std::sync::Mutex::new(None),
        headers: Default::default(),
        readied: Default::default(),
        sized_by_headers: Default::default(),
    })
}

fn vfs_over(src: Arc<Memory>, global: Vec<u64>, world: u64) -> Vfs {
    let n = src.n;
    let orders = Arc::new(OrderCache::new(
        Box::new(Strided {
            n,
            global: global.clone(),
            world,
        }),
        MIN_KEEP_EPOCHS,
    ));
    let ra = Arc::new(Readahead::new(
        orders.clone(),
        Arc::new(NextUse::new()),
        src.clone(),
        global.len(),
        ReadaheadOptions::default(),
    ));
    Vfs::new(
        src,
        ra,
        orders,
        b"{\"shards\": []}".to_vec(),
        VfsConfig {
            global_ranks: global,
            epochs_listed: 2,
            first_epoch_listed: 0,
        },
    )
}

fn list(v: &Vfs, ino: Ino, page: usize) -> Vec<DirEntry> {
    let mut out: Vec<DirEntry> = Vec::new();
    let mut offset = 0;
    loop {
        let mut got = Vec::new();
        v.readdir(ino, offset, |e| {
            got.push(e);
            got.len() >= page
        })
        .unwrap();
        let Some(last) = got.last() else { break };
        offset = last.next_offset;
        out.extend(got);
    }
    out
}

fn path(v: &Vfs, p: &str) -> Result<Attr, VfsError> {
    let mut ino = Ino(1);
    let mut attr = v.getattr(ino)?;
    for part in p.split('/').filter(|s| !s.is_empty()) {
        attr = v.lookup(ino, part)?;
        ino = attr.ino;
    }
    Ok(attr)
}

#[test]
fn root_lists_fixed_entries_and_served_ranks() {
    let v = vfs(50, vec![2, 3], 4, None);
    let names: Vec<String> = list(&v, Ino(1), 2).into_iter().map(|e| e.name).collect();
    assert_eq!(
        names,
        [
            ".",
            "..",
            "index.json",
            "samples",
            ".shardfs",
            "rank-2",
            "rank-3"
        ]
    );
    assert_eq!(path(&v, "rank-0").unwrap_err().errno(), libc::ENOENT);
    assert_eq!(path(&v, "rank-3/epoch-7").unwrap().kind, Kind::Dir);
    let rank: Vec<String> = list(&v, path(&v, "rank-2").unwrap().ino, 100)
        .into_iter()
        .map(|e| e.name)
        .collect();
    assert_eq!(rank, [".", "..", "epoch-0", "epoch-1"]);
    let idx = path(&v, "index.json").unwrap();
    assert_eq!(&v.read(idx.ino, 0, 1000).unwrap()[..], b"{\"shards\": []}");
}

#[test]
fn epoch_folders_list_the_model_order_in_any_page_size() {
    let v = vfs(103, vec![1, 2], 3, None);
    for (local, global) in [(0usize, 1u64), (1, 2)] {
        for epoch in [0u64, 1, 5] {
            let dir = path(&v, &format!("rank-{global}/epoch-{epoch}")).unwrap();
            let full = list(&v, dir.ino, 1000);
            for page in [1, 2, 7] {
                assert_eq!(list(&v, dir.ino, page), full);
            }
            let mut names: Vec<String> = full.iter().skip(2).map(|e| e.name.clone()).collect();
            let listed = names.clone();
            names.sort();
            assert_eq!(names, listed, "listing is in lexical order");
            // Each position's first column file is `a.bin`; reading it gives the model sample.
            let order = model_order(103, 3, global, epoch);
            let firsts: Vec<&String> = names.iter().filter(|n| n.ends_with(".a.bin")).collect();
            assert_eq!(firsts.len(), order.len());
            for (p, name) in firsts.iter().enumerate() {
                assert_eq!(name.as_str(), format!("{p:08}.a.bin"));
                let a = v.lookup(dir.ino, name).unwrap();
                assert_eq!(v.read(a.ino, 0, 4096).unwrap(), Memory::bytes(order[p], 0));
            }
            let _ = local;
        }
    }
}

#[test]
fn files_have_exact_sizes_and_partial_reads() {
    let v = vfs(40, vec![0], 1, None);
    let f = path(&v, "samples/00000035.b.c.txt").unwrap();
    assert_eq!(f.size, 4);
    assert_eq!(&v.read(f.ino, 1, 2).unwrap()[..], b"53");
    assert_eq!(&v.read(f.ino, 10, 2).unwrap()[..], b"");
    for (missing, errno) in [
        // sample 36 has one column only
        ("samples/00000036.b.c.txt", libc::ENOENT),
        ("samples/00000040.a.bin", libc::ENOENT),
        ("samples/0000035.b.c.txt", libc::ENOENT),
        ("samples/00000035.a.bin/x", libc::ENOTDIR),
    ] {
        assert_eq!(path(&v, missing).unwrap_err().errno(), errno, "{missing}");
    }
    let dir = path(&v, "samples").unwrap();
    assert_eq!(v.read(dir.ino, 0, 10).unwrap_err().errno(), libc::EISDIR);
    let n = list(&v, dir.ino, 5).len() - 2;
    assert_eq!(n as u64, (0..40u64).map(|s| 1 + s % 3).sum::<u64>());
}

#[test]
fn broken_shard_gives_eio_and_is_reported_while_others_work() {
    let v = vfs(40, vec![0], 1, Some(1));
    let e = path(&v, "samples/00000012.a.bin").unwrap_err();
    assert_eq!(e.errno(), libc::EIO);
    assert!(path(&v, "samples/00000022.a.bin").is_ok());
    // The same file's read right after its lookup is the same failure, counted once.
    use super::inode::{ColumnNo, Node, SampleId};
    let ino = Node::SampleFile(SampleId(12), ColumnNo(0)).ino().unwrap();
    assert_eq!(v.read(ino, 0, 100).unwrap_err().errno(), libc::EIO);
    let status = status_file(&v);
    assert_eq!(status.errors.count, 1);
    assert_eq!(status.errors.recent[0].shard, "shard.00001.mds");
    assert!(
        status.errors.recent[0].why.ends_with(": hash mismatch"),
        "{:?}",
        status.errors.recent[0]
    );
    assert_eq!(status.errors.recent[0].errno, "EIO");
    // ... but both answers count, by kind: the lookup's (size) and the read's.
    assert_eq!(status.errors.answers.size, 1);
    assert_eq!(status.errors.answers.read, 1);
}

#[test]
fn each_kind_of_shard_failure_reaches_the_reader_as_its_errno() {
    use super::inode::{ColumnNo, Node, SampleId};
    let url = || "s3://b/ds/shard.00001.mds".to_string();
    let detail = || "from the test".to_string();
    let after_retries = |last: StoreError| StoreError::RetriesExhausted {
        attempts: 3,
        elapsed: std::time::Duration::from_secs(1),
        last: Box::new(last),
    };
    // (failure, errno of a lookup before the shard is read, errno of a read)
    let cases: Vec<(CacheError, i32, i32)> = vec![
        (
            CacheError::Store(StoreError::NotFound {
                url: url(),
                detail: detail(),
            }),
            libc::ENOENT,
            libc::EIO,
        ),
        (
            CacheError::Store(StoreError::AccessDenied {
                url: url(),
                detail: detail(),
            }),
            libc::EACCES,
            libc::EACCES,
        ),
        (
            CacheError::Store(after_retries(StoreError::Transient {
                url: url(),
                kind: TransientKind::Timeout,
                detail: detail(),
            })),
            libc::ETIMEDOUT,
            libc::ETIMEDOUT,
        ),
        (
            CacheError::Store(after_retries(StoreError::Transient {
                url: url(),
                kind: TransientKind::Connection,
                detail: detail(),
            })),
            libc::EIO,
            libc::EIO,
        ),
        (
            CacheError::Shard(ShardFault::Corrupt {
                shard: 1,
                file: url(),
                reason: "hash mismatch".into(),
            }),
            libc::EIO,
            libc::EIO,
        ),
        (
            CacheError::Full {
                shard: 1,
                need: 10,
                limit: 10,
                pinned: 10,
                filling: 0,
            },
            libc::ENOSPC,
            libc::ENOSPC,
        ),
        (
            CacheError::io(
                "write",
                "/cache/x",
                std::io::Error::from_raw_os_error(libc::ENOSPC),
            ),
            libc::ENOSPC,
            libc::ENOSPC,
        ),
        (
            CacheError::io(
                "write",
                "/cache/x",
                std::io::Error::from_raw_os_error(libc::EBADF),
            ),
            libc::EIO,
            libc::EIO,
        ),
    ];
    for (failure, on_lookup, on_read) in cases {
        let src = memory(40, Some(1));
        *src.failure.lock().unwrap() = Some(failure.clone());
        let v = vfs_over(src, vec![0], 1);
        let e = path(&v, "samples/00000012.a.bin").unwrap_err();
        assert_eq!(e.errno(), on_lookup, "lookup: {failure}");
        let ino = Node::SampleFile(SampleId(12), ColumnNo(0)).ino().unwrap();
        let e = v.read(ino, 0, 100).unwrap_err();
        assert_eq!(e.errno(), on_read, "read: {failure}");
        // The cause is kept whole, and status.json names the errno given.
        assert!(e.to_string().contains(&failure.to_string()), "{e}");
        let status = status_file(&v);
        let last = &status.errors.recent[0];
        assert_eq!(last.errno, super::error::errno_name(on_read), "{last:?}");
    }
}

#[test]
fn a_size_from_unverified_bytes_that_the_verified_bytes_contradict_fails_reads_until_forgotten() {
    use super::inode::{ColumnNo, Node, SampleId};
    let src = memory(40, None);
    src.size_lie.store(12, Relaxed);
    let v = vfs_over(src.clone(), vec![0], 1);
    // The "kernel" is told at once, but says it is done only when the test says so.
    type Told = Vec<(Ino, Option<Box<dyn FnOnce() + Send>>)>;
    let forgotten: Arc<std::sync::Mutex<Told>> = Arc::default();
    let f = forgotten.clone();
    v.set_forget_size(Box::new(move |ino, done| {
        f.lock().unwrap().push((ino, Some(done)))
    }));
    // Sized before the shard is on disk: 3 bytes too long ("12" is 2 bytes).
    let a = path(&v, "samples/00000012.a.bin").unwrap();
    assert_eq!(a.size, 5);
    let ino = Node::SampleFile(SampleId(12), ColumnNo(0)).ino().unwrap();
    assert_eq!(a.ino, ino);
    // The first read sees the verified bytes disagree: EIO, and the kernel forgets the size.
    let e = v.read(ino, 0, 100).unwrap_err();
    assert_eq!(e.errno(), libc::EIO);
    assert!(e.to_string().contains("size 5 given"), "{e}");
    assert_eq!(forgotten.lock().unwrap().len(), 1);
    assert_eq!(forgotten.lock().unwrap()[0].0, ino);
    // Until the kernel has forgotten the wrong size, reads keep failing (it retries a failed
    // read at once, and would pad the short answer to the size it holds); attributes already
    // give the verified size.
    assert_eq!(v.read(ino, 0, 100).unwrap_err().errno(), libc::EIO);
    assert_eq!(v.getattr(ino).unwrap().size, 2);
    let done = forgotten.lock().unwrap()[0].1.take().unwrap();
    done();
    // From then on the size is the verified one, and reads succeed.
    assert_eq!(v.getattr(ino).unwrap().size, 2);
    assert_eq!(&v.read(ino, 0, 100).unwrap()[..], b"12");
    // A size that was right is checked once, silently.
    let b = path(&v, "samples/00000013.a.bin").unwrap();
    assert_eq!(b.size, 2);
    assert_eq!(&v.read(b.ino, 0, 100).unwrap()[..], b"13");
    assert_eq!(forgotten.lock().unwrap().len(), 1);
    // Sizes computed once the shard is on disk are verified: never checked against anything.
    src.resident.store(true, Relaxed);
    src.size_lie.store(14, Relaxed);
    let c = path(&v, "samples/00000014.a.bin").unwrap();
    assert_eq!(&v.read(c.ino, 0, 100).unwrap()[..], b"14");
}

#[test]
fn stat_does_not_move_the_readahead_cursor_but_read_does() {
    let v = vfs(40_000, vec![0], 1, None);
    let cursor = |v: &Vfs| status_file(v).readahead.ranks[0].cursor;
    // `ls -l` of the epoch folder: stat of far positions.
    for p in [0u64, 5000, 39_999] {
        let a = path(&v, &format!("rank-0/epoch-0/{p:08}.a.bin")).unwrap();
        v.getattr(a.ino).unwrap();
    }
    assert_eq!(cursor(&v), None, "stat moved the cursor");
    let far = path(&v, "rank-0/epoch-0/00039999.a.bin").unwrap();
    let near = path(&v, "rank-0/epoch-0/00000007.a.bin").unwrap();
    v.read(near.ino, 0, 10).unwrap();
    assert_eq!(cursor(&v), Some(7));
    v.getattr(far.ino).unwrap();
    assert_eq!(cursor(&v), Some(7), "stat moved the cursor");
    v.read(far.ino, 0, 10).unwrap();
    assert_eq!(cursor(&v), Some(39_999));
}

#[test]
fn a_sample_is_one_inode_in_every_epoch_and_reads_follow_the_name_opened() {
    // One rank over 40 samples (world 1): every epoch holds every sample, so each sample
    // file of epoch 0 is also in epoch 1 and in samples/, under the same inode.
    let v = vfs(40, vec![0], 1, None);
    let status = |v: &Vfs| status_file(v).readahead.ranks[0].clone();
    let order1 = model_order(40, 1, 0, 1);
    let e1 = path(&v, "rank-0/epoch-1/00000003.z.npy").unwrap();
    let s = path(&v, &format!("samples/{:08}.z.npy", order1[3])).unwrap();
    assert_eq!(e1.ino, s.ino);
    let p0 = model_order(40, 1, 0, 0)
        .iter()
        .position(|&x| x == order1[3])
        .unwrap();
    let e0 = path(&v, &format!("rank-0/epoch-0/{p0:08}.z.npy")).unwrap();
    assert_eq!(e0.ino, e1.ino);
    // Listings name the same inodes.
    let dir = path(&v, "rank-0/epoch-1").unwrap();
    let listed = list(&v, dir.ino, 1000);
    let entry = listed.iter().find(|e| e.name == "00000003.z.npy").unwrap();
    assert_eq!(entry.ino, s.ino);
    // The last name looked up says which rank position a read of the inode is for.
    v.read(e1.ino, 0, 10).unwrap();
    assert_eq!((status(&v).epoch, status(&v).cursor), (0, Some(p0 as u64)));
    let e1 = path(&v, "rank-0/epoch-1/00000003.z.npy").unwrap();
    v.read(e1.ino, 0, 10).unwrap();
    assert_eq!((status(&v).epoch, status(&v).cursor), (1, Some(3)));
    let again = path(&v, &format!("rank-0/epoch-0/{p0:08}.z.npy")).unwrap();
    v.read(again.ino, 0, 10).unwrap();
    assert_eq!(status(&v).epoch, 0);
    assert_eq!(status(&v).cursor, Some(p0 as u64));
    // A sample never opened through a rank folder is read without moving any cursor.
    let other = (0..40).find(|&x| x != order1[3]).unwrap();
    let direct = path(&v, &format!("samples/{other:08}.a.bin")).unwrap();
    let before = status(&v).requests;
    assert_eq!(
        v.read(direct.ino, 0, 4096).unwrap(),
        Memory::bytes(other, 0)
    );
    assert_eq!(status(&v).requests, before);
}

#[test]
fn a_listing_with_attributes_records_where_its_samples_are_opened() {
    // READDIRPLUS: entries whose size was computed before come with attributes (no shard
    // read), and the kernel opens them without a lookup; their reads must still move the
    // rank's cursor. The others come without, and the kernel looks them up when opened.
    let v = vfs(40, vec![0], 1, None);
    // Size the files of the even samples (through samples/: no rank position involved).
    let samples = path(&v, "samples").unwrap();
    for e in list(&v, samples.ino, 1000).iter().skip(2) {
        let id: u64 = e.name[..e.name.find('.').unwrap()].parse().unwrap();
        if id % 2 == 0 {
            v.lookup(samples.ino, &e.name).unwrap();
        }
    }
    let dir = path(&v, "rank-0/epoch-1").unwrap();
    let mut entries = Vec::new();
    v.readdir_plus(dir.ino, 0, |e, a| {
        entries.push((e, a));
        false
    })
    .unwrap();
    let order1 = model_order(40, 1, 0, 1);
    let files: Vec<_> = entries
        .iter()
        .filter(|(e, _)| e.kind == Kind::File)
        .collect();
    assert_eq!(files.len(), list(&v, dir.ino, 1000).len() - 2);
    for (e, a) in &files {
        let p: usize = e.name[..e.name.find('.').unwrap()].parse().unwrap();
        let sample = order1[p];
        match a {
            Some(a) => {
                assert_eq!(sample % 2, 0, "{}", e.name);
                assert_eq!(a.ino, e.ino);
                assert_eq!(a.size, v.getattr(e.ino).unwrap().size);
            }
            None => assert_eq!(sample % 2, 1, "{}", e.name),
        }
    }
    let cursor = |v: &Vfs| {
        let r = status_file(v).readahead.ranks[0].clone();
        (r.epoch, r.cursor)
    };
    // A listed entry with attributes, read without a lookup: attributed to its position.
    let p = (5..40).find(|&p| order1[p] % 2 == 0).unwrap();
    let (e, _) = files
        .iter()
        .find(|(e, _)| e.name.starts_with(&format!("{p:08}.")))
        .unwrap();
    v.read(e.ino, 0, 10).unwrap();
    assert_eq!(cursor(&v), (1, Some(p as u64)));
    // One without attributes is recorded by the lookup the kernel then sends.
    let q = (p + 1..40).find(|&q| order1[q] % 2 == 1).unwrap();
    let f = path(&v, &format!("rank-0/epoch-1/{q:08}.a.bin")).unwrap();
    v.read(f.ino, 0, 10).unwrap();
    assert_eq!(cursor(&v), (1, Some(q as u64)));
}

#[test]
fn listing_the_next_epoch_does_not_take_reads_of_the_current_one() {
    // The reader lists epoch 1 before it has finished epoch 0 (a DataLoader building its next
    // epoch's file list). Files of epoch 0 opened from the earlier listing, without a lookup,
    // are still epoch 0's reads; epoch 1's count once the reader is there.
    let v = vfs(40, vec![0], 1, None);
    let samples = path(&v, "samples").unwrap();
    for e in list(&v, samples.ino, 1000).iter().skip(2) {
        v.lookup(samples.ino, &e.name).unwrap(); // sizes known: listings carry attributes
    }
    let listed = |epoch: u64| {
        let dir = path(&v, &format!("rank-0/epoch-{epoch}")).unwrap();
        let mut files = Vec::new();
        v.readdir_plus(dir.ino, 0, |e, a| {
            if e.kind == Kind::File && e.name.ends_with(".a.bin") {
                assert!(a.is_some(), "{}", e.name);
                files.push(e.ino);
            }
            false
        })
        .unwrap();
        files // one per position, in order
    };
    let cursor = |v: &Vfs| {
        let r = status_file(v).readahead.ranks[0].clone();
        (r.epoch, r.cursor.unwrap())
    };
    let epoch0 = listed(0);
    v.read(epoch0[5], 0, 10).unwrap();
    assert_eq!(cursor(&v), (0, 5));
    let epoch1 = listed(1);
    v.read(epoch0[6], 0, 10).unwrap();
    assert_eq!(
        cursor(&v),
        (0, 6),
        "a read of epoch 0 went to epoch 1's listing"
    );
    // The reader moves on to epoch 1: its first file is looked up (or read from the listing
    // while the rank reads no epoch near there), and the next ones follow epoch 1.
    let first = path(&v, "rank-0/epoch-1/00000000.a.bin").unwrap();
    v.read(first.ino, 0, 10).unwrap();
    assert_eq!(cursor(&v), (1, 0));
    v.read(epoch1[7], 0, 10).unwrap();
    assert_eq!(cursor(&v), (1, 7));
}

#[test]
fn huge_dataset_resolves_without_materialising() {
    let v = vfs(300_000_000, vec![0], 1_000_000, None);
    let f = path(&v, "samples/299999999.a.bin").unwrap();
    assert_eq!(f.size, 9);
    assert!(
        path(&v, "samples/00000001.a.bin").is_err(),
        "width is 9 digits here"
    );
    assert!(path(&v, "samples/000000001.a.bin").is_ok());
}

mod model {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]
        /// Random folders, page sizes and byte ranges against the model: listing in pages
        /// equals the model's names in order, and every read returns the model's bytes.
        #[test]
        fn vfs_matches_the_model(
            n in 1u64..300,
            world in 1u64..5,
            epoch in 0u64..4,
            page in 1usize..40,
            reads in proptest::collection::vec((0u64..300, 0u32..3, 0u64..8, 1u32..8), 1..30),
        ) {
            let rank = world - 1;
            let v = vfs(n, vec![rank], world, None);
            let dir = path(&v, &format!("rank-{rank}/epoch-{epoch}")).unwrap();
            let order = model_order(n, world, rank, epoch);
            let names: Vec<String> = list(&v, dir.ino, page).into_iter().skip(2).map(|e| e.name).collect();
            let cols = ["a.bin", "b.c.txt", "z.npy"];
            let want: Vec<String> = order
                .iter()
                .enumerate()
                .flat_map(|(p, &s)| (0..=(s % 3) as usize).map(move |c| format!("{p:08}.{}", cols[c])))
                .collect();
            prop_assert_eq!(&names, &want);
            for (p, c, off, len) in reads {
                let Some(&s) = order.get(p as usize) else { continue };
                let name = format!("{p:08}.{}", cols[c as usize]);
                match v.lookup(dir.ino, &name) {
                    Ok(a) => {
                        prop_assert!(u64::from(c) <= s % 3);
                        let full = Memory::bytes(s, c);
                        prop_assert_eq!(a.size, full.len() as u64);
                        let start = (off as usize).min(full.len());
                        let end = (start + len as usize).min(full.len());
                        prop_assert_eq!(v.read(a.ino, off, len).unwrap(), full[start..end].to_vec());
                    }
                    Err(e) => {
                        prop_assert!(u64::from(c) > s % 3);
                        prop_assert_eq!(e.errno(), libc::ENOENT);
                    }
                }
            }
        }
    }
}

#[test]
fn a_read_held_for_a_cold_start_s_first_fetch_counts_the_hold_as_a_stall() {
    // Rank 0 of 1: position p holds sample 99 - p, so position 0 is in shard 9 and position 50
    // in shard 4. Nothing is on disk and every fetch takes 600 ms.
    let src = memory(100, None);
    *src.fetch_delay.lock().unwrap() = std::time::Duration::from_millis(600);
    src.cold.store(true, Relaxed);
    let v = Arc::new(vfs_over(src.clone(), vec![0], 1));
    let first = path(&v, "rank-0/epoch-0/00000000.a.bin").unwrap();
    let other = path(&v, "rank-0/epoch-0/00000050.a.bin").unwrap();
    // The first read makes shard 9 the cold start's first fetch; it is not held for it.
    let reader = {
        let v = v.clone();
        std::thread::spawn(move || v.read(first.ino, 0, 100).map(|b| b.to_vec()))
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while src.fetches_begun.load(Relaxed) == 0 {
        assert!(std::time::Instant::now() < deadline, "no fetch began");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    // A read of another shard meanwhile is held until that fetch has ended.
    let started = std::time::Instant::now();
    assert_eq!(&v.read(other.ino, 0, 100).unwrap()[..], b"49");
    let held = started.elapsed();
    assert_eq!(reader.join().unwrap().unwrap(), b"99");
    assert!(
        held >= std::time::Duration::from_millis(250),
        "the read was not held ({held:?}): the test proves nothing"
    );
    // The hold is waiting for the store: it counts in the stall time (the reads themselves
    // take no time here).
    let stalls = status_file(&v).readahead;
    assert!(
        stalls.stall_seconds >= held.as_secs_f64() * 0.9,
        "stall time {} s, the held read waited {held:?}",
        stalls.stall_seconds
    );
    assert!(stalls.stalls >= 1);
}

mod landed;
mod listed_sizes;
mod page_push;
mod prepare;
