//! `DownloadBudget`: bounds the bytes of shards being downloaded at once.
//!
//! A whole shard is held in memory from its first byte until it is verified and written to the
//! cache disk. With several fetches in flight that is the daemon's largest use of memory, so
//! fills take their shard's size from this budget before downloading and give it back once the
//! shard is on disk. A shard larger than the whole budget takes all of it (one at a time);
//! nothing ever waits for room that cannot appear.

use std::sync::{Condvar, Mutex};

/// A byte budget shared by the fills of one cache.
#[derive(Debug)]
pub struct DownloadBudget {
    limit: u64,
    used: Mutex<u64>,
    freed: Condvar,
}

/// Bytes taken from a [`DownloadBudget`], given back on drop.
#[derive(Debug)]
pub struct DownloadPermit<'a> {
    budget: &'a DownloadBudget,
    bytes: u64,
}

impl DownloadBudget {
    /// A budget of `limit` bytes (0: no bound).
    pub fn new(limit: u64) -> Self {
        Self {
            limit,
            used: Mutex::new(0),
            freed: Condvar::new(),
        }
    }

    /// Waits until `bytes` (at most the whole budget) fit, then takes them.
    pub fn acquire(&self, bytes: u64) -> DownloadPermit<'_> {
        if self.limit == 0 {
            return DownloadPermit {
                budget: self,
                bytes: 0,
            };
        }
        let bytes = bytes.min(self.limit);
        let mut used = self.used.lock().unwrap_or_else(|p| p.into_inner());
        while *used > 0 && used.saturating_add(bytes) > self.limit {
            used = self.freed.wait(used).unwrap_or_else(|p| p.into_inner());
        }
        *used += bytes;
        DownloadPermit {
            budget: self,
            bytes,
        }
    }

    /// Bytes taken now.
    #[cfg(test)]
    pub fn in_use(&self) -> u64 {
        *self.used.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Drop for DownloadPermit<'_> {
    fn drop(&mut self) {
        if self.bytes == 0 {
            return;
        }
        let mut used = self.budget.used.lock().unwrap_or_else(|p| p.into_inner());
        *used = used.saturating_sub(self.bytes);
        drop(used);
        self.budget.freed.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;

    #[test]
    fn holders_never_exceed_the_budget_and_big_ones_go_alone() {
        let budget = Arc::new(DownloadBudget::new(100));
        let peak = Arc::new(AtomicU64::new(0));
        let threads: Vec<_> = [30u64, 60, 250, 40, 100, 10, 70]
            .into_iter()
            .map(|want| {
                let (budget, peak) = (budget.clone(), peak.clone());
                std::thread::spawn(move || {
                    let _p = budget.acquire(want);
                    peak.fetch_max(budget.in_use(), Ordering::SeqCst);
                    std::thread::sleep(std::time::Duration::from_millis(5));
                })
            })
            .collect();
        for t in threads {
            t.join().expect("thread");
        }
        assert!(peak.load(Ordering::SeqCst) <= 100);
        assert_eq!(budget.in_use(), 0);
        // No bound: nothing is counted or waited for.
        let free = DownloadBudget::new(0);
        let _a = free.acquire(1 << 40);
        let _b = free.acquire(1 << 40);
        assert_eq!(free.in_use(), 0);
    }
}
