//! Failures worth showing in `status.json`: which shard failed and why, most recent first.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::SystemTime;

const KEEP: usize = 32;
/// A failure of the same shard for the same reason within this many seconds of the last one
/// is the same failure seen again (a file's lookup and then its read), not a new one.
const SAME_FAILURE_SECS: u64 = 2;

/// The last few shard failures and how many there were.
#[derive(Default)]
pub struct ErrorLog {
    inner: Mutex<(u64, VecDeque<serde_json::Value>)>,
}

impl ErrorLog {
    /// Records that `shard` of the dataset at `store` failed for `why` (also logged, one
    /// line naming all three); a repeat of the latest failure within [`SAME_FAILURE_SECS`]
    /// only refreshes its time.
    pub fn record(&self, store: &str, shard: &str, why: &str) {
        let at = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(last) = g.1.front_mut() {
            let recent = last["unix_time"]
                .as_u64()
                .is_some_and(|t| at.saturating_sub(t) <= SAME_FAILURE_SECS);
            if recent && last["store"] == store && last["shard"] == shard && last["why"] == why {
                last["unix_time"] = at.into();
                return;
            }
        }
        tracing::error!(
            store,
            shard,
            why,
            "shard unavailable: reads of its samples return EIO"
        );
        g.0 += 1;
        g.1.push_front(
            serde_json::json!({"store": store, "shard": shard, "why": why, "unix_time": at}),
        );
        g.1.truncate(KEEP);
    }

    /// `{"count": n, "recent": [...]}`.
    pub fn to_json(&self) -> serde_json::Value {
        let g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        serde_json::json!({"count": g.0, "recent": g.1})
    }
}
