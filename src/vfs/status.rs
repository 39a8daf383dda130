//! Failures worth showing in `status.json`: which shard failed and why, most recent first.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::SystemTime;

const KEEP: usize = 32;

/// The last few shard failures and how many there were.
#[derive(Default)]
pub struct ErrorLog {
    inner: Mutex<(u64, VecDeque<serde_json::Value>)>,
}

impl ErrorLog {
    /// Records that `shard` failed for `why` (also logged).
    pub fn record(&self, shard: &str, why: &str) {
        tracing::error!(
            shard,
            why,
            "shard unavailable: reads of its samples return EIO"
        );
        let at = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        g.0 += 1;
        g.1.push_front(serde_json::json!({"shard": shard, "why": why, "unix_time": at}));
        g.1.truncate(KEEP);
    }

    /// `{"count": n, "recent": [...]}`.
    pub fn to_json(&self) -> serde_json::Value {
        let g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        serde_json::json!({"count": g.0, "recent": g.1})
    }
}
