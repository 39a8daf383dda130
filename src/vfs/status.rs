//! Failures worth showing in `status.json`: which shard failed and why, most recent first.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::SystemTime;

use super::error::{errno_name, FailedOp};
use crate::status::{ErrorAnswers, ErrorsStatus, ShardFailure};

const KEEP: usize = 32;
/// A failure of the same shard for the same reason within this many seconds of the last one
/// is the same failure seen again (a file's lookup and then its read), not a new one.
const SAME_FAILURE_SECS: u64 = 2;

/// The last few shard failures and how many there were.
#[derive(Default)]
pub struct ErrorLog {
    inner: Mutex<(u64, VecDeque<ShardFailure>)>,
    /// Requests answered with an error because of a shard failure, by kind (every one,
    /// repeats included): tells failed reads from failed look-ups of file sizes.
    read_answers: AtomicU64,
    size_answers: AtomicU64,
}

impl ErrorLog {
    /// Records that `shard` of the dataset at `store` failed with `error` while answering a
    /// request of kind `op` with `errno` (also logged, one line naming them and the error's
    /// whole source chain); a repeat of the latest failure within [`SAME_FAILURE_SECS`] only
    /// refreshes its time (the answer still counts).
    pub fn record(
        &self,
        store: &str,
        shard: &str,
        error: &(dyn std::error::Error + 'static),
        op: FailedOp,
        errno: i32,
    ) {
        let why = crate::store::error_chain(error);
        let errno = errno_name(errno);
        let answers = match op {
            FailedOp::Read => &self.read_answers,
            FailedOp::Size => &self.size_answers,
        };
        answers.fetch_add(1, Relaxed);
        let at = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(last) = g.1.front_mut() {
            let recent = at.saturating_sub(last.unix_time) <= SAME_FAILURE_SECS;
            if recent && last.store == store && last.shard == shard && last.why == why {
                last.errno = errno.into();
                last.unix_time = at;
                return;
            }
        }
        tracing::error!(
            store,
            shard,
            why,
            errno,
            ?op,
            "shard unavailable: requests for its samples fail"
        );
        g.0 += 1;
        g.1.push_front(ShardFailure {
            store: store.into(),
            shard: shard.into(),
            why,
            errno: errno.into(),
            unix_time: at,
        });
        g.1.truncate(KEEP);
    }

    /// The count, the latest failures and the answers, for `status.json`.
    pub fn snapshot(&self) -> ErrorsStatus {
        let g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        ErrorsStatus {
            count: g.0,
            recent: g.1.iter().cloned().collect(),
            answers: ErrorAnswers {
                read: self.read_answers.load(Relaxed),
                size: self.size_answers.load(Relaxed),
            },
        }
    }
}
