//! Requests that wait for the object store are served off the FUSE threads: readers of a slow
//! shard do not hold up readers of other shards, nor `status.json`.

use super::{fake_s3_env, Expected, Mount};
use crate::common::fixtures;
use shardfs_testkit::s3::{FakeS3, ServerFault};
use std::time::{Duration, Instant};

#[test]
fn readers_of_a_slow_shard_do_not_hold_up_other_shards_or_status() {
    let dir = fixtures().join("mds/compressed-zstd");
    let exp = Expected::load(&dir);
    let server = FakeS3::start();
    server.put_dir("bkt", "ds", &dir);
    let slow = exp.index.shards()[0]
        .zip
        .as_ref()
        .map(|z| z.basename.clone())
        .unwrap();
    // Every GET of shard 0 answers after 6 s (under the stall timeout: it is slow, not dead).
    server.inject(
        ServerFault::Latency(Duration::from_secs(6)),
        Some(&format!("ds/{slow}")),
        None,
    );
    let env = fake_s3_env();
    let m = Mount::with_env(
        "s3://bkt/ds",
        &[
            "--endpoint-url",
            &server.endpoint,
            "--fuse-threads",
            "2",
            "--stall-timeout",
            "30",
        ],
        &env,
    );
    let file = |g: u64| {
        let (suffix, bytes) = exp.files(g).swap_remove(0);
        (m.mnt.join(format!("samples/{g:08}.{suffix}")), bytes)
    };
    // More readers of shard 0 than FUSE threads, each waiting for its download.
    let started = Instant::now();
    let waiting: Vec<_> = (0..4u64)
        .map(|g| {
            let (path, want) = file(g);
            std::thread::spawn(move || (std::fs::read(path).unwrap(), want))
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    // Meanwhile a file of another shard and status.json answer at once.
    let g = exp.index.shards()[..2]
        .iter()
        .map(|s| u64::from(s.samples))
        .sum::<u64>();
    let (path, want) = file(g);
    assert_eq!(std::fs::read(path).unwrap(), want);
    let status = m.status();
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(4),
        "other requests waited for shard 0 ({took:?})"
    );
    assert!(
        waiting.iter().all(|t| !t.is_finished()),
        "shard 0's readers finished before the check: it proves nothing"
    );
    assert_eq!(status["errors"]["count"], 0);
    for t in waiting {
        let (got, want) = t.join().unwrap();
        assert_eq!(got, want);
    }
}
