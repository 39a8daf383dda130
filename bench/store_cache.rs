//! Benchmarks of `store` and `cache` (not run in CI): `cargo bench --bench store_cache`.
//!
//! 1. Cold fetch: a dataset of 64 MiB MDS shards served by the in-process s3s server on
//!    loopback (SigV4 checked), fetched into an empty cache (download, xxh64 check, write,
//!    fsync, rename), against `curl --aws-sigv4` downloading the same objects to /dev/null in
//!    the same run; both sequentially and with all shards in parallel.
//! 2. Cached reads: random reads of 4 KiB, 64 KiB and 1 MiB from cached shard files (page
//!    cache warm) through io_uring and through pread, with 1 and 8 threads.
//!
//! Knobs: SHARDFS_BENCH_SHARDS (default 8), SHARDFS_BENCH_SECS per read configuration (2).

#[path = "../tests/common/mod.rs"]
#[allow(unused_imports)]
mod common;

use common::s3s_server::{FakeS3, ACCESS_KEY, SECRET_KEY};
use shardfs::cache::{CacheOptions, Dataset, IoMode, ShardCache};
use shardfs::mds::writer::{Writer, WriterConfig};
use shardfs::mds::Encoding;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

const MIB: f64 = 1024.0 * 1024.0;
const EMPTY_SHA256: &str =
    "x-amz-content-sha256: e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

fn env_num(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// `shards` shards of ~64 MiB: one `bytes` column of 1 MiB pseudo-random samples.
fn make_dataset(shards: u64) -> shardfs::mds::writer::WrittenDataset {
    let mut w = Writer::new(WriterConfig {
        columns: vec![("data".into(), Encoding::Bytes)],
        compression: None,
        hashes: vec!["xxh64".into()],
        size_limit: Some(1 << 26),
    })
    .unwrap();
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let per_shard = 63; // 63 MiB of samples + headers stay under the 64 MiB limit
    for _ in 0..shards * per_shard {
        let sample: Vec<u8> = (0..(1 << 20) / 8)
            .flat_map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x.to_le_bytes()
            })
            .collect();
        w.write(&[&sample]).unwrap();
    }
    w.finish().unwrap()
}

fn curl(server: &FakeS3, keys: &[String], parallel: bool) -> Duration {
    let start = Instant::now();
    let spawn = |key: &String| {
        Command::new("curl")
            // S3 wants the payload hash header; curl signs it when given.
            .args([
                "-sS",
                "-f",
                "-o",
                "/dev/null",
                "--aws-sigv4",
                "aws:amz:us-east-1:s3",
                "-H",
                EMPTY_SHA256,
                "--user",
            ])
            .arg(format!("{ACCESS_KEY}:{SECRET_KEY}"))
            .arg(format!("{}/bkt/{key}", server.endpoint))
            .env_remove("AWS_CA_BUNDLE")
            .spawn()
            .expect("curl")
    };
    if parallel {
        let children: Vec<_> = keys.iter().map(spawn).collect();
        for mut c in children {
            assert!(c.wait().unwrap().success(), "curl failed");
        }
    } else {
        for k in keys {
            assert!(spawn(k).wait().unwrap().success(), "curl failed");
        }
    }
    start.elapsed()
}

/// Whole-object GETs through `store` only (no verification, no disk).
fn store_only(server: &FakeS3, keys: &[String], parallel: bool) -> Duration {
    let mut opts = server.options();
    opts.request_timeout = Duration::from_secs(300);
    let store =
        shardfs::store::BlockingStore::new(shardfs::store::open("s3://bkt", &opts).unwrap(), 2)
            .unwrap();
    let start = Instant::now();
    let keys: Vec<_> = keys
        .iter()
        .map(|k| shardfs::store::ObjectKey::new(k.clone()).unwrap())
        .collect();
    if parallel {
        let ts: Vec<_> = keys
            .into_iter()
            .map(|k| {
                let s = store.clone();
                std::thread::spawn(move || s.get(&k).unwrap().len())
            })
            .collect();
        for t in ts {
            t.join().unwrap();
        }
    } else {
        for k in &keys {
            store.get(k).unwrap();
        }
    }
    start.elapsed()
}

/// Download + size/xxh64 check + header check of every shard, without the disk.
fn verify_only(server: &FakeS3, shards: usize, parallel: bool) -> Duration {
    let mut opts = server.options();
    opts.request_timeout = Duration::from_secs(300);
    let dataset = Arc::new(Dataset::load("s3://bkt", &opts).unwrap());
    let start = Instant::now();
    if parallel {
        let ts: Vec<_> = (0..shards)
            .map(|s| {
                let d = dataset.clone();
                std::thread::spawn(move || d.fetch_shard(s, 1).unwrap().len())
            })
            .collect();
        for t in ts {
            t.join().unwrap();
        }
    } else {
        for s in 0..shards {
            dataset.fetch_shard(s, 1).unwrap();
        }
    }
    start.elapsed()
}

fn open_cache(server: &FakeS3, dir: &std::path::Path, io: IoMode) -> Arc<ShardCache> {
    let mut opts = server.options();
    opts.request_timeout = Duration::from_secs(300);
    let dataset = Arc::new(Dataset::load("s3://bkt", &opts).unwrap());
    ShardCache::open(
        dataset,
        CacheOptions {
            cache_dir: dir.to_path_buf(),
            io,
            memory_limit: 0,
            prefetch_threads: 8,
            ..Default::default()
        },
    )
    .unwrap()
}

fn cold_fetch(server: &FakeS3, parallel: bool) -> (Duration, u64) {
    let dir = tempfile::tempdir_in(std::env::temp_dir()).unwrap();
    let cache = open_cache(server, dir.path(), IoMode::Auto);
    let n = cache.dataset().index().shards().len();
    let start = Instant::now();
    if parallel {
        let threads: Vec<_> = (0..n)
            .map(|s| {
                let c = cache.clone();
                std::thread::spawn(move || c.ensure(s).unwrap())
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
    } else {
        for s in 0..n {
            cache.ensure(s).unwrap();
        }
    }
    let took = start.elapsed();
    let st = cache.stats();
    assert_eq!(st.shards_fetched as usize, n);
    (took, st.usage_bytes)
}

/// Random reads of `size` bytes by `threads` threads for `secs`; returns MiB/s and ops/s.
fn read_bench(cache: &Arc<ShardCache>, size: usize, threads: usize, secs: f64) -> (f64, f64) {
    let n = cache.dataset().index().shards().len();
    let handles: Vec<_> = (0..n).map(|s| Arc::new(cache.get(s).unwrap())).collect();
    let deadline = Instant::now() + Duration::from_secs_f64(secs);
    let start = Instant::now();
    let workers: Vec<_> = (0..threads)
        .map(|t| {
            let handles = handles.clone();
            std::thread::spawn(move || {
                let mut x: u64 = 0x2545_f491_4f6c_dd1d ^ (t as u64 + 1);
                let (mut ops, mut bytes) = (0u64, 0u64);
                while Instant::now() < deadline {
                    for _ in 0..64 {
                        x ^= x << 13;
                        x ^= x >> 7;
                        x ^= x << 17;
                        let h = &handles[(x % handles.len() as u64) as usize];
                        let max = h.len() - size as u64;
                        let off = (x >> 8) % max / 4096 * 4096;
                        let b = h.read_at(off, size).unwrap();
                        bytes += b.len() as u64;
                        ops += 1;
                    }
                }
                (ops, bytes)
            })
        })
        .collect();
    let (mut ops, mut bytes) = (0, 0);
    for w in workers {
        let (o, b) = w.join().unwrap();
        ops += o;
        bytes += b;
    }
    let secs = start.elapsed().as_secs_f64();
    (bytes as f64 / MIB / secs, ops as f64 / secs)
}

fn main() {
    let shards = env_num("SHARDFS_BENCH_SHARDS", 8);
    let secs = env_num("SHARDFS_BENCH_SECS", 2) as f64;
    println!("# shardfs store/cache bench: {shards} shards of ~64 MiB, loopback s3s server");
    let t = Instant::now();
    let ds = make_dataset(shards);
    let server = FakeS3::start();
    server.put("bkt", "index.json", ds.index_json.clone());
    let mut keys = Vec::new();
    let mut total = 0u64;
    for f in &ds.files {
        server.put("bkt", &f.basename, f.data.clone());
        keys.push(f.basename.clone());
        total += f.data.len() as u64;
    }
    drop(ds);
    println!(
        "dataset: {} shards, {:.0} MiB total (built in {:.1} s)",
        keys.len(),
        total as f64 / MIB,
        t.elapsed().as_secs_f64()
    );

    println!("\n## local disk baseline: write + fsync of {shards} x 64 MiB of random bytes into the temp folder");
    {
        let dir = tempfile::tempdir().unwrap();
        let data: Vec<u8> = (0..64u64 << 20)
            .map(|i| (i.wrapping_mul(0x9e37_79b9) >> 7) as u8)
            .collect();
        let start = Instant::now();
        for i in 0..shards {
            use std::io::Write;
            let mut f = std::fs::File::create(dir.path().join(format!("f{i}"))).unwrap();
            f.write_all(&data).unwrap();
            f.sync_all().unwrap();
        }
        let rate = (shards * 64) as f64 / start.elapsed().as_secs_f64();
        println!("disk write+fsync {rate:>7.1} MiB/s (an upper bound for sequential cache fills)");
    }

    println!("\n## cold fetch (MiB/s of shard bytes; ratio = shardfs / curl)");
    for parallel in [false, true] {
        let c = curl(&server, &keys, parallel);
        let s = store_only(&server, &keys, parallel);
        let (f, bytes) = cold_fetch(&server, parallel);
        let curl_rate = total as f64 / MIB / c.as_secs_f64();
        let ours = bytes as f64 / MIB / f.as_secs_f64();
        let store_rate = total as f64 / MIB / s.as_secs_f64();
        let v = verify_only(&server, keys.len(), parallel);
        let verify_rate = total as f64 / MIB / v.as_secs_f64();
        println!(
            "{:<10} curl {:>7.1} MiB/s ({:.2} s) | store.get {:>7.1} MiB/s (ratio {:.2}) | get+verify {:>7.1} MiB/s (ratio {:.2}) | cache fill {:>7.1} MiB/s ({:.2} s, ratio {:.2})",
            if parallel { "parallel" } else { "sequential" },
            curl_rate,
            c.as_secs_f64(),
            store_rate,
            store_rate / curl_rate,
            verify_rate,
            verify_rate / curl_rate,
            ours,
            f.as_secs_f64(),
            ours / curl_rate
        );
    }

    println!("\n## cached reads, random offsets, page cache warm (MiB/s, kops/s; ratio = io_uring mode / pread)");
    let dir = tempfile::tempdir().unwrap();
    let mut results = Vec::new();
    for io in [IoMode::Uring, IoMode::UringInline, IoMode::Pread] {
        let cache = open_cache(&server, dir.path(), io);
        for s in 0..keys.len() {
            cache.ensure(s).unwrap();
        }
        let backend = cache.stats().io_backend;
        for size in [4096usize, 65536, 1 << 20] {
            for threads in [1usize, 8] {
                let (mbs, ops) = read_bench(&cache, size, threads, secs);
                results.push((backend.clone(), size, threads, mbs, ops));
            }
        }
    }
    for size in [4096usize, 65536, 1 << 20] {
        for threads in [1usize, 8] {
            let get = |b: &str| {
                results
                    .iter()
                    .find(|r| r.0 == b && r.1 == size && r.2 == threads)
                    .map(|r| (r.3, r.4))
            };
            if let (Some(u), Some(i), Some(p)) =
                (get("io_uring"), get("io_uring-inline"), get("pread"))
            {
                println!(
                    "{:>5} KiB x{threads}: ring threads {:>8.1} MiB/s {:>7.1} kops/s (ratio {:.2}) | inline ring {:>8.1} MiB/s {:>7.1} kops/s (ratio {:.2}) | pread {:>8.1} MiB/s {:>7.1} kops/s",
                    size / 1024,
                    u.0,
                    u.1 / 1000.0,
                    u.0 / p.0,
                    i.0,
                    i.1 / 1000.0,
                    i.0 / p.0,
                    p.0,
                    p.1 / 1000.0,
                );
            }
        }
    }
}
