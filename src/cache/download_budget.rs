//! `DownloadBudget`: bounds the bytes of shards being downloaded at once.
//!
//! A whole shard is held in memory from its first byte until it is verified and written to the
//! cache disk. With several fetches in flight that is the daemon's largest use of memory, so
//! fills take their shard's size from this budget before downloading and give it back once the
//! shard is on disk. A shard larger than the whole budget takes all of it (one at a time);
//! nothing ever waits for room that cannot appear.
//!
//! Reads come first: a download a read is blocked on (a demand) is let in before any waiting
//! prefetch. (Letting it past the budget instead was tried: with several readers starting at
//! once, three shards then share the link where two did, and the first of them lands later.)

use std::sync::{Condvar, Mutex};

/// Who waits for a download: a reader, or the readahead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Urgency {
    /// A read is blocked on this shard: it goes before every waiting prefetch.
    Demand,
    /// Fetched ahead of need: waits for room, and while any demand download waits.
    Prefetch,
}

/// A byte budget shared by the fills of one cache.
#[derive(Debug)]
pub struct DownloadBudget {
    limit: u64,
    state: Mutex<BudgetState>,
    freed: Condvar,
}

#[derive(Debug, Default)]
struct BudgetState {
    /// Bytes taken.
    used: u64,
    /// Demand downloads waiting for room.
    demands_waiting: u32,
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
            state: Mutex::new(BudgetState::default()),
            freed: Condvar::new(),
        }
    }

    /// Waits until `bytes` (at most the whole budget) fit, then takes them; while a
    /// [`Urgency::Demand`] download waits, no prefetch is let in.
    pub fn acquire(&self, bytes: u64, urgency: Urgency) -> DownloadPermit<'_> {
        if self.limit == 0 {
            return DownloadPermit {
                budget: self,
                bytes: 0,
            };
        }
        let bytes = bytes.min(self.limit);
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let demand = urgency == Urgency::Demand;
        if demand {
            st.demands_waiting += 1;
        }
        loop {
            let fits = st.used == 0 || st.used.saturating_add(bytes) <= self.limit;
            if fits && (demand || st.demands_waiting == 0) {
                break;
            }
            st = self.freed.wait(st).unwrap_or_else(|p| p.into_inner());
        }
        st.used += bytes;
        if demand {
            st.demands_waiting -= 1;
            if st.demands_waiting == 0 {
                // Prefetches that found room but let this read go first: look again.
                drop(st);
                self.freed.notify_all();
            }
        }
        DownloadPermit {
            budget: self,
            bytes,
        }
    }

    /// Bytes taken now (shards being downloaded and not yet on disk; 0 when unbounded).
    pub fn in_use(&self) -> u64 {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).used
    }
}

impl Drop for DownloadPermit<'_> {
    fn drop(&mut self) {
        if self.bytes == 0 {
            return;
        }
        let mut st = self.budget.state.lock().unwrap_or_else(|p| p.into_inner());
        st.used = st.used.saturating_sub(self.bytes);
        drop(st);
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
                    let _p = budget.acquire(want, Urgency::Prefetch);
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
        let _a = free.acquire(1 << 40, Urgency::Prefetch);
        let _b = free.acquire(1 << 40, Urgency::Demand);
        assert_eq!(free.in_use(), 0);
    }

    /// Starts a thread that takes `bytes` with `urgency`, reports on `tx` when it holds
    /// them, and keeps them until `hold` is dropped.
    fn taker(
        budget: &Arc<DownloadBudget>,
        name: &'static str,
        bytes: u64,
        urgency: Urgency,
        tx: &std::sync::mpsc::Sender<&'static str>,
    ) -> (std::sync::mpsc::Sender<()>, std::thread::JoinHandle<()>) {
        let (hold_tx, hold) = std::sync::mpsc::channel::<()>();
        let (budget, tx) = (budget.clone(), tx.clone());
        let t = std::thread::spawn(move || {
            let _p = budget.acquire(bytes, urgency);
            let _ = tx.send(name);
            let _ = hold.recv();
        });
        (hold_tx, t)
    }

    fn quiet(rx: &std::sync::mpsc::Receiver<&'static str>) -> bool {
        rx.recv_timeout(std::time::Duration::from_millis(100))
            .is_err()
    }

    #[test]
    fn a_read_goes_before_waiting_prefetches() {
        let budget = Arc::new(DownloadBudget::new(100));
        let (tx, rx) = std::sync::mpsc::channel();
        let (p1, t1) = taker(&budget, "p1", 60, Urgency::Prefetch, &tx);
        let (p2, t2) = taker(&budget, "p2", 40, Urgency::Prefetch, &tx);
        let mut first = [rx.recv().expect("p"), rx.recv().expect("p")];
        first.sort();
        assert_eq!(first, ["p1", "p2"]);
        // Full: the read waits.
        let (d, td) = taker(&budget, "demand", 50, Urgency::Demand, &tx);
        assert!(quiet(&rx));
        let (p3, t3) = taker(&budget, "p3", 10, Urgency::Prefetch, &tx);
        assert!(quiet(&rx));
        // 40 free: the prefetch would fit but the read waiting first keeps it out.
        drop(p2);
        t2.join().expect("p2");
        assert!(quiet(&rx), "the prefetch does not pass the waiting read");
        drop(p1);
        t1.join().expect("p1");
        // Both fit now (the read first; their reports may come in either order).
        let mut next = [rx.recv().expect("taker"), rx.recv().expect("taker")];
        next.sort();
        assert_eq!(next, ["demand", "p3"]);
        assert_eq!(budget.in_use(), 60);
        for (h, t) in [(d, td), (p3, t3)] {
            drop(h);
            t.join().expect("join");
        }
        assert_eq!(budget.in_use(), 0);
    }
}
