//! Each kind of shard failure reaches a reader through the real mount as its own errno, and
//! status.json names the shard, the cause and the errno; files of other shards keep working.

use super::{fake_s3_env, Expected, Mount};
use crate::common::fixtures;
use shardfs_testkit::s3::{FakeS3, ServerFault};
use std::path::PathBuf;
use std::time::Duration;

/// What is wrong with shard 1 of the dataset in the store.
enum Failure {
    /// The object is not in the store.
    Missing,
    /// Every GET of it is refused (403 AccessDenied).
    Refused,
    /// Every GET of it answers a flipped byte: its check fails on every attempt.
    Damaged,
    /// Every GET of it answers nothing for a minute.
    Stalled,
}

/// Mounts `mds/basic` from a loopback S3 server with shard 1 failing as `failure` says; gives
/// the errno a reader of one of its files gets (at open or read), after checking that a file
/// of shard 0 still reads right, and status.json's record of the failure.
fn errno_of(failure: Failure) -> (i32, serde_json::Value) {
    let dir = fixtures().join("mds/basic");
    let exp = Expected::load(&dir);
    let shard1 = exp.index.shards()[1].raw.basename.clone();
    let key = format!("ds/{shard1}");
    let server = FakeS3::start();
    let copy = tempfile::tempdir().unwrap();
    for e in std::fs::read_dir(&dir).unwrap() {
        let e = e.unwrap();
        if !matches!(failure, Failure::Missing) || e.file_name() != shard1.as_str() {
            std::fs::copy(e.path(), copy.path().join(e.file_name())).unwrap();
        }
    }
    server.put_dir("bkt", "ds", copy.path());
    match failure {
        Failure::Missing => {}
        Failure::Refused => server.inject(ServerFault::AccessDenied, Some(&key), None),
        Failure::Damaged => server.inject(ServerFault::Corrupt, Some(&key), None),
        Failure::Stalled => server.inject(
            ServerFault::Latency(Duration::from_secs(60)),
            Some(&key),
            None,
        ),
    }
    let env = fake_s3_env();
    // Few, short attempts: the test is about the answer, not the patience.
    let m = Mount::with_env(
        "s3://bkt/ds",
        &[
            "--endpoint-url",
            &server.endpoint,
            "--stall-timeout",
            "0.3",
            "--max-attempts",
            "2",
        ],
        &env,
    );
    let file = |g: u64| -> (PathBuf, Vec<u8>) {
        let (suffix, bytes) = exp.files(g).swap_remove(0);
        (m.mnt.join(format!("samples/{g:08}.{suffix}")), bytes)
    };
    let first_of_shard1 = u64::from(exp.index.shards()[0].samples);
    let (path, _) = file(first_of_shard1);
    let err = std::fs::read(&path).expect_err("a file of the failing shard read");
    let (other, want) = file(0);
    assert_eq!(
        std::fs::read(other).unwrap(),
        want,
        "shard 0 stopped working"
    );
    let status = m.status();
    let recent = status["errors"]["recent"][0].clone();
    assert_eq!(recent["shard"], shard1.as_str(), "{status}");
    (err.raw_os_error().unwrap_or(0), recent)
}

#[test]
fn a_missing_shard_object_is_enoent() {
    let (errno, recent) = errno_of(Failure::Missing);
    assert_eq!(errno, libc::ENOENT, "{recent}");
    assert_eq!(recent["errno"], "ENOENT");
}

#[test]
fn refused_credentials_are_eacces() {
    let (errno, recent) = errno_of(Failure::Refused);
    assert_eq!(errno, libc::EACCES, "{recent}");
    assert_eq!(recent["errno"], "EACCES");
    assert!(
        recent["why"].as_str().unwrap().contains("ccess"),
        "{recent}"
    );
}

#[test]
fn a_shard_damaged_on_every_download_is_eio() {
    let (errno, recent) = errno_of(Failure::Damaged);
    assert_eq!(errno, libc::EIO, "{recent}");
    assert_eq!(recent["errno"], "EIO");
}

#[test]
fn a_stalled_store_is_etimedout() {
    let (errno, recent) = errno_of(Failure::Stalled);
    assert_eq!(errno, libc::ETIMEDOUT, "{recent}");
    assert_eq!(recent["errno"], "ETIMEDOUT");
}
