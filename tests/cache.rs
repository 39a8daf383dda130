//! `cache`: every fixture sample read through the cache from S3 (moto) and local sources,
//! compared with expected.jsonl; atomic fills, restarts, budget, pins, single flight,
//! verification and the two I/O back ends.

use crate::common::moto::{moto, s3_options};
use crate::common::stores::Rewrite;
use crate::common::{fixtures, mds_datasets, strip_hashes};
use base64::Engine;
use shardfs::cache::{
    Advice, CacheError, CacheOptions, Candidate, Dataset, EvictionContext, EvictionPolicy, IoMode,
    ShardCache,
};
use shardfs::fetch::ShardFault;
use shardfs::mds;
use shardfs::store::{
    self, BlockingStore, CountingStore, Fault, FaultyStore, ResilientStore, StoreOptions,
};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// Each sample's columns as raw bytes, from expected.jsonl, in the index's column order.
fn expected_samples(ds: &Path, columns: &[mds::Column]) -> Vec<Vec<Vec<u8>>> {
    let text = std::fs::read_to_string(ds.join("expected.jsonl")).unwrap();
    text.lines()
        .map(|line| {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            columns
                .iter()
                .map(|c| {
                    let raw = v[&c.name]["raw"]
                        .as_str()
                        .unwrap_or_else(|| panic!("no raw for {}", c.name));
                    base64::engine::general_purpose::STANDARD
                        .decode(raw)
                        .unwrap()
                })
                .collect()
        })
        .collect()
}

/// Reads every sample of the dataset through the cache and compares each column's bytes.
fn check_every_sample(cache: &Arc<ShardCache>, ds: &Path) {
    let index = cache.dataset().index().clone();
    let columns = index.columns().to_vec();
    let expected = expected_samples(ds, &columns);
    assert_eq!(
        expected.len() as u64,
        index.num_samples(),
        "{}",
        ds.display()
    );
    for (g, want) in expected.iter().enumerate() {
        let (shard, i) = index.locate(g as u64).unwrap();
        let sample = cache.sample(shard, i).unwrap();
        let cols = &index.shards()[shard].columns;
        let ranges = mds::split_sample(cols, &sample).unwrap();
        let got: Vec<Vec<u8>> = ranges.into_iter().map(|r| sample[r].to_vec()).collect();
        assert_eq!(
            &got,
            want,
            "{} sample {g} (shard {shard}, index {i})",
            ds.display()
        );
    }
}

fn opts(dir: &Path) -> CacheOptions {
    CacheOptions {
        cache_dir: dir.to_path_buf(),
        ..Default::default()
    }
}

#[test]
fn every_fixture_sample_reads_back_through_s3_and_the_cache() {
    let moto = moto();
    let tmp = tempfile::tempdir().unwrap();
    for ds in mds_datasets() {
        let name = ds.file_name().unwrap().to_str().unwrap();
        moto.upload_dir("cache-fixtures", name, &ds);
        let dataset = Arc::new(
            Dataset::load(
                &format!("s3://cache-fixtures/{name}"),
                &s3_options(&moto.endpoint),
            )
            .unwrap(),
        );
        let cache = ShardCache::open(dataset, opts(tmp.path())).unwrap();
        check_every_sample(&cache, &ds);
        let st = cache.stats();
        let with_samples = cache
            .dataset()
            .index()
            .shards()
            .iter()
            .filter(|s| s.samples > 0)
            .count();
        assert_eq!(st.shards_fetched as usize, with_samples, "{name}");
        assert_eq!(st.resident_shards, st.shards_fetched);
    }
}

/// Pages of `path` in the page cache (mincore(2) over a mapping of the whole file).
fn pages_in_page_cache(path: &Path) -> usize {
    use std::os::fd::AsRawFd;
    let f = std::fs::File::open(path).unwrap();
    let len = f.metadata().unwrap().len() as usize;
    if len == 0 {
        return 0;
    }
    // SAFETY: a private read-only mapping of an open file, unmapped before returning;
    // mincore writes one byte per page into `vec`, which holds that many.
    unsafe {
        let at = libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ,
            libc::MAP_SHARED,
            f.as_raw_fd(),
            0,
        );
        assert_ne!(at, libc::MAP_FAILED);
        let mut vec = vec![0u8; len.div_ceil(4096)];
        assert_eq!(libc::mincore(at, len, vec.as_mut_ptr()), 0);
        libc::munmap(at, len);
        vec.iter().filter(|&&b| b & 1 == 1).count()
    }
}

/// Every regular file under `dir`, recursively.
fn files_under(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(files_under(&p));
        } else {
            out.push(p);
        }
    }
    out
}

#[test]
fn shards_downloaded_in_parts_are_cached_and_read_past_the_page_cache() {
    // Direct I/O is the default where the cache folder's file system takes it: a shard
    // downloaded in parts (into an aligned buffer) is written with O_DIRECT, and samples are
    // read back with O_DIRECT, so none of the cached file's pages sit in the page cache.
    let moto = moto();
    let ds = fixtures().join("mds/basic");
    moto.upload_dir("cache-direct", "basic", &ds);
    let store = shardfs::store::StoreOptions {
        part_size: 16 << 10,
        ..s3_options(&moto.endpoint)
    };
    for direct_io in [true, false] {
        let tmp = tempfile::tempdir().unwrap();
        let dataset = Arc::new(Dataset::load("s3://cache-direct/basic", &store).unwrap());
        let cache = ShardCache::open(
            dataset,
            CacheOptions {
                memory_limit: 0,
                direct_io,
                ..opts(tmp.path())
            },
        )
        .unwrap();
        check_every_sample(&cache, &ds);
        let backend = cache.stats().io_backend;
        if !direct_io {
            assert!(!backend.ends_with("-direct"), "{backend}");
            assert_cached_shards_are_the_stored_files(tmp.path(), &ds);
            continue;
        }
        if !backend.ends_with("-direct") {
            eprintln!(
                "{}: no direct I/O on this file system; nothing more to check",
                tmp.path().display()
            );
            assert_cached_shards_are_the_stored_files(tmp.path(), &ds);
            return;
        }
        let shard_files: Vec<_> = files_under(tmp.path())
            .into_iter()
            .filter(|p| p.components().any(|c| c.as_os_str() == "shards"))
            .collect();
        assert!(!shard_files.is_empty());
        let big = shard_files
            .iter()
            .filter(|p| std::fs::metadata(p).unwrap().len() > 16 << 10)
            .count();
        assert!(
            big > 0,
            "no shard large enough to come in parts: {shard_files:?}"
        );
        for p in &shard_files {
            if std::fs::metadata(p).unwrap().len() > 16 << 10 {
                assert_eq!(
                    pages_in_page_cache(p),
                    0,
                    "{} is in the page cache",
                    p.display()
                );
            }
        }
        // Last: reading the files puts them in the page cache.
        assert_cached_shards_are_the_stored_files(tmp.path(), &ds);
    }
}

#[test]
fn a_download_buffer_made_ready_ahead_is_the_first_downloads() {
    let moto = moto();
    let ds = fixtures().join("mds/basic");
    moto.upload_dir("cache-prepare", "basic", &ds);
    let tmp = tempfile::tempdir().unwrap();
    let store = shardfs::store::StoreOptions {
        part_size: 16 << 10,
        ..s3_options(&moto.endpoint)
    };
    let dataset = Arc::new(Dataset::load("s3://cache-prepare/basic", &store).unwrap());
    let cache = ShardCache::open(dataset, opts(&tmp.path().join("s3"))).unwrap();
    cache.prepare_download(0);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while cache.stats().idle_download_buffer_bytes == 0 {
        assert!(std::time::Instant::now() < deadline, "no buffer made ready");
        std::thread::sleep(Duration::from_millis(5));
    }
    let st = cache.stats();
    assert_eq!(st.download_buffers_prepared, 1);
    assert_eq!(
        (st.download_buffers_made, st.download_buffers_reused),
        (0, 0)
    );
    // The first download lands in it: no fresh memory.
    let first = cache.get(0).unwrap().read_at(0, 16).unwrap();
    assert_eq!(
        first,
        std::fs::read(ds.join("shard.00000.mds")).unwrap()[..16]
    );
    let st = cache.stats();
    assert_eq!(
        (st.download_buffers_made, st.download_buffers_reused),
        (0, 1)
    );
    // A shard on disk needs no download: nothing is made ready for it. (Opened again, so no
    // buffer is kept from the download above.)
    drop(cache);
    let dataset = Arc::new(Dataset::load("s3://cache-prepare/basic", &store).unwrap());
    let cache = ShardCache::open(dataset, opts(&tmp.path().join("s3"))).unwrap();
    assert!(cache.is_resident(0));
    cache.prepare_download(0);
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(cache.stats().download_buffers_prepared, 0);
    assert_eq!(cache.stats().idle_download_buffer_bytes, 0);
    // One that is not on disk gets one.
    assert!(!cache.is_resident(1));
    cache.prepare_download(1);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while cache.stats().download_buffers_prepared == 0 {
        assert!(std::time::Instant::now() < deadline, "no buffer made ready");
        std::thread::sleep(Duration::from_millis(5));
    }
    // A local dataset is read, not downloaded into a buffer: nothing is made ready.
    let local = Arc::new(
        Dataset::load(
            &format!("file://{}", ds.display()),
            &shardfs::store::StoreOptions::default(),
        )
        .unwrap(),
    );
    let local = ShardCache::open(local, opts(&tmp.path().join("local"))).unwrap();
    local.prepare_download(0);
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(local.stats().download_buffers_prepared, 0);
}

/// Every shard file cached under `cache_dir` is its stored file in `ds` byte for byte: for a
/// download in parts, the parts written as they landed and those left to write after the
/// check (the last to land) alike.
fn assert_cached_shards_are_the_stored_files(cache_dir: &Path, ds: &Path) {
    let cached: Vec<_> = files_under(cache_dir)
        .into_iter()
        .filter(|p| p.components().any(|c| c.as_os_str() == "shards"))
        .collect();
    assert!(!cached.is_empty());
    for p in &cached {
        let name = p.file_name().unwrap();
        assert!(
            std::fs::read(p).unwrap() == std::fs::read(ds.join(name)).unwrap(),
            "{} differs from the stored shard",
            p.display()
        );
    }
}

#[test]
fn every_fixture_sample_reads_back_from_local_sources_with_both_io_backends() {
    for (n, io) in [IoMode::Pread, IoMode::Auto, IoMode::Uring]
        .into_iter()
        .enumerate()
    {
        let tmp = tempfile::tempdir().unwrap();
        for ds in mds_datasets() {
            let src = if n == 0 {
                ds.to_str().unwrap().to_string()
            } else {
                url::Url::from_file_path(&ds).unwrap().to_string()
            };
            let dataset = Arc::new(Dataset::load(&src, &StoreOptions::default()).unwrap());
            let cache = match ShardCache::open(
                dataset,
                CacheOptions {
                    io,
                    memory_limit: 0,
                    // The io backends read through the page cache.
                    direct_io: false,
                    ..opts(tmp.path())
                },
            ) {
                Ok(c) => c,
                // Where io_uring is unavailable this fails rather than skipping the mode.
                Err(e) => panic!("{io:?}: {e}"),
            };
            let backend = cache.stats().io_backend;
            match io {
                IoMode::Pread => assert_eq!(backend, "pread"),
                // Auto falls back to pread where io_uring is unavailable.
                IoMode::Auto => {
                    assert!(
                        ["io_uring-inline", "pread"].contains(&&*backend),
                        "{backend}"
                    )
                }
                _ => assert_eq!(backend, "io_uring"),
            }
            check_every_sample(&cache, &ds);
        }
    }
}

#[test]
fn direct_io_goes_through_io_uring_by_default_and_through_pread_when_asked() {
    // A folder whose file system takes direct I/O: /tmp may be a tmpfs, which gets none, so
    // the build's own folder, then /var/tmp. Without one, nothing here can be checked.
    let base = [env!("CARGO_TARGET_TMPDIR"), "/var/tmp"]
        .into_iter()
        .find(|dir| {
            let t = tempfile::tempdir_in(dir).unwrap();
            let cache = ShardCache::open(
                Arc::new(
                    Dataset::load(
                        fixtures().join("mds/basic").to_str().unwrap(),
                        &StoreOptions::default(),
                    )
                    .unwrap(),
                ),
                opts(t.path()),
            )
            .unwrap();
            cache.stats().io_backend.ends_with("-direct")
        })
        .expect("no folder here takes O_DIRECT, so the direct paths cannot be checked");
    for (io, want) in [
        (IoMode::Auto, "io_uring-direct"),
        (IoMode::Pread, "pread-direct"),
    ] {
        let tmp = tempfile::tempdir_in(base).unwrap();
        for ds in mds_datasets() {
            let dataset =
                Arc::new(Dataset::load(ds.to_str().unwrap(), &StoreOptions::default()).unwrap());
            let cache = ShardCache::open(
                dataset,
                CacheOptions {
                    io,
                    memory_limit: 0,
                    ..opts(tmp.path())
                },
            )
            .unwrap();
            // io_uring is there on the machines the tests run on: not having it is a failure.
            assert_eq!(cache.stats().io_backend, want, "{io:?}");
            // Fills written (and samples read) by that path.
            check_every_sample(&cache, &ds);
            if ds.ends_with("basic") {
                // Uncompressed shards: the cached files are the store's files, byte for byte.
                for (i, s) in cache.dataset().index().shards().iter().enumerate() {
                    if cache.is_resident(i) {
                        assert!(
                            std::fs::read(cache.shard_path(i).unwrap()).unwrap()
                                == std::fs::read(ds.join(&s.raw.basename)).unwrap(),
                            "{io:?}: shard {i}"
                        );
                    }
                }
            }
        }
    }
}

/// A dataset on a local fixture folder behind counting + fault injection + retries.
pub fn instrumented(
    ds: &Path,
    store_opts: &StoreOptions,
) -> (Arc<FaultyStore>, Arc<CountingStore>, Arc<Dataset>) {
    let source = store::Source::parse(ds.to_str().unwrap()).unwrap();
    let backend = store::ObjectStoreBackend::open(&source, store_opts).unwrap();
    let counting = Arc::new(CountingStore::new(Arc::new(backend)));
    let faulty = Arc::new(FaultyStore::new(counting.clone()));
    let resilient = Arc::new(ResilientStore::new(faulty.clone(), store_opts));
    let bs = BlockingStore::new(resilient, 2).unwrap();
    let dataset = Dataset::from_store(bs, source.canonical())
        .unwrap()
        .with_part_size(store_opts.part_size);
    (faulty, counting, Arc::new(dataset))
}

fn quick_store() -> StoreOptions {
    StoreOptions {
        max_retries: 3,
        initial_backoff: Duration::from_millis(5),
        max_backoff: Duration::from_millis(20),
        ..Default::default()
    }
}

#[test]
fn a_reopened_cache_reuses_complete_shards_and_drops_partial_files() {
    let ds = fixtures().join("mds/merged");
    let tmp = tempfile::tempdir().unwrap();
    let (_f, counting, dataset) = instrumented(&ds, &quick_store());
    let n = dataset.index().shards().len();
    {
        let cache = ShardCache::open(dataset, opts(tmp.path())).unwrap();
        for s in 0..n {
            cache.get(s).unwrap();
        }
        assert_eq!(
            counting.total().gets,
            1 + n as u64,
            "index + each shard once"
        );
        // Plant the debris of a crash: a half-written temp file and a truncated shard.
        let victim = cache.shard_path(1).unwrap();
        let full = std::fs::read(&victim).unwrap();
        std::fs::write(&victim, &full[..full.len() / 2]).unwrap();
        std::fs::write(cache.dir().join("tmp/shard3.999.0.part"), b"partial").unwrap();
        std::fs::write(cache.dir().join("shards/not-a-shard.mds"), b"junk").unwrap();
    }
    let (_f, counting, dataset) = instrumented(&ds, &quick_store());
    let cache = ShardCache::open(dataset, opts(tmp.path())).unwrap();
    assert!(!cache.is_resident(1), "the truncated shard is not adopted");
    assert_eq!(cache.stats().resident_shards as usize, n - 1);
    assert!(!cache.dir().join("shards/not-a-shard.mds").exists());
    assert_eq!(
        std::fs::read_dir(cache.dir().join("tmp")).unwrap().count(),
        0
    );
    check_every_sample(&cache, &ds);
    assert_eq!(
        counting.for_key("0/shard.00001.mds").gets,
        1,
        "only the damaged shard is refetched"
    );
    assert_eq!(counting.total().gets, 2, "index.json + that shard");
}

#[test]
fn datasets_get_separate_folders_by_source_and_index_digest() {
    let tmp = tempfile::tempdir().unwrap();
    let a = Arc::new(
        Dataset::load(
            fixtures().join("mds/basic").to_str().unwrap(),
            &StoreOptions::default(),
        )
        .unwrap(),
    );
    let b = Arc::new(
        Dataset::load(
            fixtures().join("mds/edge").to_str().unwrap(),
            &StoreOptions::default(),
        )
        .unwrap(),
    );
    let a_id = a.id().clone();
    let ca = ShardCache::open(a, opts(tmp.path())).unwrap();
    let cb = ShardCache::open(b, opts(tmp.path())).unwrap();
    assert_ne!(ca.dir(), cb.dir());
    assert!(ca.dir().starts_with(tmp.path().join("v1")));
    let meta: serde_json::Value =
        serde_json::from_slice(&std::fs::read(ca.dir().join("dataset.json")).unwrap()).unwrap();
    assert_eq!(meta["source"], a_id.source);
    assert_eq!(meta["index_sha256"], a_id.index_sha256);
    // The same folder cannot be used by two caches at once.
    let again = Arc::new(
        Dataset::load(
            fixtures().join("mds/basic").to_str().unwrap(),
            &StoreOptions::default(),
        )
        .unwrap(),
    );
    let e = ShardCache::open(again, opts(tmp.path())).unwrap_err();
    assert!(e.to_string().contains("in use"), "{e}");
}

#[test]
fn the_budget_holds_pinned_shards_are_never_evicted_and_lru_chooses() {
    let ds = fixtures().join("mds/basic");
    let tmp = tempfile::tempdir().unwrap();
    let (_f, counting, dataset) = instrumented(&ds, &quick_store());
    let sizes: Vec<u64> = dataset
        .index()
        .shards()
        .iter()
        .map(|s| s.raw.bytes)
        .collect();
    let max = *sizes.iter().max().unwrap();
    let limit = max * 3;
    let cache = ShardCache::open(
        dataset,
        CacheOptions {
            cache_limit: Some(limit),
            ..opts(tmp.path())
        },
    )
    .unwrap();
    let pinned = cache.get(0).unwrap();
    for s in 1..sizes.len() {
        drop(cache.get(s).unwrap());
        let st = cache.stats();
        assert!(
            st.usage_bytes <= limit,
            "usage {} > limit {limit}",
            st.usage_bytes
        );
        assert!(
            cache.is_resident(0),
            "pinned shard 0 was evicted at step {s}"
        );
    }
    assert!(cache.stats().evictions >= (sizes.len() - 3) as u64);
    // LRU: after touching 9, filling 1 again evicts 8 (the older of the unpinned residents).
    assert!(cache.is_resident(9) && cache.is_resident(10));
    drop(cache.get(9).unwrap());
    counting.reset();
    drop(cache.get(1).unwrap());
    assert_eq!(counting.for_key("shard.00001.mds").gets, 1);
    assert!(cache.is_resident(9) && !cache.is_resident(10));
    // Reading through the pinned handle still works after all that churn.
    let h = pinned.header().unwrap();
    assert_eq!(
        pinned.sample(0).unwrap().len() as u64,
        h.sample_range(0).unwrap().end - h.sample_range(0).unwrap().start
    );
    drop(pinned);
    assert_eq!(cache.stats().pinned_shards, 0);
}

#[test]
fn a_budget_below_the_largest_shard_or_fully_pinned_is_a_clear_error() {
    let ds = fixtures().join("mds/basic");
    let tmp = tempfile::tempdir().unwrap();
    let dataset = Arc::new(Dataset::load(ds.to_str().unwrap(), &StoreOptions::default()).unwrap());
    let max = dataset
        .index()
        .shards()
        .iter()
        .map(|s| s.raw.bytes)
        .max()
        .unwrap();
    let e = ShardCache::open(
        dataset.clone(),
        CacheOptions {
            cache_limit: Some(max - 1),
            ..opts(tmp.path())
        },
    )
    .unwrap_err();
    assert!(matches!(e, CacheError::BudgetTooSmall { .. }), "{e:?}");
    assert!(e.to_string().contains(&format!("at least {max}")), "{e}");

    let cache = ShardCache::open(
        dataset,
        CacheOptions {
            cache_limit: Some(max + 10),
            pinned_wait: Duration::from_millis(300),
            ..opts(tmp.path())
        },
    )
    .unwrap();
    let pin = cache.get(0).unwrap();
    let started = std::time::Instant::now();
    let e = cache.get(1).unwrap_err();
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert!(matches!(e, CacheError::Full { .. }), "{e:?}");
    assert!(e.to_string().contains("pinned by open readers"), "{e}");
    // A reader that lets go in time makes room for the waiting read.
    let releaser = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(50));
        drop(pin);
    });
    cache.get(1).unwrap();
    releaser.join().unwrap();
    assert!(!cache.is_resident(0));
}

#[test]
fn concurrent_gets_of_one_shard_download_it_once() {
    let ds = fixtures().join("mds/encodings");
    let tmp = tempfile::tempdir().unwrap();
    let (faulty, counting, dataset) = instrumented(&ds, &quick_store());
    faulty.inject(
        Fault::Latency(Duration::from_millis(300)),
        Some("shard.00002.mds"),
        Some(1),
    );
    let cache = ShardCache::open(dataset, opts(tmp.path())).unwrap();
    let threads: Vec<_> = (0..8)
        .map(|_| {
            let c = cache.clone();
            std::thread::spawn(move || c.get(2).unwrap().read_at(0, 100).unwrap())
        })
        .collect();
    let first: Vec<_> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    assert!(first.windows(2).all(|w| w[0] == w[1]));
    assert_eq!(counting.for_key("shard.00002.mds").gets, 1);
    let st = cache.stats();
    assert_eq!(st.shards_fetched, 1);
    assert_eq!(st.disk_misses, 8);
    // The readahead's fetches are single-flighted with gets too.
    let fetch = readahead_fetch(&cache, 3);
    let h = cache.get(3).unwrap();
    assert!(!h.is_empty());
    assert!(fetch.join().unwrap().unwrap(), "the budget has room for it");
    assert_eq!(counting.for_key("shard.00003.mds").gets, 1);
}

/// What a fetch worker of the readahead does with a shard its plan wants: makes it resident
/// when there is room now, on a thread of its own. Returns that thread.
fn readahead_fetch(
    cache: &Arc<ShardCache>,
    shard: usize,
) -> std::thread::JoinHandle<Result<bool, CacheError>> {
    let cache = cache.clone();
    std::thread::spawn(move || cache.ensure_if_room(shard))
}

#[test]
fn a_read_that_waited_on_a_failed_prefetch_fetches_the_shard_again() {
    let ds = fixtures().join("mds/compressed-zstd");
    let tmp = tempfile::tempdir().unwrap();
    let (faulty, counting, dataset) = instrumented(&ds, &quick_store());
    let cache = ShardCache::open(dataset, opts(tmp.path())).unwrap();
    let key = "shard.00000.mds.zstd";
    // The prefetch's downloads are all corrupted (its whole verification budget), the first
    // one slowly, so the read below arrives while the prefetch is still in flight.
    faulty.inject(
        Fault::Latency(Duration::from_millis(500)),
        Some(key),
        Some(1),
    );
    let budget = CacheOptions::default().verify_attempts;
    faulty.inject(Fault::Corrupt, Some(key), Some(u64::from(budget)));
    let fetch = readahead_fetch(&cache, 0);
    let started = std::time::Instant::now();
    while faulty.fired() == 0 {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the prefetch never started"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let h = cache
        .get(0)
        .expect("a read fetches again when the fill it waited on failed");
    assert!(!h.is_empty());
    assert!(
        matches!(
            fetch.join().unwrap(),
            Err(CacheError::Shard(ShardFault::Corrupt { shard: 0, .. }))
        ),
        "the readahead's own fetch failed"
    );
    assert_eq!(counting.for_key(key).gets, u64::from(budget) + 1);
    let st = cache.stats();
    assert_eq!(
        (st.fill_failures, st.verify_failures, st.shards_fetched),
        (1, u64::from(budget), 1)
    );
    drop(h);
    // A read's own fill failing is still an error (the store keeps failing).
    faulty.inject(Fault::Corrupt, Some("shard.00001.mds.zstd"), None);
    assert!(matches!(
        cache.get(1),
        Err(CacheError::Shard(ShardFault::Corrupt { shard: 1, .. }))
    ));
}

#[test]
fn reads_wait_for_room_taken_by_slow_fills_and_prefetch_gives_up() {
    // Budget: the two largest shards. Every GET is slow, so fills overlap and the budget is
    // often fully reserved by downloads in progress: reads must wait, never fail.
    let ds = fixtures().join("mds/basic");
    let tmp = tempfile::tempdir().unwrap();
    let (faulty, counting, dataset) = instrumented(&ds, &quick_store());
    let sizes: Vec<u64> = dataset
        .index()
        .shards()
        .iter()
        .map(|s| s.raw.bytes)
        .collect();
    let mut by_size: Vec<usize> = (0..sizes.len()).collect();
    by_size.sort_by_key(|i| std::cmp::Reverse(sizes[*i]));
    let (a, b, c) = (by_size[0], by_size[1], by_size[2]);
    let limit = sizes[a] + sizes[b];
    let cache = ShardCache::open(
        dataset,
        CacheOptions {
            cache_limit: Some(limit),
            memory_limit: 0,
            ..opts(tmp.path())
        },
    )
    .unwrap();

    // While a and b fill (budget fully reserved), a prefetch-style ensure gives up at once.
    faulty.inject(Fault::Latency(Duration::from_millis(1500)), None, None);
    let slow: Vec<_> = [a, b]
        .into_iter()
        .map(|s| {
            let c = cache.clone();
            std::thread::spawn(move || c.ensure(s))
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    assert!(!cache.is_resident(a) && !cache.is_resident(b));
    assert!(!cache.ensure_if_room(c).unwrap(), "prefetch must not wait");
    assert!(!cache.is_resident(c));
    for t in slow {
        t.join().unwrap().unwrap();
    }

    // Now many readers of different shards at once, each GET slow.
    faulty.clear();
    faulty.inject(Fault::Latency(Duration::from_millis(200)), None, None);
    for s in [a, b] {
        assert!(cache.evict(s));
    }
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watcher = {
        let (cache, done) = (cache.clone(), done.clone());
        std::thread::spawn(move || {
            let mut max = 0;
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                max = max.max(cache.stats().usage_bytes);
                std::thread::sleep(Duration::from_millis(2));
            }
            max
        })
    };
    let readers: Vec<_> = (0..sizes.len())
        .map(|s| {
            let cache = cache.clone();
            let raw =
                std::fs::read(ds.join(&cache.dataset().index().shards()[s].raw.basename)).unwrap();
            std::thread::spawn(move || {
                let h = cache.get(s)?;
                let got = h.read_at(0, raw.len())?;
                assert_eq!(&got[..], &raw[..], "shard {s}");
                Ok::<_, CacheError>(())
            })
        })
        .collect();
    for (s, t) in readers.into_iter().enumerate() {
        t.join().unwrap().unwrap_or_else(|e| panic!("get {s}: {e}"));
    }
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    let max_usage = watcher.join().unwrap();
    assert!(max_usage <= limit, "usage {max_usage} > limit {limit}");
    let st = cache.stats();
    assert!(st.usage_bytes <= limit);
    assert_eq!(st.fill_failures, 0);
    assert_eq!(st.pinned_shards, 0);
    // One download per shard (a and b twice: evicted above), none of c before.
    for (s, shard) in cache.dataset().index().shards().iter().enumerate() {
        let want = if s == a || s == b { 2 } else { 1 };
        assert_eq!(
            counting.for_key(&shard.raw.basename).gets,
            want,
            "shard {s}"
        );
    }
}

#[test]
fn reopening_with_a_smaller_budget_evicts_only_down_to_it() {
    let ds = fixtures().join("mds/basic");
    let tmp = tempfile::tempdir().unwrap();
    let load = || Arc::new(Dataset::load(ds.to_str().unwrap(), &StoreOptions::default()).unwrap());
    let sizes: Vec<u64> = load()
        .index()
        .shards()
        .iter()
        .map(|s| s.raw.bytes)
        .collect();
    let (total, max) = (sizes.iter().sum::<u64>(), *sizes.iter().max().unwrap());
    {
        let cache = ShardCache::open(load(), opts(tmp.path())).unwrap();
        for s in 0..sizes.len() {
            cache.ensure(s).unwrap();
        }
        assert_eq!(cache.stats().usage_bytes, total);
    }
    let limit = total / 2;
    assert!(limit > max, "fixture needs more shards for this test");
    let cache = ShardCache::open(
        load(),
        CacheOptions {
            cache_limit: Some(limit),
            ..opts(tmp.path())
        },
    )
    .unwrap();
    let st = cache.stats();
    assert!(st.usage_bytes <= limit, "{} > {limit}", st.usage_bytes);
    // Evicting stops as soon as it fits: one more shard would not have fitted.
    assert!(
        st.usage_bytes + max > limit,
        "evicted too much: {} of {limit} kept",
        st.usage_bytes
    );
    let on_disk: u64 = (0..sizes.len())
        .filter(|s| cache.shard_path(*s).unwrap().exists())
        .map(|s| sizes[s])
        .sum();
    assert_eq!(on_disk, st.usage_bytes);
}

#[test]
fn corrupt_or_short_downloads_never_enter_the_cache() {
    let ds = fixtures().join("mds/compressed-zstd");
    let tmp = tempfile::tempdir().unwrap();
    let (faulty, counting, dataset) = instrumented(&ds, &quick_store());
    let cache = ShardCache::open(dataset, opts(tmp.path())).unwrap();
    // One corrupted and one truncated download: both rejected, the third is good.
    faulty.inject(Fault::Corrupt, Some("shard.00000.mds.zstd"), Some(1));
    faulty.inject(Fault::Truncate, Some("shard.00000.mds.zstd"), Some(1));
    check_every_sample(&cache, &ds);
    assert_eq!(counting.for_key("shard.00000.mds.zstd").gets, 3);
    assert_eq!(cache.stats().verify_failures, 2);
    // Persistent corruption: a typed error naming the shard; nothing on disk.
    faulty.inject(Fault::Corrupt, Some("shard.00001.mds.zstd"), None);
    assert!(cache.evict(1));
    let e = cache.get(1).unwrap_err();
    assert!(
        matches!(e, CacheError::Shard(ShardFault::Corrupt { shard: 1, .. })),
        "{e:?}"
    );
    assert!(e.to_string().contains("shard.00001.mds.zstd"), "{e}");
    assert!(!cache.shard_path(1).unwrap().exists());
    assert_eq!(
        std::fs::read_dir(cache.dir().join("tmp")).unwrap().count(),
        0
    );
    // Persistent store failure: the store's typed error, surfaced to every waiter.
    faulty.clear();
    faulty.inject(Fault::SlowDown, Some("shard.00002.mds.zstd"), None);
    assert!(cache.evict(2));
    let e = cache.get(2).unwrap_err();
    assert!(matches!(e, CacheError::Store(_)), "{e:?}");
    assert!(
        e.to_string().contains("throttled") && e.to_string().contains("shard.00002.mds.zstd"),
        "{e}"
    );
    assert!(cache.stats().fill_failures >= 2);
}

#[test]
fn headers_of_uncompressed_remote_shards_cost_two_ranged_gets_at_once() {
    let tmp = tempfile::tempdir().unwrap();
    let (_f, counting, dataset) = instrumented(&fixtures().join("mds/basic"), &quick_store());
    let cache = ShardCache::open(dataset.clone(), opts(tmp.path())).unwrap();
    let h = cache.header(4).unwrap();
    assert_eq!(h.num_samples(), dataset.index().shards()[4].samples);
    // Read twice and compared (no checksum covers a range).
    let c = counting.for_key("shard.00004.mds");
    assert_eq!((c.range_gets, c.gets), (2, 0));
    assert_eq!(c.bytes, 2 * mds::header_len(h.num_samples()));
    // Cached in memory: no more requests.
    cache.header(4).unwrap();
    assert_eq!(counting.for_key("shard.00004.mds").requests(), 2);
    // A sample without filling: two more ranged GETs (at once, compared) of exactly its bytes.
    let s = cache.sample_direct(4, 3).unwrap();
    let r = h.sample_range(3).unwrap();
    assert_eq!(s.len() as u64, r.end - r.start);
    let c = counting.for_key("shard.00004.mds");
    assert_eq!((c.range_gets, c.gets), (4, 0));
    assert_eq!(
        c.bytes,
        2 * mds::header_len(h.num_samples()) + 2 * (r.end - r.start)
    );
    assert!(!cache.is_resident(4));
    // Compressed shards are fetched whole.
    let (_f, counting, dataset) =
        instrumented(&fixtures().join("mds/compressed-gz"), &quick_store());
    let cache = ShardCache::open(dataset, opts(tmp.path())).unwrap();
    cache.header(2).unwrap();
    let c = counting.for_key("shard.00002.mds.gz");
    assert_eq!((c.range_gets, c.gets), (0, 1));
    assert!(cache.is_resident(2));
}

#[test]
fn sizes_of_samples_whose_shard_is_on_its_way_wait_for_it_instead_of_ranged_gets() {
    // A `stat` of a file whose shard the readahead is already downloading: ranged GETs
    // beside that download would fetch the same bytes twice (egress over 1.0x).
    let tmp = tempfile::tempdir().unwrap();
    let ds = fixtures().join("mds/basic");
    let (faulty, counting, dataset) = instrumented(&ds, &quick_store());
    let cache = ShardCache::open(dataset, opts(tmp.path())).unwrap();
    for shard in [4usize, 5] {
        let key = format!("shard.{shard:05}.mds");
        faulty.inject(
            Fault::Latency(Duration::from_millis(800)),
            Some(&key),
            Some(1),
        );
        let fired = faulty.fired();
        let fetch = readahead_fetch(&cache, shard);
        let started = std::time::Instant::now();
        while faulty.fired() == fired {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "the prefetch never started"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        // Shard 4 is sized by a sample, shard 5 by its header, both from the download.
        if shard == 4 {
            let sized = cache.sample_direct(shard, 3).unwrap();
            assert_eq!(sized, cache.get(shard).unwrap().sample(3).unwrap());
        } else {
            let h = cache.header(shard).unwrap();
            assert_eq!(
                h.num_samples(),
                cache.dataset().index().shards()[shard].samples
            );
        }
        let c = counting.for_key(&key);
        assert_eq!(
            (c.range_gets, c.gets),
            (0, 1),
            "shard {shard}: one download, no ranged reads beside it"
        );
        assert!(fetch.join().unwrap().unwrap());
    }
}

/// An uncompressed dataset whose samples have one variable-size `bytes` column (`image`)
/// beside a fixed-size `int` (`label`), as image datasets usually are, in shards of ~4 KB.
fn image_dataset(into: &Path) -> std::path::PathBuf {
    let mut writer = mds::Writer::new(mds::WriterConfig {
        columns: vec![
            ("image".into(), "bytes".parse().unwrap()),
            ("label".into(), "int".parse().unwrap()),
        ],
        compression: None,
        hashes: vec![],
        size_limit: Some(4096),
    })
    .unwrap();
    for i in 0..40u32 {
        let image: Vec<u8> = (0..(100 + 37 * i)).map(|b| (b % 251) as u8).collect();
        let label = (i64::from(i) * 7919).to_le_bytes();
        writer.write(&[&image, &label]).unwrap();
    }
    let ds = writer.finish().unwrap();
    let dir = into.join("images");
    std::fs::create_dir_all(&dir).unwrap();
    for f in &ds.files {
        std::fs::write(dir.join(&f.basename), &f.data).unwrap();
    }
    std::fs::write(dir.join("index.json"), &ds.index_json).unwrap();
    dir
}

#[test]
fn sizes_of_a_sole_variable_bytes_column_come_from_the_shard_header_alone() {
    use shardfs::vfs::{CachedShards, MdsDataset, SampleSource};
    let tmp = tempfile::tempdir().unwrap();
    let ds = image_dataset(tmp.path());
    let (_f, counting, dataset) = instrumented(&ds, &quick_store());
    let index = dataset.index().clone();
    assert!(index.shards().len() >= 3, "several shards");
    let per_shard: Vec<u32> = index.shards().iter().map(|s| s.samples).collect();
    let cache = ShardCache::open(dataset, opts(&tmp.path().join("cache"))).unwrap();
    let vfs = MdsDataset::new(vec![(index, Arc::new(CachedShards(cache.clone())))]);
    // Every image of shard 1, before the shard is read: one ranged GET (its header) in all.
    let first: u64 = u64::from(per_shard[0]);
    let images: Vec<u64> = (first..first + u64::from(per_shard[1]))
        .map(|s| vfs.file_size(&vfs.locate(s).unwrap(), 0).unwrap())
        .collect();
    let c = counting.for_key("shard.00001.mds");
    assert_eq!(
        (c.range_gets, c.gets),
        (2, 0),
        "the header alone (read twice) sizes every image of the shard"
    );
    assert!(!cache.is_resident(1));
    // A label's text depends on its value: its size needs the sample's bytes (read twice).
    let label = vfs.file_size(&vfs.locate(first).unwrap(), 1).unwrap();
    assert_eq!(counting.for_key("shard.00001.mds").range_gets, 4);
    // The sizes are those of the verified files.
    for (k, size) in images.iter().enumerate() {
        let s = first + k as u64;
        let whole = read_whole(&vfs, s, 0);
        assert_eq!(whole.len() as u64, *size, "image of sample {s}");
        assert_eq!(whole.len(), 100 + 37 * s as usize, "image of sample {s}");
    }
    assert_eq!(read_whole(&vfs, first, 1).len() as u64, label);
}

/// All of column `column` of `sample`, read through the vfs's source.
fn read_whole(vfs: &shardfs::vfs::MdsDataset, sample: u64, column: u32) -> bytes::Bytes {
    use shardfs::vfs::{ColumnRead, SampleSource};
    let r = ColumnRead {
        at: vfs.locate(sample).unwrap(),
        column,
        offset: 0,
        size: u32::MAX,
    };
    vfs.read(r).unwrap()
}

#[test]
fn a_shard_header_damaged_in_one_of_its_two_ranged_reads_is_outvoted_by_a_third() {
    use shardfs::vfs::{CachedShards, MdsDataset, SampleSource};
    let tmp = tempfile::tempdir().unwrap();
    let ds = image_dataset(tmp.path());
    let (faulty, counting, dataset) = instrumented(&ds, &quick_store());
    let index = dataset.index().clone();
    let per_shard: Vec<u32> = index.shards().iter().map(|s| s.samples).collect();
    let cache = ShardCache::open(dataset, opts(&tmp.path().join("cache"))).unwrap();
    let vfs = MdsDataset::new(vec![(index, Arc::new(CachedShards(cache.clone())))]);
    // One of the two concurrent header reads of shard 1 is damaged: a third one decides.
    faulty.inject(Fault::Corrupt, Some("shard.00001.mds"), Some(1));
    let first = u64::from(per_shard[0]);
    for s in first..first + u64::from(per_shard[1]) {
        assert_eq!(
            vfs.file_size(&vfs.locate(s).unwrap(), 0).unwrap(),
            100 + 37 * s,
            "image of sample {s}"
        );
    }
    assert_eq!(counting.for_key("shard.00001.mds").range_gets, 3);
    // Both reads damaged alike (the same byte flipped) cannot be told from clean ones by
    // comparing; the structural checks still apply (here the flipped byte lies past the
    // sample-count field, in an offset, so it is caught only if it breaks their order). The
    // verified bytes read afterwards are never affected:
    let s = first + u64::from(per_shard[1]);
    let whole = read_whole(&vfs, s, 0);
    assert_eq!(whole.len() as u64, 100 + 37 * s);
}

#[test]
fn bytes_from_ranged_reads_answer_sizes_but_never_reads() {
    // Ranged GETs are not hash-checked: a corrupted ranged sample may size a file before the
    // shard is downloaded, but reading it must return the verified shard's bytes.
    let tmp = tempfile::tempdir().unwrap();
    let ds = fixtures().join("mds/basic");
    let (faulty, counting, dataset) = instrumented(&ds, &quick_store());
    let cache = ShardCache::open(dataset, opts(tmp.path())).unwrap();
    cache.header(4).unwrap();
    // A sample's ranged bytes are read twice at once; one damaged read is outvoted by a
    // third.
    faulty.inject(Fault::Corrupt, Some("shard.00004.mds"), Some(1));
    let outvoted = cache.sample_direct(4, 3).unwrap();
    assert_eq!(counting.for_key("shard.00004.mds").range_gets, 2 + 3);
    // Both reads damaged alike (the same byte flipped) look clean to the comparison.
    faulty.inject(Fault::Corrupt, Some("shard.00004.mds"), Some(2));
    let damaged = cache.sample_direct(4, 2).unwrap();
    assert_eq!(counting.for_key("shard.00004.mds").range_gets, 2 + 3 + 2);
    let good = cache.get(4).unwrap().sample(2).unwrap();
    assert_ne!(damaged, good, "the fault did not damage the ranged reads");
    assert_eq!(outvoted, cache.sample(4, 3).unwrap());
    assert_eq!(good, cache.sample(4, 2).unwrap());
    let index = cache.dataset().index().clone();
    let global: u64 = index.shards()[..4]
        .iter()
        .map(|s| u64::from(s.samples))
        .sum::<u64>()
        + 2;
    let want = &expected_samples(&ds, index.columns())[global as usize];
    let cols = mds::split_sample(&index.shards()[4].columns, &good).unwrap();
    for (c, r) in cols.into_iter().enumerate() {
        assert_eq!(&good[r], &want[c][..], "column {c}");
    }
    // Once the shard is resident, sizes come from the verified bytes too.
    assert_eq!(cache.sample_direct(4, 2).unwrap(), good);
}

#[test]
fn a_stalled_download_does_not_hold_up_other_shards() {
    let tmp = tempfile::tempdir().unwrap();
    let (faulty, _counting, dataset) =
        instrumented(&fixtures().join("mds/compressed-zstd"), &quick_store());
    let cache = ShardCache::open(dataset, opts(tmp.path())).unwrap();
    faulty.inject(
        Fault::Latency(Duration::from_secs(3)),
        Some("shard.00000.mds.zstd"),
        Some(1),
    );
    let stalled = {
        let cache = cache.clone();
        std::thread::spawn(move || cache.get(0).map(|h| h.sample(0).unwrap().len()))
    };
    std::thread::sleep(Duration::from_millis(100));
    // Other shards are fetched and read while shard 0's download hangs.
    for shard in 1..4 {
        cache.get(shard).unwrap().sample(0).unwrap();
    }
    assert!(
        !stalled.is_finished(),
        "the stalled download ended too early to prove anything"
    );
    assert!(stalled.join().unwrap().unwrap() > 0);
}

/// A cache over `basic` in ranged parts whose download budget is one shard's buffer (the
/// shards are 26-27 KB, each downloaded into a buffer of 28 KiB) and whose memory tier's
/// share, as large, is what downloads may borrow; shards 0 and 1 downloaded at once, so
/// shard 1's download borrowed and both buffers are kept: one past the budget, lent.
fn cache_keeping_a_borrowed_buffer(dir: &Path) -> (Arc<ShardCache>, u64) {
    // Downloaded in ranged parts (only those come into download buffers).
    let store = StoreOptions {
        part_size: 16 << 10,
        ..quick_store()
    };
    let (faulty, _counting, dataset) = instrumented(&fixtures().join("mds/basic"), &store);
    let share: u64 = 28 << 10;
    let cache = ShardCache::open(
        dataset,
        CacheOptions {
            memory_limit: share,
            download_memory: share,
            download_loan: share,
            ..opts(dir)
        },
    )
    .unwrap();
    faulty.inject(
        Fault::Latency(Duration::from_secs(4)),
        Some("shard.00000.mds"),
        Some(1),
    );
    let slow = {
        let cache = cache.clone();
        std::thread::spawn(move || cache.get(0).map(|_| ()))
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while cache.stats().downloading_bytes == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "shard 0's download never started"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    // While shard 0's download holds the budget, shard 1's borrows the tier's share.
    cache.get(1).unwrap();
    assert!(
        !slow.is_finished(),
        "shard 0's download ended too early to prove anything"
    );
    slow.join().unwrap().unwrap();
    let st = cache.stats();
    assert_eq!(
        (st.download_buffers_made, st.download_buffers_reused),
        (2, 0)
    );
    assert_eq!(st.idle_download_buffer_bytes, 2 * share);
    (cache, share)
}

/// Reads a sample twice with `read` from a cache keeping a buffer past its download budget:
/// the first read frees that buffer (the tier's share comes back before the sample goes in),
/// and the second is a memory hit.
fn a_read_takes_the_tier_s_share_back(read: impl Fn(&Arc<ShardCache>) -> bytes::Bytes) {
    let tmp = tempfile::tempdir().unwrap();
    let (cache, share) = cache_keeping_a_borrowed_buffer(tmp.path());
    let a = read(&cache);
    assert_eq!(cache.stats().idle_download_buffer_bytes, share);
    let hits = cache.stats().memory_hits;
    assert_eq!(read(&cache), a);
    assert_eq!(cache.stats().memory_hits, hits + 1);
}

#[test]
fn download_buffers_kept_past_the_budget_go_back_when_a_ranged_read_needs_the_tier() {
    // A sample read with ranged GETs goes into the tier only if it has room.
    a_read_takes_the_tier_s_share_back(|cache| cache.sample_direct(2, 0).unwrap());
}

#[test]
fn download_buffers_kept_past_the_budget_go_back_when_a_disk_read_goes_into_the_tier() {
    // A sample read from the cache disk goes into the tier whatever room it has.
    a_read_takes_the_tier_s_share_back(|cache| cache.sample(1, 0).unwrap());
}

#[test]
fn the_memory_tier_serves_repeated_samples() {
    let tmp = tempfile::tempdir().unwrap();
    let dataset = Arc::new(
        Dataset::load(
            fixtures().join("mds/basic").to_str().unwrap(),
            &StoreOptions::default(),
        )
        .unwrap(),
    );
    let cache = ShardCache::open(dataset, opts(tmp.path())).unwrap();
    let a = cache.sample(2, 5).unwrap();
    let hits = cache.stats().memory_hits;
    // Evict the disk copy: the memory tier still answers.
    assert!(cache.evict(2));
    let b = cache.sample(2, 5).unwrap();
    assert_eq!(a, b);
    assert_eq!(cache.stats().memory_hits, hits + 1);
    assert!(!cache.is_resident(2));
}

/// A policy that evicts the highest shard number: shows custom policies are consulted
/// with only unpinned candidates.
#[derive(Debug, Default)]
struct HighestFirst(std::sync::Mutex<Vec<(Vec<usize>, Vec<usize>)>>);

impl EvictionPolicy for HighestFirst {
    fn choose_victim(&self, ctx: &EvictionContext<'_>) -> Option<usize> {
        let mut c: Vec<usize> = ctx.candidates.iter().map(|c: &Candidate| c.shard).collect();
        c.sort();
        self.0
            .lock()
            .unwrap()
            .push((c.clone(), ctx.pinned.to_vec()));
        c.last().copied()
    }
}

#[test]
fn custom_eviction_policies_choose_among_unpinned_shards() {
    let tmp = tempfile::tempdir().unwrap();
    let dataset = Arc::new(
        Dataset::load(
            fixtures().join("mds/basic").to_str().unwrap(),
            &StoreOptions::default(),
        )
        .unwrap(),
    );
    let max = dataset
        .index()
        .shards()
        .iter()
        .map(|s| s.raw.bytes)
        .max()
        .unwrap();
    let policy = Arc::new(HighestFirst::default());
    let cache = ShardCache::open_with_policy(
        dataset,
        CacheOptions {
            cache_limit: Some(max * 3),
            ..opts(tmp.path())
        },
        policy.clone(),
    )
    .unwrap();
    let _pin = cache.get(5).unwrap();
    drop(cache.get(1).unwrap());
    drop(cache.get(2).unwrap());
    drop(cache.get(3).unwrap());
    let calls = policy.0.lock().unwrap().clone();
    assert_eq!(calls[0], (vec![1, 2], vec![5]));
    assert!(
        cache.is_resident(1)
            && !cache.is_resident(2)
            && cache.is_resident(3)
            && cache.is_resident(5)
    );
}

mod crash {
    //! `kill -9` in the middle of a download: the next run keeps every complete shard and
    //! refetches only the interrupted one. The child is this test binary re-run on the same
    //! test with `SHARDFS_CRASH_*` set: it then fills a cache from the parent's in-process S3
    //! server instead of playing the parent.
    use super::*;
    use shardfs_testkit::s3::{FakeS3, ServerFault, ACCESS_KEY, SECRET_KEY};
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};

    fn options(endpoint: &str) -> StoreOptions {
        let mut o = s3_options(endpoint);
        o.credentials = Some(store::StaticCredentials {
            access_key_id: ACCESS_KEY.into(),
            secret_access_key: SECRET_KEY.into(),
            session_token: None,
        });
        o
    }

    /// The child's half: fills the cache shard by shard, printing each completed shard, until
    /// the parent kills it.
    fn child_fills_the_cache(endpoint: &str, dir: &str) {
        let dataset = Arc::new(Dataset::load("s3://bkt/basic", &options(endpoint)).unwrap());
        let cache = ShardCache::open(dataset, opts(Path::new(dir))).unwrap();
        for s in 0..cache.dataset().index().shards().len() {
            cache.get(s).unwrap();
            println!("filled {s}");
        }
    }

    #[test]
    fn a_killed_fill_is_refetched_and_complete_shards_are_kept() {
        // Re-run by itself as the child process (see the module note).
        if let (Ok(endpoint), Ok(dir)) = (
            std::env::var("SHARDFS_CRASH_ENDPOINT"),
            std::env::var("SHARDFS_CRASH_CACHE"),
        ) {
            child_fills_the_cache(&endpoint, &dir);
            return;
        }
        let server = FakeS3::start();
        let ds = fixtures().join("mds/basic");
        server.put_dir("bkt", "basic", &ds);
        // Shard 3 crawls at 2 KiB/s (~13 s for its 27 KB), so the child is surely mid-download.
        server.inject(
            ServerFault::Bandwidth(2048),
            Some("basic/shard.00003.mds"),
            None,
        );
        let tmp = tempfile::tempdir().unwrap();
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "cache::crash::a_killed_fill_is_refetched_and_complete_shards_are_kept",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("SHARDFS_CRASH_ENDPOINT", &server.endpoint)
            .env("SHARDFS_CRASH_CACHE", tmp.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        // The test harness prints its own lines around ours; wait for "filled 2".
        let mut filled = Vec::new();
        while filled.len() < 3 {
            let line = lines.next().expect("child ended early").unwrap();
            if let Some(pos) = line.find("filled ") {
                filled.push(line[pos + 7..].trim().to_string());
            }
        }
        assert_eq!(filled, ["0", "1", "2"]);
        // Wait until the body of shard 3 is streaming, then kill -9.
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while server.seen("basic/shard.00003.mds").gets == 0 {
            assert!(
                std::time::Instant::now() < deadline,
                "child never requested shard 3"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        std::thread::sleep(Duration::from_millis(300));
        // SAFETY: kill(2) on the pid of a child we spawned and have not reaped.
        assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGKILL) }, 0);
        let status = child.wait().unwrap();
        assert!(!status.success());

        // The next run: shards 0..3 are adopted, shard 3 is fetched again, once.
        server.clear_faults();
        let dataset =
            Arc::new(Dataset::load("s3://bkt/basic", &options(&server.endpoint)).unwrap());
        let cache = ShardCache::open(dataset, opts(tmp.path())).unwrap();
        let n = cache.dataset().index().shards().len();
        assert_eq!(cache.stats().resident_shards, 3);
        check_every_sample(&cache, &ds);
        for s in 0..n {
            let gets = server.seen(&format!("basic/shard.{s:05}.mds")).gets;
            let want = if s == 3 { 2 } else { 1 };
            assert_eq!(gets, want, "shard {s}: whole-object GETs over both runs");
        }
        assert_eq!(cache.stats().shards_fetched as usize, n - 3);
    }
}

mod model {
    //! Reference-model test: random gets (held or dropped), releases, evictions and sample
    //! reads applied to a real cache and to a tiny model (a map, a budget, an LRU clock);
    //! after every step the resident set, usage, pins, files on disk and bytes must agree.
    use super::*;
    use proptest::prelude::*;
    use std::collections::{BTreeMap, BTreeSet};

    #[derive(Debug, Clone)]
    enum Op {
        Get { shard: usize, hold: bool },
        Release(usize),
        Evict(usize),
        Sample { shard: usize, i: u32 },
    }

    fn op(shards: usize) -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (0..shards, any::<bool>()).prop_map(|(shard, hold)| Op::Get { shard, hold }),
            2 => (0..8usize).prop_map(Op::Release),
            1 => (0..shards).prop_map(Op::Evict),
            2 => (0..shards, 0..200u32).prop_map(|(shard, i)| Op::Sample { shard, i }),
        ]
    }

    #[derive(Default)]
    struct Model {
        resident: BTreeMap<usize, u64>, // shard -> last use
        clock: u64,
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]
        #[test]
        fn the_cache_matches_a_map_with_a_budget(ops in proptest::collection::vec(op(11), 1..40), budget in 2u64..5) {
            let ds = fixtures().join("mds/basic");
            let tmp = tempfile::tempdir().unwrap();
            let dataset = Arc::new(Dataset::load(ds.to_str().unwrap(), &StoreOptions::default()).unwrap());
            let index = dataset.index().clone();
            let sizes: Vec<u64> = index.shards().iter().map(|s| s.raw.bytes).collect();
            let limit = sizes.iter().max().unwrap() * budget;
            let cache = ShardCache::open(dataset, CacheOptions { cache_limit: Some(limit), memory_limit: 0, pinned_wait: Duration::ZERO, ..opts(tmp.path()) }).unwrap();
            let mut model = Model::default();
            let mut held: Vec<shardfs::cache::ShardHandle> = Vec::new();
            for op in ops {
                let pinned: BTreeSet<usize> = held.iter().map(|h| h.shard()).collect();
                match op {
                    Op::Get { shard, hold } => {
                        model.clock += 1;
                        let expect_ok = if model.resident.contains_key(&shard) {
                            true
                        } else {
                            // Evict LRU unpinned shards until it fits, as the cache must.
                            let usage = |m: &Model| m.resident.keys().map(|s| sizes[*s]).sum::<u64>();
                            while usage(&model) + sizes[shard] > limit {
                                let victim = model.resident.iter().filter(|(s, _)| !pinned.contains(s)).min_by_key(|(s, t)| (**t, **s)).map(|(s, _)| *s);
                                match victim {
                                    Some(v) => { model.resident.remove(&v); }
                                    None => break,
                                }
                            }
                            usage(&model) + sizes[shard] <= limit
                        };
                        let got = cache.get(shard);
                        prop_assert_eq!(got.is_ok(), expect_ok, "get {} -> {:?}", shard, got.as_ref().err());
                        if let Ok(h) = got {
                            model.resident.insert(shard, model.clock);
                            if hold { held.push(h); }
                        } else {
                            let full = matches!(got, Err(CacheError::Full { .. }));
                            prop_assert!(full, "expected a Full error");
                        }
                    }
                    Op::Release(k) => {
                        if !held.is_empty() {
                            let k = k % held.len();
                            held.swap_remove(k);
                        }
                    }
                    Op::Evict(shard) => {
                        let expect = model.resident.contains_key(&shard) && !pinned.contains(&shard);
                        prop_assert_eq!(cache.evict(shard), expect);
                        if expect { model.resident.remove(&shard); }
                    }
                    Op::Sample { shard, i } => {
                        if let Some(h) = held.iter().find(|h| h.shard() == shard) {
                            let n = index.shards()[shard].samples;
                            let raw = std::fs::read(ds.join(&index.shards()[shard].raw.basename)).unwrap();
                            let header = mds::ShardHeader::parse(&raw).unwrap();
                            match h.sample(i) {
                                Ok(b) => {
                                    let r = header.sample_range(i).unwrap();
                                    prop_assert_eq!(&b[..], &raw[r.start as usize..r.end as usize]);
                                }
                                Err(e) => prop_assert!(i >= n, "sample {} of {}: {}", i, n, e),
                            }
                        }
                    }
                }
                // Invariants after every step.
                let st = cache.stats();
                let want: BTreeSet<usize> = model.resident.keys().copied().collect();
                let have: BTreeSet<usize> = (0..sizes.len()).filter(|s| cache.is_resident(*s)).collect();
                prop_assert_eq!(&have, &want);
                prop_assert_eq!(st.usage_bytes, want.iter().map(|s| sizes[*s]).sum::<u64>());
                prop_assert!(st.usage_bytes <= limit);
                for s in 0..sizes.len() {
                    let p = cache.shard_path(s).unwrap();
                    prop_assert_eq!(p.exists(), want.contains(&s), "file of shard {}", s);
                }
                for h in &held {
                    prop_assert!(want.contains(&h.shard()), "pinned shard {} was evicted", h.shard());
                }
                let pinned_now: BTreeSet<usize> = held.iter().map(|h| h.shard()).collect();
                prop_assert_eq!(st.pinned_shards as usize, pinned_now.len());
            }
        }
    }
}

/// A copy of fixture `name` as MDSWriter writes it by default (`hashes=[]`): no hash in
/// index.json, so only the store's own checksum can catch a damaged transfer.
fn hashless_copy(name: &str, into: &Path) -> std::path::PathBuf {
    let from = fixtures().join("mds").join(name);
    let to = into.join(format!("{name}-hashless"));
    std::fs::create_dir_all(&to).unwrap();
    for e in std::fs::read_dir(&from).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
    }
    let mut index: serde_json::Value =
        serde_json::from_slice(&std::fs::read(to.join("index.json")).unwrap()).unwrap();
    strip_hashes(&mut index);
    std::fs::write(to.join("index.json"), serde_json::to_vec(&index).unwrap()).unwrap();
    to
}

#[test]
fn a_corrupted_s3_download_of_a_hashless_dataset_is_caught_by_the_etag_md5() {
    let moto = crate::common::moto::moto();
    moto.upload_dir(
        "cache-tests",
        "hashless/basic",
        &fixtures().join("mds/basic"),
    );
    let store_opts = crate::common::moto::s3_options(&moto.endpoint);
    a_damaged_download_of_a_hashless_dataset_is_caught(
        "s3://cache-tests/hashless/basic",
        &store_opts,
        "ETag",
    );
}

#[test]
fn etags_stand_for_an_md5_only_when_they_look_like_one() {
    let md5 = store::etag_md5("\"9e107d9d372bb6826bd81d3542a419d6\"").unwrap();
    assert_eq!(hex::encode(md5), "9e107d9d372bb6826bd81d3542a419d6");
    assert!(store::etag_md5("W/\"9e107d9d372bb6826bd81d3542a419d6\"").is_some());
    // Multipart uploads, versions, and other stores' ETags are not an MD5.
    assert!(store::etag_md5("\"9e107d9d372bb6826bd81d3542a419d6-3\"").is_none());
    assert!(store::etag_md5("0x8DCF1C2B3A4E5F6").is_none());
    assert!(store::etag_md5("CJ2k8f2Q8oMDEAE=").is_none());
}

#[test]
fn etags_that_are_not_md5s_cost_a_second_download_not_an_error() {
    let tmp = tempfile::tempdir().unwrap();
    let ds = hashless_copy("basic", tmp.path());
    let source = store::Source::parse(ds.to_str().unwrap()).unwrap();
    let backend = store::ObjectStoreBackend::open(&source, &quick_store()).unwrap();
    let counting = Arc::new(CountingStore::new(Arc::new(backend)));
    // ETags that look like MD5s but are not (as with SSE-KMS or SSE-C objects).
    let kms = Arc::new(Rewrite::new(counting.clone(), |key, range, mut f| {
        if range.is_none() && key.as_str() != "index.json" {
            f.md5 = Some([0xab; 16]);
        }
        f
    }));
    let bs = BlockingStore::new(kms, 2).unwrap();
    let dataset = Arc::new(Dataset::from_store(bs, source.canonical()).unwrap());
    let cache = ShardCache::open(dataset, opts(&tmp.path().join("cache"))).unwrap();
    check_every_sample(&cache, &ds);
    assert_eq!(
        counting.for_key("shard.00000.mds").gets,
        2,
        "two agreeing downloads"
    );
}

/// Flips one byte in the middle of `path`, keeping its size.
fn flip_a_byte(path: &Path) {
    let mut data = std::fs::read(path).unwrap();
    let mid = data.len() / 2;
    data[mid] ^= 0x01;
    std::fs::write(path, data).unwrap();
}

#[test]
fn cached_shards_that_rot_on_disk_are_caught_by_their_checksum_and_refetched() {
    let ds = fixtures().join("mds/basic");
    let tmp = tempfile::tempdir().unwrap();
    let n;
    {
        let (_f, _counting, dataset) = instrumented(&ds, &quick_store());
        n = dataset.index().shards().len();
        let cache = ShardCache::open(dataset, opts(tmp.path())).unwrap();
        for s in 0..n {
            cache.get(s).unwrap();
        }
        // Between two mounts: one bit flipped in shard 2, and shard 3's checksum lost.
        flip_a_byte(&cache.shard_path(2).unwrap());
        let sum = cache.dir().join("sums").join(format!(
            "{}.xxh3",
            cache.dataset().index().shards()[3].raw.basename
        ));
        std::fs::remove_file(sum).unwrap();
    }
    let (_f, counting, dataset) = instrumented(&ds, &quick_store());
    let cache = ShardCache::open(dataset, opts(tmp.path())).unwrap();
    assert!(
        !cache.is_resident(3),
        "a shard without its checksum is not adopted"
    );
    assert!(cache.is_resident(2), "adopted: checked on first use");
    check_every_sample(&cache, &ds);
    let key = |s: usize| cache.dataset().index().shards()[s].raw.basename.clone();
    assert_eq!(
        counting.for_key(&key(2)).gets,
        1,
        "the rotten shard is fetched again"
    );
    assert_eq!(counting.for_key(&key(3)).gets, 1);
    assert_eq!(
        counting.for_key(&key(0)).gets,
        0,
        "intact shards are reused"
    );
    assert_eq!(cache.stats().verify_failures, 1);
    // While open: a file changed under the cache is checked again on its next use (reads
    // through the memory tier never touch the file).
    flip_a_byte(&cache.shard_path(0).unwrap());
    let h = cache.get(0).unwrap();
    assert_eq!(
        h.read_at(0, h.len() as usize).unwrap(),
        std::fs::read(ds.join(key(0))).unwrap(),
    );
    drop(h);
    assert_eq!(counting.for_key(&key(0)).gets, 1);
    assert_eq!(cache.stats().verify_failures, 2);
}

#[test]
fn the_cache_is_private_and_never_follows_symlinks() {
    use std::os::unix::fs::PermissionsExt;
    let ds = fixtures().join("mds/basic");
    let tmp = tempfile::tempdir().unwrap();
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    let outside = tmp.path().join("outside.txt");
    std::fs::write(&outside, b"not the cache's").unwrap();
    {
        let (_f, _c, dataset) = instrumented(&ds, &quick_store());
        let cache = ShardCache::open(dataset, opts(&tmp.path().join("cache"))).unwrap();
        cache.get(0).unwrap();
        for dir in ["", "shards", "sums", "tmp"] {
            assert_eq!(mode(&cache.dir().join(dir)), 0o700, "{dir}");
        }
        assert_eq!(mode(&cache.shard_path(0).unwrap()), 0o600);
        // A symlink planted among the shards, named like one.
        let name = cache.dataset().index().shards()[1].raw.basename.clone();
        std::os::unix::fs::symlink(&outside, cache.dir().join("shards").join(&name)).unwrap();
    }
    let (_f, _c, dataset) = instrumented(&ds, &quick_store());
    let cache = ShardCache::open(dataset, opts(&tmp.path().join("cache"))).unwrap();
    assert!(!cache.is_resident(1), "a symlink is not adopted");
    assert!(!cache.shard_path(1).unwrap().exists());
    assert_eq!(std::fs::read(&outside).unwrap(), b"not the cache's");
    check_every_sample(&cache, &ds);
    // A cache folder that is itself a symlink is refused with a clear error.
    let dir = cache.dir().to_path_buf();
    drop(cache);
    let moved = tmp.path().join("moved");
    std::fs::rename(&dir, &moved).unwrap();
    std::os::unix::fs::symlink(&moved, &dir).unwrap();
    let (_f, _c, dataset) = instrumented(&ds, &quick_store());
    let e = ShardCache::open(dataset, opts(&tmp.path().join("cache"))).unwrap_err();
    assert!(e.to_string().contains("symlink"), "{e}");
}

#[test]
fn multipart_etags_check_the_bytes_for_the_usual_part_sizes() {
    use md5::Digest;
    assert_eq!(
        store::etag_multipart("\"9e107d9d372bb6826bd81d3542a419d6-3\""),
        Some((
            store::etag_md5("9e107d9d372bb6826bd81d3542a419d6").unwrap(),
            3
        ))
    );
    assert!(store::etag_multipart("9e107d9d372bb6826bd81d3542a419d6").is_none());
    assert!(store::etag_multipart("9e107d9d372bb6826bd81d3542a419d6-0").is_none());
    assert!(store::etag_multipart("zz-3").is_none());
    let data: Vec<u8> = (0..20u32 << 20).map(|i| (i % 251) as u8).collect();
    let etag = |part: usize| -> [u8; 16] {
        let mut outer = md5::Md5::new();
        for p in data.chunks(part) {
            outer.update(md5::Md5::digest(p));
        }
        outer.finalize().into()
    };
    let at8 = etag(8 << 20);
    assert_eq!(
        shardfs::fetch::multipart_part_size(&data, &at8, 3, 0),
        Some(8 << 20)
    );
    assert_eq!(
        shardfs::fetch::multipart_part_size(&data, &etag(5 << 20), 4, 0),
        Some(5 << 20)
    );
    let mut damaged = data.clone();
    damaged[12345] ^= 1;
    assert_eq!(
        shardfs::fetch::multipart_part_size(&damaged, &at8, 3, 0),
        None
    );
    // The wrong part count rules the size out.
    assert_eq!(shardfs::fetch::multipart_part_size(&data, &at8, 2, 0), None);
}

/// A store that reports each whole object's S3 multipart ETag (one part), as `aws s3 cp`
/// gives small objects uploaded with a forced multipart.
fn multipart_etags(inner: Arc<dyn store::Store>) -> Rewrite {
    Rewrite::new(inner, |_, range, mut f| {
        use md5::Digest;
        if range.is_none() {
            let inner = md5::Md5::digest(&f.bytes);
            f.md5 = None;
            f.multipart_md5 = Some((md5::Md5::digest(inner).into(), 1));
        }
        f
    })
}

#[test]
fn a_corrupted_download_is_caught_by_a_multipart_etag() {
    let tmp = tempfile::tempdir().unwrap();
    let ds = hashless_copy("basic", tmp.path());
    let source = store::Source::parse(ds.to_str().unwrap()).unwrap();
    let backend = store::ObjectStoreBackend::open(&source, &quick_store()).unwrap();
    let counting = Arc::new(CountingStore::new(Arc::new(backend)));
    let etags = Arc::new(multipart_etags(counting.clone()));
    let faulty = Arc::new(FaultyStore::new(etags));
    let bs = BlockingStore::new(faulty.clone(), 2).unwrap();
    let dataset = Arc::new(Dataset::from_store(bs, source.canonical()).unwrap());
    let cache = ShardCache::open(dataset, opts(&tmp.path().join("cache"))).unwrap();
    faulty.inject(Fault::Corrupt, Some("shard.00000.mds"), Some(1));
    check_every_sample(&cache, &ds);
    assert_eq!(counting.for_key("shard.00000.mds").gets, 2);
    assert_eq!(
        counting.for_key("shard.00001.mds").gets,
        1,
        "a clean download is checked once"
    );
    assert_eq!(cache.stats().verify_failures, 1);
    // Damaged every time: an error, nothing cached.
    faulty.inject(Fault::Corrupt, Some("shard.00002.mds"), None);
    assert!(cache.evict(2));
    let e = cache.get(2).unwrap_err();
    assert!(e.to_string().contains("multipart ETag"), "{e}");
}

/// `index.json` bytes with every hash removed, as MDSWriter writes them by default.
fn without_hashes(bytes: bytes::Bytes) -> bytes::Bytes {
    let mut index: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
    strip_hashes(&mut index);
    serde_json::to_vec(&index).unwrap().into()
}

/// Fixture `basic` on `source` served as a hashless dataset, with one shard's body damaged in
/// transit: the store's own checksum (ETag or checksum header; `what` names it in the error)
/// catches it.
fn a_damaged_download_of_a_hashless_dataset_is_caught(
    source: &str,
    store_opts: &StoreOptions,
    what: &str,
) {
    let ds = fixtures().join("mds/basic");
    let tmp = tempfile::tempdir().unwrap();
    let source = store::Source::parse(source).unwrap();
    let backend = store::ObjectStoreBackend::open(&source, store_opts).unwrap();
    // The store holds the fixture as it is: its index.json is served without hashes.
    let hashless = Arc::new(Rewrite::new(Arc::new(backend), |key, range, mut f| {
        if range.is_none() && key.as_str() == "index.json" {
            f.bytes = without_hashes(f.bytes);
        }
        f
    }));
    let counting = Arc::new(CountingStore::new(hashless));
    let faulty = Arc::new(FaultyStore::new(counting.clone()));
    let resilient = Arc::new(ResilientStore::new(faulty.clone(), store_opts));
    let bs = BlockingStore::new(resilient, 2).unwrap();
    let dataset = Arc::new(Dataset::from_store(bs, source.canonical()).unwrap());
    assert!(dataset.index().shards()[0].raw.hashes.is_empty());
    let cache = ShardCache::open(dataset, opts(&tmp.path().join("cache"))).unwrap();
    // One flipped byte (headers intact): the checksum differs, the shard is fetched again.
    faulty.inject(Fault::Corrupt, Some("shard.00000.mds"), Some(1));
    check_every_sample(&cache, &ds);
    assert_eq!(counting.for_key("shard.00000.mds").gets, 2);
    assert_eq!(cache.stats().verify_failures, 1);
    // Damaged every time: a clear error after the retry budget, nothing cached, and no
    // "two downloads agree" leniency (a header checksum is always of the object).
    faulty.inject(Fault::Corrupt, Some("shard.00001.mds"), None);
    assert!(cache.evict(1));
    let e = cache.get(1).unwrap_err();
    assert!(
        matches!(e, CacheError::Shard(ShardFault::Corrupt { shard: 1, .. })),
        "{e:?}"
    );
    assert!(e.to_string().contains(what), "{e}");
    assert!(!cache.shard_path(1).unwrap().exists());
    faulty.clear();
    cache.get(1).unwrap();
    check_every_sample(&cache, &ds);
}

#[test]
fn a_corrupted_s3_download_with_a_foreign_etag_is_caught_by_the_checksum_s3_keeps() {
    use crate::common::FakeS3Options;
    use shardfs_testkit::s3::{EtagMode, FakeS3};
    // ETags that look like MD5s but are not (SSE-KMS, SSE-C): only the CRC64NVME S3 keeps,
    // asked for with a signed checksum-mode HEAD, tells damage from a foreign ETag. Without
    // it, a corruption repeated on every download would pass as "two downloads agree".
    let server = FakeS3::start_with(EtagMode::Encrypted);
    server.answer_checksum_mode(true);
    server.put_dir("bkt", "basic", &fixtures().join("mds/basic"));
    a_damaged_download_of_a_hashless_dataset_is_caught(
        "s3://bkt/basic",
        &server.options(),
        "CRC64NVME",
    );
    assert!(
        server.seen("basic/shard.00000.mds").heads >= 1,
        "asked with checksum mode"
    );
}

#[test]
fn with_the_checksum_s3_keeps_a_foreign_etag_costs_one_download_not_two() {
    use crate::common::FakeS3Options;
    use shardfs_testkit::s3::{EtagMode, FakeS3};
    for answered in [true, false] {
        let server = FakeS3::start_with(EtagMode::Encrypted);
        server.answer_checksum_mode(answered);
        let tmp = tempfile::tempdir().unwrap();
        let ds = hashless_copy("basic", tmp.path());
        server.put_dir("bkt", "basic", &ds);
        let source = store::Source::parse("s3://bkt/basic").unwrap();
        let dataset = Arc::new(Dataset::load(source.canonical(), &server.options()).unwrap());
        assert!(dataset.index().shards()[0].raw.hashes.is_empty());
        let cache = ShardCache::open(dataset, opts(&tmp.path().join("cache"))).unwrap();
        check_every_sample(&cache, &ds);
        let seen = server.seen("basic/shard.00000.mds");
        let (gets, heads) = if answered { (1, 1) } else { (2, 1) };
        assert_eq!(
            (seen.gets, seen.heads),
            (gets, heads),
            "checksums answered: {answered}"
        );
        // Without the checksum every shard's first download fails its foreign ETag.
        let shards = cache.dataset().index().shards().len() as u64;
        let failed = if answered { 0 } else { shards };
        assert_eq!(cache.stats().verify_failures, failed);
    }
}

/// Issue 38: a public bucket read without credentials (`--no-sign-request`) is asked for the
/// checksum S3 keeps too, with an unsigned checksum-mode HEAD, and the cache's status counts
/// the questions and the answers.
#[test]
fn an_unsigned_reader_asks_for_the_checksum_s3_keeps_and_counts_it() {
    use crate::common::FakeS3Options;
    use shardfs_testkit::s3::{EtagMode, FakeS3};
    for answered in [true, false] {
        let server = FakeS3::start_with(EtagMode::Encrypted);
        server.answer_checksum_mode(answered);
        server.allow_unsigned_reads(true);
        let tmp = tempfile::tempdir().unwrap();
        let ds = hashless_copy("basic", tmp.path());
        server.put_dir("bkt", "basic", &ds);
        let unsigned = StoreOptions {
            no_sign_request: true,
            credentials: None,
            ..server.options()
        };
        let source = store::Source::parse("s3://bkt/basic").unwrap();
        let dataset = Arc::new(Dataset::load(source.canonical(), &unsigned).unwrap());
        let cache = ShardCache::open(dataset, opts(&tmp.path().join("cache"))).unwrap();
        check_every_sample(&cache, &ds);
        let seen = server.seen("basic/shard.00000.mds");
        // Answered, the CRC checks the first download; else its foreign ETag fails it once.
        let gets = if answered { 1 } else { 2 };
        assert_eq!((seen.gets, seen.heads), (gets, 1), "answered: {answered}");
        let st = cache.stats();
        assert!(st.store_checksum_questions >= 1, "answered: {answered}");
        let answers = if answered {
            st.store_checksum_questions
        } else {
            0
        };
        assert_eq!(st.store_checksum_answers, answers, "answered: {answered}");
    }
}

/// Issue 36: the cheapest sound check first. Where S3 keeps a checksum of the object (a
/// CRC64NVME for every upload since December 2024), it is asked beside the first download and
/// checks the bytes, even where the ETag is a plain MD5; an ETag-only store is checked by the
/// MD5. Either way damage repeated on every download is refused, and a download damaged once
/// is repaired.
#[test]
fn a_hashless_shard_is_checked_by_the_crc_s3_keeps_before_its_etag() {
    use crate::common::FakeS3Options;
    use shardfs_testkit::s3::{EtagMode, FakeS3};
    for crc in [true, false] {
        let server = FakeS3::start_with(EtagMode::Md5);
        server.answer_checksum_mode(crc);
        let tmp = tempfile::tempdir().unwrap();
        let ds = hashless_copy("basic", tmp.path());
        server.put_dir("bkt", "basic", &ds);
        let store_opts = StoreOptions {
            max_retries: 2,
            initial_backoff: Duration::from_millis(5),
            max_backoff: Duration::from_millis(20),
            ..server.options()
        };
        let (faulty, counting, dataset) =
            instrumented_with_parts("s3://bkt/basic", &store_opts, 4096);
        let cache = ShardCache::open(dataset, opts(&tmp.path().join("cache"))).unwrap();
        check_every_sample(&cache, &ds);
        assert_eq!(cache.stats().verify_failures, 0, "crc: {crc}");
        // Asked once, beside the first download, whether the store answers or not.
        assert_eq!(counting.for_key("shard.00000.mds").heads, 1, "crc: {crc}");
        // Damaged on every download: refused by the CRC where the store keeps one, else by
        // the ETag's MD5.
        assert!(cache.evict(1) && cache.evict(2));
        faulty.inject(Fault::Corrupt, Some("shard.00001.mds"), None);
        let e = cache.get(1).unwrap_err();
        let want = if crc { "CRC64NVME" } else { "MD5" };
        assert!(e.to_string().contains(want), "crc: {crc}: {e}");
        // Damaged once: repaired, and the bytes are the object's.
        faulty.clear();
        faulty.inject(Fault::Corrupt, Some("shard.00002.mds"), Some(1));
        let size = std::fs::metadata(ds.join("shard.00002.mds")).unwrap().len();
        let got = cache.get(2).unwrap().read_at(0, size as usize).unwrap();
        assert_eq!(got, std::fs::read(ds.join("shard.00002.mds")).unwrap());
    }
}

/// Issue 36: where the CRC64NVME S3 keeps of an uncompressed shard vouched for its download,
/// the cache records that CRC as its checksum of the file instead of hashing the shard again
/// (an xxh3 where the store keeps none); either kind catches a file that rots on disk
/// between two mounts.
#[test]
fn the_crc_s3_keeps_is_the_cache_s_checksum_of_the_file_and_still_catches_rot() {
    use crate::common::FakeS3Options;
    use shardfs_testkit::s3::{EtagMode, FakeS3};
    for crc in [true, false] {
        let server = FakeS3::start_with(EtagMode::Md5);
        server.answer_checksum_mode(crc);
        let tmp = tempfile::tempdir().unwrap();
        let ds = hashless_copy("basic", tmp.path());
        server.put_dir("bkt", "basic", &ds);
        let cache_dir = tmp.path().join("cache");
        let shard_sums = |cache: &ShardCache, s: usize| {
            let name = cache.dataset().index().shards()[s].raw.basename.clone();
            let sum = |ext: &str| {
                std::fs::read_to_string(cache.dir().join("sums").join(format!("{name}.{ext}"))).ok()
            };
            let (crc_file, xxh3_file) = (sum("crc64nvme"), sum("xxh3"));
            (name, crc_file, xxh3_file)
        };
        let n;
        {
            let (_faulty, _counting, dataset) =
                instrumented_with_parts("s3://bkt/basic", &server.options(), 4096);
            let cache = ShardCache::open(dataset, opts(&cache_dir)).unwrap();
            check_every_sample(&cache, &ds);
            n = cache.dataset().index().shards().len();
            for s in 0..n {
                let (name, crc_file, xxh3_file) = shard_sums(&cache, s);
                let bytes = std::fs::read(ds.join(&name)).unwrap();
                if crc {
                    let want = crc_fast::checksum(crc_fast::CrcAlgorithm::Crc64Nvme, &bytes);
                    assert_eq!(crc_file, Some(format!("{want:016x}\n")), "{name}");
                    assert_eq!(xxh3_file, None, "{name}: one sum per shard");
                } else {
                    let want = xxhash_rust::xxh3::xxh3_64(&bytes);
                    assert_eq!(xxh3_file, Some(format!("{want:016x}\n")), "{name}");
                    assert_eq!(crc_file, None, "{name}: one sum per shard");
                }
            }
            flip_a_byte(&cache.shard_path(1).unwrap());
        }
        // The next mount adopts every shard, finds shard 1 rotten on its first use, fetches
        // it again and serves the true bytes.
        let (_faulty, counting, dataset) =
            instrumented_with_parts("s3://bkt/basic", &server.options(), 4096);
        let cache = ShardCache::open(dataset, opts(&cache_dir)).unwrap();
        assert!((0..n).all(|s| cache.is_resident(s)), "crc: {crc}");
        check_every_sample(&cache, &ds);
        assert_eq!(cache.stats().verify_failures, 1, "crc: {crc}");
        let (name, _, _) = shard_sums(&cache, 1);
        // Whole or in ranged parts: the bytes of the shard came again.
        let size = std::fs::metadata(ds.join(&name)).unwrap().len();
        assert!(
            counting.for_key(&name).bytes >= size,
            "crc: {crc}: fetched again"
        );
        let (other, _, _) = shard_sums(&cache, 0);
        assert_eq!(
            counting.for_key(&other).bytes,
            0,
            "crc: {crc}: intact shards reused"
        );
    }
}

#[test]
fn a_download_in_parts_with_a_foreign_etag_is_repaired_by_the_checksum_s3_keeps() {
    use crate::common::FakeS3Options;
    use shardfs_testkit::s3::{EtagMode, FakeS3};
    let server = FakeS3::start_with(EtagMode::Encrypted);
    server.answer_checksum_mode(true);
    let tmp = tempfile::tempdir().unwrap();
    let ds = hashless_copy("basic", tmp.path());
    server.put_dir("bkt", "basic", &ds);
    let store_opts = StoreOptions {
        max_retries: 3,
        initial_backoff: Duration::from_millis(5),
        max_backoff: Duration::from_millis(20),
        ..server.options()
    };
    let shard0 = ds.join("shard.00000.mds");
    let size = std::fs::metadata(&shard0).unwrap().len();
    let part = 4096;
    assert!(size.div_ceil(part) > 2, "the shard must span several parts");
    let (faulty, counting, dataset) = instrumented_with_parts("s3://bkt/basic", &store_opts, part);
    let cache = ShardCache::open(dataset, opts(&tmp.path().join("cache"))).unwrap();
    // One part damaged: the whole shard's CRC64NVME (asked once) fails, and the repair part
    // by part is checked against it too (inside the store's runtime: nothing asked there).
    faulty.inject(Fault::Corrupt, Some("shard.00000.mds"), Some(1));
    let got = cache.get(0).unwrap().read_at(0, size as usize).unwrap();
    assert_eq!(got, std::fs::read(&shard0).unwrap());
    let st = cache.stats();
    assert_eq!((st.verify_failures, st.repaired_downloads), (1, 1));
    assert_eq!(counting.for_key("shard.00000.mds").heads, 1, "asked once");
    // Damaged on every download: refused, although the damage repeats identically.
    faulty.inject(Fault::Corrupt, Some("shard.00001.mds"), None);
    let e = cache.get(1).unwrap_err();
    assert!(e.to_string().contains("CRC64NVME"), "{e}");
    faulty.clear();
    check_every_sample(&cache, &ds);
}

#[test]
fn a_corrupted_gcs_download_of_a_hashless_dataset_is_caught_by_x_goog_hash() {
    use crate::common::emulators;
    let gcs = emulators::gcs();
    let ds = fixtures().join("mds/basic");
    let src = format!(
        "gs://{}/{}/",
        emulators::BUCKET,
        emulators::dataset_prefix(&ds)
    );
    let opts = StoreOptions {
        endpoint_url: Some(gcs.endpoint.clone()),
        ..quick_store()
    };
    a_damaged_download_of_a_hashless_dataset_is_caught(&src, &opts, "CRC32C");
}

/// `gs://` source and options for fixture `ds` on gcp-storage-emulator, which sends neither
/// ETag nor Last-Modified (nor `x-goog-hash` on ranged answers).
fn on_gcs_without_etags(ds: &Path) -> (String, StoreOptions) {
    use crate::common::emulators;
    let gcs = emulators::gcs_stub();
    let src = format!(
        "gs://{}/{}/",
        emulators::BUCKET,
        emulators::dataset_prefix(ds)
    );
    let opts = StoreOptions {
        endpoint_url: Some(gcs.endpoint.clone()),
        ..quick_store()
    };
    (src, opts)
}

#[test]
fn a_corrupted_download_of_a_hashless_dataset_from_a_gcs_without_etags_is_caught_by_x_goog_hash() {
    let (src, opts) = on_gcs_without_etags(&fixtures().join("mds/basic"));
    a_damaged_download_of_a_hashless_dataset_is_caught(&src, &opts, "CRC32C");
}

#[test]
fn every_fixture_reads_exactly_from_a_gcs_without_etags_whole_and_in_parts() {
    let tmp = tempfile::tempdir().unwrap();
    for ds in mds_datasets() {
        // Whole shards for every fixture, 4 KiB parts (ranged answers without ETag) for one:
        // the emulator serves one connection at a time.
        let parts: &[u64] = if ds.ends_with("basic") {
            &[0, 4096]
        } else {
            &[0]
        };
        for &part in parts {
            let (src, store_opts) = on_gcs_without_etags(&ds);
            let (faulty, _counting, dataset) = instrumented_with_parts(&src, &store_opts, part);
            let shards = dataset.index().shards();
            let first = shards.iter().find(|s| s.samples > 0).unwrap().clone();
            assert!(!first.raw.hashes.is_empty(), "{}", ds.display());
            let name = ds.file_name().unwrap().to_str().unwrap();
            let cache = ShardCache::open(dataset, opts(&tmp.path().join(format!("{name}-{part}"))))
                .unwrap();
            // A shard damaged in transit once: index.json's hash catches it.
            let key = first
                .zip
                .as_ref()
                .map_or(first.raw.basename.clone(), |z| z.basename.clone());
            faulty.inject(Fault::Corrupt, Some(&key), Some(1));
            check_every_sample(&cache, &ds);
            assert_eq!(faulty.fired(), 1, "{key} of {}", ds.display());
            assert_eq!(
                cache.stats().verify_failures,
                1,
                "{key} of {}",
                ds.display()
            );
        }
    }
}

#[test]
fn a_corrupted_azure_download_of_a_hashless_dataset_is_caught_by_content_md5() {
    use crate::common::emulators;
    let az = emulators::azurite();
    for (k, v) in az.azure_env() {
        std::env::set_var(k, v);
    }
    let ds = fixtures().join("mds/basic");
    let src = format!(
        "az://{}/{}/",
        emulators::BUCKET,
        emulators::dataset_prefix(&ds)
    );
    a_damaged_download_of_a_hashless_dataset_is_caught(&src, &quick_store(), "MD5");
}

/// `dataset` at `source` behind counting + fault injection + retries, fetching shards in
/// parts of `part_size` bytes.
fn instrumented_with_parts(
    source: &str,
    store_opts: &StoreOptions,
    part_size: u64,
) -> (Arc<FaultyStore>, Arc<CountingStore>, Arc<Dataset>) {
    let source = store::Source::parse(source).unwrap();
    let backend = store::ObjectStoreBackend::open(&source, store_opts).unwrap();
    let counting = Arc::new(CountingStore::new(Arc::new(backend)));
    let faulty = Arc::new(FaultyStore::new(counting.clone()));
    let resilient = Arc::new(ResilientStore::new(faulty.clone(), store_opts));
    let bs = BlockingStore::new(resilient, 2).unwrap();
    let dataset = Dataset::from_store(bs, source.canonical())
        .unwrap()
        .with_part_size(part_size);
    (faulty, counting, Arc::new(dataset))
}

#[test]
fn large_shards_come_as_parallel_ranged_parts_each_retried_alone() {
    let moto = crate::common::moto::moto();
    let tmp = tempfile::tempdir().unwrap();
    let hashless = hashless_copy("basic", tmp.path());
    moto.upload_dir("cache-tests", "parts/basic", &fixtures().join("mds/basic"));
    moto.upload_dir("cache-tests", "parts/hashless", &hashless);
    let store_opts = StoreOptions {
        max_retries: 3,
        initial_backoff: Duration::from_millis(5),
        max_backoff: Duration::from_millis(20),
        ..crate::common::moto::s3_options(&moto.endpoint)
    };
    let shard0 = fixtures().join("mds/basic/shard.00000.mds");
    let size = std::fs::metadata(&shard0).unwrap().len();
    let part = 4096;
    let parts = size.div_ceil(part);
    assert!(parts > 2, "the fixture shard must span several parts");
    for (i, source) in [
        "s3://cache-tests/parts/basic",
        "s3://cache-tests/parts/hashless",
    ]
    .into_iter()
    .enumerate()
    {
        let (faulty, counting, dataset) = instrumented_with_parts(source, &store_opts, part);
        let cache = ShardCache::open(dataset, opts(&tmp.path().join(format!("c{i}")))).unwrap();
        // A part cut short costs one more ranged GET of that part, not a new download.
        faulty.inject(Fault::Truncate, Some("shard.00000.mds"), Some(1));
        check_every_sample(&cache, &fixtures().join("mds/basic"));
        let c = counting.for_key("shard.00000.mds");
        assert_eq!((c.gets, c.range_gets), (0, parts + 1), "{source}");
        assert_eq!(cache.stats().verify_failures, 0, "{source}");
        // A part damaged in transit fails the whole shard's check (index hash, or the
        // ETag MD5 of a hashless dataset); the parts are fetched again one by one until
        // the new bytes of the damaged one make the check hold.
        assert!(cache.evict(0));
        counting.reset();
        faulty.inject(Fault::Corrupt, Some("shard.00000.mds"), Some(1));
        let got = cache.get(0).unwrap().read_at(0, size as usize).unwrap();
        assert_eq!(got, std::fs::read(&shard0).unwrap(), "{source}");
        let gets = counting.for_key("shard.00000.mds").range_gets;
        assert!(parts < gets && gets <= 2 * parts, "{source}: {gets} GETs");
        let st = cache.stats();
        assert_eq!(st.verify_failures, 1, "{source}");
        assert_eq!(st.repaired_downloads, 1, "{source}");
        assert_eq!(st.parts_refetched, gets - parts, "{source}");
        // The damaged download was written to disk beside its check (staged): it is gone,
        // and the file in place holds the repaired bytes.
        let dir = tmp.path().join(format!("c{i}"));
        let staged: Vec<_> = files_under(&dir)
            .into_iter()
            .filter(|p| {
                let rel = p.strip_prefix(&dir).unwrap();
                rel.components().any(|c| c.as_os_str() == "tmp")
            })
            .collect();
        assert!(staged.is_empty(), "{source}: {staged:?}");
        assert_eq!(
            std::fs::read(cache.shard_path(0).unwrap()).unwrap(),
            std::fs::read(&shard0).unwrap(),
            "{source}"
        );
    }
}

/// Flips a byte of part `k` (of `part` bytes) of each shard on the `k`-th request for it:
/// every download of a whole object brings one damaged part (part 1 in the first, part 2 in
/// the second, ...), yet every part comes clean when asked for again.
fn damages_parts_in_turn(inner: Arc<dyn store::Store>, part: u64) -> Rewrite {
    let asked = std::sync::Mutex::new(std::collections::HashMap::<(String, u64), u64>::new());
    Rewrite::new(inner, move |key, range, mut f| {
        let Some(range) = range.filter(|_| key.as_str().ends_with(".mds")) else {
            return f;
        };
        let n = {
            let mut m = asked.lock().unwrap();
            let n = m.entry((key.to_string(), range.start)).or_default();
            *n += 1;
            *n
        };
        if n == range.start / part {
            let mut v = f.bytes.to_vec();
            let mid = v.len() / 2;
            v[mid] ^= 0x20;
            f.bytes = v.into();
        }
        f
    })
}

#[test]
fn a_shard_whose_every_download_has_a_damaged_part_is_put_together_from_clean_parts() {
    let tmp = tempfile::tempdir().unwrap();
    let ds = fixtures().join("mds/basic");
    let shard0 = ds.join("shard.00000.mds");
    let size = std::fs::metadata(&shard0).unwrap().len();
    let part = 4096;
    let parts = size.div_ceil(part);
    assert!(parts > 3, "the fixture shard must span four parts or more");
    let source = store::Source::parse(ds.to_str().unwrap()).unwrap();
    let backend = store::ObjectStoreBackend::open(&source, &quick_store()).unwrap();
    let damaging = Arc::new(damages_parts_in_turn(Arc::new(backend), part));
    let counting = Arc::new(CountingStore::new(damaging));
    let bs = BlockingStore::new(counting.clone(), 2).unwrap();
    let dataset = Dataset::from_store(bs, source.canonical())
        .unwrap()
        .with_part_size(part);
    let cache = ShardCache::open(Arc::new(dataset), opts(&tmp.path().join("cache"))).unwrap();
    // Three whole downloads would each have failed the shard's hash. The first one's
    // damaged part 1 is replaced by its second, clean answer: parts 0 and 1 asked again.
    let got = cache.get(0).unwrap().read_at(0, size as usize).unwrap();
    assert_eq!(got, std::fs::read(&shard0).unwrap());
    assert_eq!(counting.for_key("shard.00000.mds").range_gets, parts + 2);
    let st = cache.stats();
    assert_eq!(
        (
            st.verify_failures,
            st.repaired_downloads,
            st.parts_refetched
        ),
        (1, 1, 2)
    );
    // Every byte that came from the store is counted: index.json, the shard, two parts.
    let index_len = std::fs::metadata(ds.join("index.json")).unwrap().len();
    assert_eq!(st.bytes_fetched, index_len + size + 2 * part);
    check_every_sample(&cache, &ds);
}

#[test]
fn hashless_shards_off_s3_come_whole_so_the_store_checksum_applies() {
    let tmp = tempfile::tempdir().unwrap();
    let hashless = hashless_copy("basic", tmp.path());
    let part = 4096;
    for (ds, whole) in [(fixtures().join("mds/basic"), false), (hashless, true)] {
        let (_faulty, counting, dataset) =
            instrumented_with_parts(ds.to_str().unwrap(), &quick_store(), part);
        let cache = ShardCache::open(dataset, opts(&tmp.path().join("c"))).unwrap();
        check_every_sample(&cache, &fixtures().join("mds/basic"));
        let c = counting.for_key("shard.00000.mds");
        let size = std::fs::metadata(ds.join("shard.00000.mds")).unwrap().len();
        let want = if whole {
            (1, 0)
        } else {
            (0, size.div_ceil(part))
        };
        assert_eq!((c.gets, c.range_gets), want, "{}", ds.display());
        std::fs::remove_dir_all(tmp.path().join("c")).unwrap();
    }
}

#[test]
fn only_samples_of_shards_on_disk_are_advised_into_the_page_cache() {
    let ds = fixtures().join("mds/basic");
    let tmp = tempfile::tempdir().unwrap();
    let dataset = Arc::new(Dataset::load(ds.to_str().unwrap(), &StoreOptions::default()).unwrap());
    // Advice is for files read through the page cache.
    let o = CacheOptions {
        direct_io: false,
        ..opts(tmp.path())
    };
    let cache = ShardCache::open(dataset, o).unwrap();
    assert_eq!(
        cache.advise_sample(0, 1),
        Advice::Skipped,
        "shard 0 is not on disk yet"
    );
    // Reading a sample fills the shard (its file kept open, its header in memory).
    cache.sample(0, 0).unwrap();
    assert_eq!(cache.advise_sample(0, 1), Advice::Started);
    assert_eq!(
        cache.advise_sample(0, u32::MAX),
        Advice::Skipped,
        "no such sample: nothing to advise"
    );
    let last = cache.dataset().index().shards().len() - 1;
    assert!(last > 0, "the fixture has several shards");
    assert_eq!(
        cache.advise_sample(last, 0),
        Advice::Skipped,
        "another shard is still not on disk"
    );
    assert_eq!(cache.stats().samples_advised, 1);
    assert_eq!(cache.stats().samples_read_ahead, 0, "the page cache's job");
}

#[test]
fn samples_of_direct_io_files_are_read_ahead_into_memory_when_their_file_is_trusted() {
    let ds = fixtures().join("mds/basic");
    let load = || Arc::new(Dataset::load(ds.to_str().unwrap(), &StoreOptions::default()).unwrap());
    let plain = tempfile::tempdir().unwrap();
    let truth = ShardCache::open(
        load(),
        CacheOptions {
            direct_io: false,
            ..opts(plain.path())
        },
    )
    .unwrap();
    // A folder whose file system takes direct I/O: /tmp may be a tmpfs, which gets none, so
    // the build's own folder, then /var/tmp.
    let Some((_tmp, cache)) = [env!("CARGO_TARGET_TMPDIR"), "/var/tmp"]
        .into_iter()
        .filter_map(|dir| tempfile::tempdir_in(dir).ok())
        .map(|tmp| {
            let cache = ShardCache::open(load(), opts(tmp.path())).unwrap();
            (tmp, cache)
        })
        .find(|(_, cache)| cache.stats().io_backend.ends_with("-direct"))
    else {
        eprintln!("no folder with direct I/O here; nothing to check");
        return;
    };
    cache.sample(0, 0).unwrap();
    let n = cache.dataset().index().shards()[0].samples;
    assert!(n > 3, "the fixture's first shard has a few samples");
    // All but the last sample.
    for i in 1..n - 1 {
        assert_eq!(cache.advise_sample(0, i), Advice::Started, "sample {i}");
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while cache.stats().samples_read_ahead < u64::from(n - 2) {
        assert!(std::time::Instant::now() < deadline, "{:?}", cache.stats());
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    assert_eq!(cache.advise_sample(0, 1), Advice::Skipped, "already read");
    for i in 1..n - 1 {
        assert_eq!(
            cache.sample(0, i).unwrap(),
            truth.sample(0, i).unwrap(),
            "sample {i}"
        );
    }
    let s = cache.stats();
    assert_eq!(s.read_ahead_hits, u64::from(n - 2), "{s:?}");
    assert_eq!(s.read_ahead_bytes, 0, "taken, nothing left: {s:?}");
    // The file changes on disk behind the cache: nothing is read ahead from it, and the next
    // read checks it again, finds it bad and fetches the shard again.
    let path = cache.shard_path(0).unwrap();
    {
        use std::os::unix::fs::FileExt;
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .unwrap();
        let at = f.metadata().unwrap().len() - 1;
        let mut byte = [0u8];
        f.read_exact_at(&mut byte, at).unwrap();
        f.write_all_at(&[byte[0] ^ 1], at).unwrap();
    }
    let last = n - 1;
    assert_eq!(
        cache.advise_sample(0, last),
        Advice::Skipped,
        "changed on disk"
    );
    assert_eq!(
        cache.sample(0, last).unwrap(),
        truth.sample(0, last).unwrap()
    );
    assert_eq!(cache.stats().verify_failures, 1);
}

#[test]
fn headers_made_ready_for_a_listing_size_samples_without_downloading_a_shard() {
    let moto = moto();
    let tmp = tempfile::tempdir().unwrap();
    for (name, ranged) in [("basic", true), ("compressed-zstd", false)] {
        let ds = fixtures().join("mds").join(name);
        moto.upload_dir("cache-headers", name, &ds);
        let dataset = Arc::new(
            Dataset::load(
                &format!("s3://cache-headers/{name}"),
                &s3_options(&moto.endpoint),
            )
            .unwrap(),
        );
        let cache = ShardCache::open(dataset, opts(&tmp.path().join(name))).unwrap();
        let shards: Vec<mds::ShardEntry> = cache.dataset().index().shards().to_vec();
        let all: Vec<usize> = (0..shards.len()).collect();
        assert_eq!(
            cache.sample_len_now(0, 0),
            None,
            "{name}: nothing in memory yet"
        );
        cache.ready_headers(&all, Duration::from_secs(30));
        for (k, entry) in shards.iter().enumerate() {
            // The stored (uncompressed) file's header; a compressed shard has none on disk.
            let header = std::fs::read(ds.join(&entry.raw.basename))
                .ok()
                .map(|file| mds::ShardHeader::parse(&file).unwrap());
            for i in 0..entry.samples {
                let got = cache.sample_len_now(k, i);
                if ranged {
                    let r = header.as_ref().unwrap().sample_range(i).unwrap();
                    assert_eq!(
                        got,
                        Some((r.end - r.start, false)),
                        "{name} shard {k} sample {i}"
                    );
                } else {
                    // A compressed shard's header needs the whole shard: left out.
                    assert_eq!(got, None, "{name} shard {k}");
                }
            }
        }
        assert_eq!(cache.stats().shards_fetched, 0, "{name}");
        if ranged {
            // Once the shard is downloaded its verified header answers.
            cache.sample(0, 0).unwrap();
            assert!(
                matches!(cache.sample_len_now(0, 0), Some((_, true))),
                "{name}"
            );
        }
    }
}
