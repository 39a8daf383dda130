//! The loopback S3 server (built on the `s3s` crate) run in process for the tests: it
//! verifies SigV4 (one access key), serves buckets of objects put in memory (GetObject with ranges, HeadObject, ListObjects with pagination), takes writes (PutObject, multipart uploads, DeleteObject), counts requests per key,
//! and injects faults by rule at the protocol level: 503 SlowDown, 500, dropped connections,
//! bodies cut short (the advertised Content-Length is not met), corrupted bytes, latency and
//! a bandwidth cap. The soak (`bench/soak.sh`) injects its faults at random through the same
//! code.
//!
//! It runs on its own thread and runtime, so blocking clients in the test thread can use it.

use super::bucket::{Buckets, EtagMode};
use super::faults::{Faults, ServerFault};
use super::serve::{serve, Link};
use super::stats::{Seen, Stats};
use bytes::Bytes;
use std::path::Path;
use std::sync::Arc;

/// The access key the server accepts.
pub const ACCESS_KEY: &str = "shardfs-test-key";
/// The matching secret.
pub const SECRET_KEY: &str = "shardfs-test-secret";

/// A running server.
pub struct FakeS3 {
    /// `http://127.0.0.1:PORT`.
    pub endpoint: String,
    buckets: Arc<Buckets>,
}

impl FakeS3 {
    /// Starts a server with no objects, opaque ETags (not MD5s) and no random faults.
    pub fn start() -> FakeS3 {
        Self::start_with(EtagMode::Opaque)
    }

    /// Starts a server with no objects, ETags of kind `etags` and no random faults.
    pub fn start_with(etags: EtagMode) -> FakeS3 {
        Self::start_at("127.0.0.1", etags)
    }

    /// Starts a server listening on `ip` (an address of a loopback device) at a free port.
    pub fn start_at(ip: &str, etags: EtagMode) -> FakeS3 {
        Self::start_linked(ip, etags, Link::default())
    }

    /// Starts a server on `ip` that emulates `link` (latency per request, bandwidth cap per
    /// connection each way).
    pub fn start_linked(ip: &str, etags: EtagMode, link: Link) -> FakeS3 {
        let ip = ip.to_string();
        let no_faults = Arc::new(Faults::new(0.0, Vec::new(), Default::default(), 0));
        let buckets = Arc::new(Buckets::new(Arc::new(Stats::default()), etags, no_faults));
        let (tx, rx) = std::sync::mpsc::channel();
        let served = buckets.clone();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::bind((ip.as_str(), 0))
                    .await
                    .unwrap();
                let addr = listener.local_addr().unwrap();
                tx.send((addr.ip(), addr.port())).unwrap();
                serve(listener, served, ACCESS_KEY, SECRET_KEY, link).await;
            });
        });
        let (ip, port) = rx.recv().expect("the S3 server did not start");
        FakeS3 {
            endpoint: format!("http://{ip}:{port}"),
            buckets,
        }
    }

    /// Whether a HEAD asking with checksum mode gets the object's CRC64NVME (off at start).
    pub fn answer_checksum_mode(&self, on: bool) {
        self.buckets
            .checksum_mode
            .store(on, std::sync::atomic::Ordering::Relaxed);
    }

    /// Whether unsigned GETs and HEADs are served, as a public bucket serves them (off at
    /// start: every request must be signed).
    pub fn allow_unsigned_reads(&self, on: bool) {
        self.buckets
            .public_read
            .store(on, std::sync::atomic::Ordering::Relaxed);
    }

    /// Stores one object.
    pub fn put(&self, bucket: &str, key: &str, data: impl Into<Bytes>) {
        self.buckets.put(bucket, key, data.into());
    }

    /// Stores every file under `dir` as `prefix/<relative path>`.
    pub fn put_dir(&self, bucket: &str, prefix: &str, dir: &Path) {
        for rel in crate::files_under(dir) {
            let key = if prefix.is_empty() {
                rel.clone()
            } else {
                format!("{prefix}/{rel}")
            };
            self.put(bucket, &key, std::fs::read(dir.join(&rel)).unwrap());
        }
    }

    /// Adds a fault rule for `key` (full key in the bucket, or any when `None`), `times`
    /// times (forever when `None`).
    pub fn inject(&self, fault: ServerFault, key: Option<&str>, times: Option<u64>) {
        self.buckets.rules.add(fault, key, times);
    }

    /// Removes all fault rules.
    pub fn clear_faults(&self) {
        self.buckets.rules.clear();
    }

    /// Requests seen for a full key.
    pub fn seen(&self, key: &str) -> Seen {
        self.buckets.stats.seen(key)
    }

    /// PutObject and UploadPart requests whose `x-amz-checksum-crc64nvme` the server checked
    /// against their body (and found right).
    pub fn checked_puts(&self) -> u64 {
        self.buckets
            .stats
            .checked_puts
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Sum of requests over all keys.
    pub fn seen_total(&self) -> Seen {
        self.buckets.stats.seen_total()
    }
}
