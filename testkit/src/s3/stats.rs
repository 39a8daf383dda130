//! Counters the harness reads from `GET /__bench/stats` (no auth, no latency): requests per
//! operation and bytes served, so each benchmark pass can report what it fetched; and the
//! requests seen per key, which the tests read in process.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// Server-wide counters (monotonic; the harness takes differences).
#[derive(Debug, Default)]
pub struct Stats {
    /// GetObject requests (with or without a range).
    pub gets: AtomicU64,
    /// GetObject requests that carried a Range header.
    pub range_gets: AtomicU64,
    /// HeadObject requests.
    pub heads: AtomicU64,
    /// ListObjects and ListObjectsV2 requests.
    pub lists: AtomicU64,
    /// Every other S3 request (HeadBucket, ListBuckets, ...), and errors.
    pub other: AtomicU64,
    /// Object body bytes sent by GetObject.
    pub body_bytes: AtomicU64,
    /// All bytes written to client sockets (headers, XML and bodies).
    pub wire_bytes: AtomicU64,
    /// PutObject and UploadPart requests.
    pub puts: AtomicU64,
    /// Object body bytes received by PutObject and UploadPart.
    pub put_bytes: AtomicU64,
    /// PutObject and UploadPart requests whose body matched the `x-amz-checksum-crc64nvme`
    /// they carried (one that does not match is refused with BadDigest).
    pub checked_puts: AtomicU64,
    /// All bytes read from client sockets (requests and their bodies).
    pub wire_bytes_in: AtomicU64,
    /// Connections accepted.
    pub connections: AtomicU64,
    /// Requests seen per key.
    seen: Mutex<HashMap<String, Seen>>,
}

/// Requests seen for one key.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Seen {
    /// GetObject without a range.
    pub gets: u64,
    /// GetObject with a range.
    pub range_gets: u64,
    /// HeadObject.
    pub heads: u64,
    /// Bytes of the bodies started (what the answers announced).
    pub bytes: u64,
}

impl Stats {
    /// The counters as a JSON object.
    pub fn to_json(&self) -> String {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        format!(
            "{{\"gets\":{},\"range_gets\":{},\"heads\":{},\"lists\":{},\"other\":{},\
             \"body_bytes\":{},\"wire_bytes\":{},\"connections\":{},\"puts\":{},\
             \"put_bytes\":{},\"wire_bytes_in\":{},\"checked_puts\":{}}}",
            g(&self.gets),
            g(&self.range_gets),
            g(&self.heads),
            g(&self.lists),
            g(&self.other),
            g(&self.body_bytes),
            g(&self.wire_bytes),
            g(&self.connections),
            g(&self.puts),
            g(&self.put_bytes),
            g(&self.wire_bytes_in),
            g(&self.checked_puts)
        )
    }

    /// Adds to what was seen for `key`.
    pub fn see(&self, key: &str, f: impl FnOnce(&mut Seen)) {
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        // The key is copied only the first time it is seen.
        match seen.get_mut(key) {
            Some(s) => f(s),
            None => f(seen.entry(key.to_string()).or_default()),
        }
    }

    /// Requests seen for `key`.
    pub fn seen(&self, key: &str) -> Seen {
        let seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        seen.get(key).copied().unwrap_or_default()
    }

    /// Requests seen over all keys.
    pub fn seen_total(&self) -> Seen {
        let seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        seen.values().fold(Seen::default(), |mut a, s| {
            a.gets += s.gets;
            a.range_gets += s.range_gets;
            a.heads += s.heads;
            a.bytes += s.bytes;
            a
        })
    }
}
