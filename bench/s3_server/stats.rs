//! Counters the harness reads from `GET /__bench/stats` (no auth, no latency): requests per
//! operation and bytes served, so each benchmark pass can report what it fetched.

use std::sync::atomic::{AtomicU64, Ordering};

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
    /// Connections accepted.
    pub connections: AtomicU64,
}

impl Stats {
    /// The counters as a JSON object.
    pub fn to_json(&self) -> String {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        format!(
            "{{\"gets\":{},\"range_gets\":{},\"heads\":{},\"lists\":{},\"other\":{},\
             \"body_bytes\":{},\"wire_bytes\":{},\"connections\":{}}}",
            g(&self.gets),
            g(&self.range_gets),
            g(&self.heads),
            g(&self.lists),
            g(&self.other),
            g(&self.body_bytes),
            g(&self.wire_bytes),
            g(&self.connections)
        )
    }
}
