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
//!
//! The budget also keeps the buffers downloads were made into ([`DownloadBuffer`]) for the
//! next downloads. A fresh 64 MiB buffer costs ~16k page faults, each handing the process a
//! zeroed page (28 ms per 64 MiB on this project's bench machine, against 5 ms to fill a
//! reused one), and giving it back to the kernel afterwards makes RSS swing by a shard at a
//! time. A buffer carries its download's bytes with it: they stay taken until the buffer's
//! last user lets go (readers copying from the verified shard may outlive the fill), and
//! then the buffer is kept if the bytes taken plus the kept buffers stay within the budget
//! (or within the budget plus its loan, below). So memory stays within that bound, and the
//! next download finds the buffer waiting.
//! Buffers unused for [`IDLE_BUFFER_LIFETIME`] are freed ([`DownloadBudget::free_idle`]).
//!
//! A download may also borrow past the limit, up to a `loan` bound, bytes its caller says are
//! free elsewhere now ([`DownloadBudget::acquire_with_loan`]: the memory tier's unused share,
//! on a cold start). Bytes taken or kept past the limit are [`DownloadBudget::lent`]: the
//! buffers borrowed bytes were in are kept too (up to the limit plus the loan, and only a
//! buffer whose own download's bytes were taken: not a retry's second buffer, not a shard
//! larger than the limit), and the lender takes its share back when it needs it
//! ([`DownloadBudget::free_kept_past`], which frees kept buffers past the limit, largest
//! first, until what the lender can spare is left).
//!
//! Keeping borrowed buffers matters on a cold start, when nearly every shard would come in a
//! fresh buffer: a profile had the kernel zeroing fresh pages at a fifth of the daemon's CPU.
//! Keeping them with no way for the lender to take them back was tried twice: on 2026-11-28
//! (daemon CPU of the cold pass 11-18 % lower, peak RSS 340-347 MB against ~290) and on
//! 2026-11-29 with the page-cache pusher in place (CPU per cold GB 0.82x, peak RSS 400-420 MB),
//! both over `--memory-limit` + 64 MiB: kept buffers are resident whole while the tier fills
//! its share beside them. Counted as lent, and freed when the tier wants room, they
//! held peak RSS at 293-297 MB with CPU per cold GB at 0.82x (bench/RESULTS.md, 2026-11-29).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::time::{Duration, Instant};

use super::io::direct::AlignedBuf;

/// How long a kept download buffer may stay unused before it is freed.
pub const IDLE_BUFFER_LIFETIME: Duration = Duration::from_secs(30);

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
    /// Most bytes taken past `limit` at once (borrowed; see [`DownloadBudget::acquire_with_loan`]).
    loan: u64,
    state: Mutex<BudgetState>,
    /// `state.used + state.idle_bytes`, readable without the lock (for
    /// [`DownloadBudget::lent`], asked on reads).
    held_now: AtomicU64,
    /// Download buffers made of fresh memory so far.
    made: AtomicU64,
    /// Download buffers that were kept buffers so far.
    reused: AtomicU64,
    /// A buffer is being made ready ([`DownloadBudget::prepare_in_background`]).
    preparing: AtomicBool,
    /// Buffers made ready ahead of a download so far.
    prepared: AtomicU64,
    freed: Condvar,
}

#[derive(Debug, Default)]
struct BudgetState {
    /// Bytes taken.
    used: u64,
    /// Demand downloads waiting for room.
    demands_waiting: u32,
    /// Buffers of finished downloads, kept for the next ones, with when each came back.
    idle: Vec<(AlignedBuf, Instant)>,
    /// Their bytes (capacity).
    idle_bytes: u64,
}

/// Bytes taken from a [`DownloadBudget`], given back on drop (those not handed to a
/// [`DownloadBuffer`]).
#[derive(Debug)]
pub struct DownloadPermit<'a> {
    budget: &'a Arc<DownloadBudget>,
    bytes: AtomicU64,
}

/// A buffer for one download, from [`DownloadPermit::buffer`]: `len` bytes whose contents
/// are unspecified (bytes of an earlier download, or zeros), which the download overwrites
/// whole. It holds bytes of its permit until dropped; then it is kept for the next download
/// when the budget has room for it.
#[derive(Debug)]
pub struct DownloadBuffer {
    /// Block-aligned, so the shard can be written to the cache file past the page cache.
    data: AlignedBuf,
    home: Weak<DownloadBudget>,
    /// Bytes of the budget this buffer holds taken.
    taken: u64,
}

impl DownloadBudget {
    /// A budget of `limit` bytes (0: no bound) that never borrows.
    #[cfg(test)]
    pub fn new(limit: u64) -> Self {
        Self::with_loan(limit, 0)
    }

    /// A budget of `limit` bytes that may borrow up to `loan` bytes more
    /// ([`DownloadBudget::acquire_with_loan`]).
    pub fn with_loan(limit: u64, loan: u64) -> Self {
        Self {
            limit,
            loan: if limit == 0 { 0 } else { loan },
            state: Mutex::new(BudgetState::default()),
            held_now: AtomicU64::new(0),
            made: AtomicU64::new(0),
            reused: AtomicU64::new(0),
            preparing: AtomicBool::new(false),
            prepared: AtomicU64::new(0),
            freed: Condvar::new(),
        }
    }

    /// Waits until `bytes` (at most the whole budget) fit, then takes them; while a
    /// [`Urgency::Demand`] download waits, no prefetch is let in. Kept buffers that no
    /// longer fit beside the bytes taken are freed, except one this download can use.
    #[cfg(test)]
    pub fn acquire<'a>(self: &'a Arc<Self>, bytes: u64, urgency: Urgency) -> DownloadPermit<'a> {
        self.acquire_with_loan(bytes, urgency, &|| 0)
    }

    /// [`DownloadBudget::acquire`], letting the bytes taken go past the limit by what
    /// `lendable()` says is free elsewhere now (asked each time room is looked for), up to the
    /// budget's loan bound: then [`DownloadBudget::lent`] is the excess.
    pub fn acquire_with_loan<'a>(
        self: &'a Arc<Self>,
        bytes: u64,
        urgency: Urgency,
        lendable: &dyn Fn() -> u64,
    ) -> DownloadPermit<'a> {
        if self.limit == 0 {
            return DownloadPermit {
                budget: self,
                bytes: AtomicU64::new(0),
            };
        }
        let bytes = bytes.min(self.limit);
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let demand = urgency == Urgency::Demand;
        if demand {
            st.demands_waiting += 1;
        }
        loop {
            let room = |st: &BudgetState| {
                let wanted = st.used.saturating_add(bytes);
                wanted <= self.limit
                    || (self.loan > 0
                        && wanted <= self.limit.saturating_add(self.loan.min(lendable())))
            };
            let fits = st.used == 0 || room(&st);
            if fits && (demand || st.demands_waiting == 0) {
                break;
            }
            st = self.freed.wait(st).unwrap_or_else(|p| p.into_inner());
        }
        st.used += bytes;
        let mut notify = false;
        if demand {
            st.demands_waiting -= 1;
            // Prefetches that found room but let this read go first: look again.
            notify = st.demands_waiting == 0;
        }
        // Kept buffers stay within what the lender has free now (the loan taken included).
        let keep_within = self
            .limit
            .saturating_add(self.loan.min(lendable()))
            .max(st.used);
        let surplus = trim_idle(&mut st, keep_within, bytes);
        self.publish(&st);
        drop(st);
        drop(surplus);
        if notify {
            self.freed.notify_all();
        }
        DownloadPermit {
            budget: self,
            bytes: AtomicU64::new(bytes),
        }
    }

    /// Bytes taken now (shards being downloaded and not yet on disk; 0 when unbounded).
    pub fn in_use(&self) -> u64 {
        self.lock().used
    }

    /// Bytes taken or kept past the limit now: borrowed through
    /// [`DownloadBudget::acquire_with_loan`], and the kept buffers they came back in.
    pub fn lent(&self) -> u64 {
        if self.loan == 0 {
            return 0;
        }
        self.held_now
            .load(Ordering::Relaxed)
            .saturating_sub(self.limit)
    }

    /// Frees kept buffers, largest first, until the bytes taken and kept are within the
    /// limit plus `spare` (what the lender can still do without: it wants the rest of its
    /// share back); returns the bytes freed.
    pub fn free_kept_past(&self, spare: u64) -> u64 {
        let out = {
            let mut st = self.lock();
            let out = take_largest_past(&mut st, self.limit.saturating_add(spare));
            self.publish(&st);
            out
        };
        // Freed outside the lock: unmapping MiBs takes a moment.
        out.iter().map(|b| b.capacity() as u64).sum()
    }

    /// Makes the bytes taken and kept readable without the lock; called with it held, after
    /// every change to them.
    fn publish(&self, st: &BudgetState) {
        self.held_now
            .store(st.used.saturating_add(st.idle_bytes), Ordering::Relaxed);
    }

    /// Makes a buffer of `len` bytes ready for the next download, on a thread of its own,
    /// unless one is being made, a kept buffer is large enough, a download is under way (its
    /// buffer comes back when it ends), or the buffer would not fit beside the kept ones:
    /// fresh memory with every page mapped in, kept like a finished download's buffer (freed
    /// after [`IDLE_BUFFER_LIFETIME`] unused). While it is made its bytes count as taken, so a
    /// download that starts meanwhile waits for it (or borrows) rather than faulting in a
    /// second buffer beside it. A download's first touch of fresh pages costs a page fault and
    /// a zeroed page each (~45 ms of one CPU per 64 MiB on the bench machine, and more while
    /// the host hands the VM those pages), on the critical path of a cold start's first file;
    /// made ahead, that cost is paid before the first read.
    pub fn prepare_in_background(self: &Arc<Self>, len: usize) {
        let cap = keepable_capacity(len) as u64;
        if self.limit == 0 || cap > self.limit || self.preparing.swap(true, Ordering::AcqRel) {
            return;
        }
        let taken = {
            let mut st = self.lock();
            let ready = st.used > 0 || best_fit(&st.idle, len).is_some();
            if ready || st.idle_bytes + cap > self.limit {
                None
            } else {
                st.used += cap;
                self.publish(&st);
                Some(cap)
            }
        };
        let Some(taken) = taken else {
            self.preparing.store(false, Ordering::Release);
            return;
        };
        let budget = Arc::clone(self);
        let spawned = std::thread::Builder::new()
            .name("shardfs-prepare".into())
            .spawn(move || {
                let started = Instant::now();
                let kept = budget.prepare(len, taken);
                budget.preparing.store(false, Ordering::Release);
                tracing::debug!(
                    bytes = len,
                    kept,
                    ms = started.elapsed().as_millis() as u64,
                    "made a download buffer ready"
                );
            });
        if let Err(e) = spawned {
            let _kept = self.give_back(AlignedBuf::empty(), taken);
            self.preparing.store(false, Ordering::Release);
            tracing::debug!(error = %e, "cannot start a thread to make a download buffer ready");
        }
    }

    /// Makes a buffer of `len` bytes (the largest download it is for) with every page mapped
    /// in, then gives back the `taken` bytes it held and keeps the buffer as
    /// [`DownloadBudget::give_back`] keeps a finished download's. True if it was kept.
    fn prepare(&self, len: usize, taken: u64) -> bool {
        let mut data = fresh_keepable(len);
        for page in data.chunks_mut(super::io::page_pool::PAGE) {
            // SAFETY: `page` is a valid, exclusive slice of at least one byte. Volatile, so
            // a zero stored into memory known to be zeroed is not left out.
            unsafe { std::ptr::write_volatile(page.as_mut_ptr(), 0) };
        }
        let kept = self.give_back(data, taken);
        if kept {
            self.prepared.fetch_add(1, Ordering::Relaxed);
        }
        kept
    }

    /// Bytes of buffers kept for the next downloads.
    pub fn idle_buffer_bytes(&self) -> u64 {
        self.lock().idle_bytes
    }

    /// Download buffers handed out so far: `(made of fresh memory, kept ones reused)`.
    pub fn buffers_handed_out(&self) -> (u64, u64) {
        (
            self.made.load(Ordering::Relaxed),
            self.reused.load(Ordering::Relaxed),
        )
    }

    /// Buffers made ready ahead of a download and kept so far
    /// ([`DownloadBudget::prepare_in_background`]; a download that takes one counts as reusing
    /// a kept buffer).
    pub fn buffers_prepared(&self) -> u64 {
        self.prepared.load(Ordering::Relaxed)
    }

    /// Frees the kept buffers unused for at least `age`; returns their bytes.
    pub fn free_idle(&self, age: Duration) -> u64 {
        let old: Vec<AlignedBuf> = {
            let mut st = self.lock();
            let (old, keep): (Vec<_>, Vec<_>) = std::mem::take(&mut st.idle)
                .into_iter()
                .partition(|(_, since)| since.elapsed() >= age);
            st.idle = keep;
            let old: Vec<AlignedBuf> = old.into_iter().map(|(b, _)| b).collect();
            st.idle_bytes -= old.iter().map(|b| b.capacity() as u64).sum::<u64>();
            self.publish(&st);
            old
        };
        // Freed outside the lock: unmapping MiBs takes a moment.
        old.iter().map(|b| b.capacity() as u64).sum()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BudgetState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The smallest kept buffer of at least `len` bytes, taken out of the kept ones.
    fn take_idle(&self, len: usize) -> Option<AlignedBuf> {
        let mut st = self.lock();
        let i = best_fit(&st.idle, len)?;
        let (b, _) = st.idle.swap_remove(i);
        st.idle_bytes -= b.capacity() as u64;
        self.publish(&st);
        Some(b)
    }

    /// A buffer's `taken` bytes come back, and `data` is kept when it fits beside the
    /// bytes taken and the other kept buffers within the limit, or within the limit plus the
    /// loan when it holds no more than its own download's bytes (rounded up as
    /// [`keepable_capacity`] does: so it takes no room the lender has not lent already; past
    /// the limit it counts as lent); else it is freed. True if it was kept.
    fn give_back(&self, data: AlignedBuf, taken: u64) -> bool {
        let size = data.capacity() as u64;
        let mut st = self.lock();
        st.used = st.used.saturating_sub(taken);
        let held = st.used + st.idle_bytes + size;
        let its_own =
            size <= keepable_capacity(usize::try_from(taken).unwrap_or(usize::MAX)) as u64;
        let keep = self.limit > 0
            && size > 0
            && (held <= self.limit || (its_own && held <= self.limit.saturating_add(self.loan)));
        if keep {
            st.idle_bytes += size;
            st.idle.push((data, Instant::now()));
        }
        self.publish(&st);
        drop(st);
        if taken > 0 {
            self.freed.notify_all();
        }
        // An unkept `data` is freed here, outside the lock.
        keep
    }
}

/// Index of the smallest buffer in `idle` of at least `len` bytes.
fn best_fit(idle: &[(AlignedBuf, Instant)], len: usize) -> Option<usize> {
    idle.iter()
        .enumerate()
        .filter(|(_, (b, _))| b.capacity() >= len)
        .min_by_key(|(_, (b, _))| b.capacity())
        .map(|(i, _)| i)
}

/// Takes out of `st` the kept buffers that do not fit beside the bytes taken, largest first,
/// sparing the one a download of `incoming` bytes would take (its bytes are counted in `used`
/// already). The caller frees them outside the lock.
fn trim_idle(st: &mut BudgetState, limit: u64, incoming: u64) -> Vec<AlignedBuf> {
    let spare = best_fit(&st.idle, usize::try_from(incoming).unwrap_or(usize::MAX))
        .map(|i| st.idle.swap_remove(i));
    let spared = spare.as_ref().map_or(0, |(b, _)| b.capacity() as u64);
    st.idle_bytes -= spared;
    let out = take_largest_past(st, limit);
    if let Some(kept) = spare {
        st.idle_bytes += spared;
        st.idle.push(kept);
    }
    out
}

/// Takes out of `st` kept buffers, largest first, until the bytes taken and kept are at most
/// `bound`. The caller frees them outside the lock.
fn take_largest_past(st: &mut BudgetState, bound: u64) -> Vec<AlignedBuf> {
    st.idle.sort_by_key(|(b, _)| b.capacity());
    let mut out = Vec::new();
    while st.used + st.idle_bytes > bound {
        let Some((b, _)) = st.idle.pop() else { break };
        st.idle_bytes -= b.capacity() as u64;
        out.push(b);
    }
    out
}

/// Frees the kept buffers of `budget` unused for [`IDLE_BUFFER_LIFETIME`], every third of
/// it, on a thread of its own, so an idle mount gives that memory back. The thread ends when
/// the returned handle is dropped (or the budget is gone).
pub fn free_idle_in_background(budget: &Arc<DownloadBudget>) -> IdleFreeing {
    let (stop, stopped) = std::sync::mpsc::channel::<()>();
    let weak: Weak<DownloadBudget> = Arc::downgrade(budget);
    let spawned = std::thread::Builder::new()
        .name("shardfs-free-idle".into())
        .spawn(move || {
            while let Err(std::sync::mpsc::RecvTimeoutError::Timeout) =
                stopped.recv_timeout(IDLE_BUFFER_LIFETIME / 3)
            {
                let Some(budget) = weak.upgrade() else { return };
                budget.free_idle(IDLE_BUFFER_LIFETIME);
            }
        });
    if let Err(e) = spawned {
        tracing::warn!(error = %e, "cannot start the thread that frees idle download buffers");
    }
    IdleFreeing { _stop: stop }
}

/// Keeps the thread of [`free_idle_in_background`] running while it lives.
#[derive(Debug)]
pub struct IdleFreeing {
    _stop: std::sync::mpsc::Sender<()>,
}

impl DownloadPermit<'_> {
    /// A buffer of `len` bytes for this permit's download: the smallest kept buffer that is
    /// large enough, else fresh zeroed memory. Up to `len` of the permit's bytes go with
    /// it and stay taken until the buffer is dropped.
    pub fn buffer(&self, len: usize) -> DownloadBuffer {
        let want = len as u64;
        let taken = match self
            .bytes
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |b| {
                Some(b - b.min(want))
            }) {
            Ok(before) | Err(before) => before.min(want),
        };
        let data = match self.budget.take_idle(len) {
            Some(mut b) => {
                self.budget.reused.fetch_add(1, Ordering::Relaxed);
                // Longer than needed: cut (no bytes are written); shorter cannot happen.
                b.set_len(len);
                b
            }
            None => {
                self.budget.made.fetch_add(1, Ordering::Relaxed);
                fresh_keepable(len)
            }
        };
        DownloadBuffer {
            data,
            home: Arc::downgrade(self.budget),
            taken,
        }
    }
}

impl Drop for DownloadPermit<'_> {
    fn drop(&mut self) {
        let bytes = *self.bytes.get_mut();
        if bytes == 0 {
            return;
        }
        let mut st = self.budget.lock();
        st.used = st.used.saturating_sub(bytes);
        self.budget.publish(&st);
        drop(st);
        self.budget.freed.notify_all();
    }
}

impl DownloadBuffer {
    #[cfg(test)]
    /// A buffer of `len` zeroed bytes that belongs to no budget (freed when dropped).
    pub fn unkept(len: usize) -> Self {
        Self {
            data: fresh(len),
            home: Weak::new(),
            taken: 0,
        }
    }
}

impl std::ops::Deref for DownloadBuffer {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.data
    }
}

impl std::ops::DerefMut for DownloadBuffer {
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.data
    }
}

impl AsMut<[u8]> for DownloadBuffer {
    fn as_mut(&mut self) -> &mut [u8] {
        self
    }
}

impl AsRef<[u8]> for DownloadBuffer {
    fn as_ref(&self) -> &[u8] {
        &self.data
    }
}

/// Buffers of at least this size are made a multiple of it, so a kept buffer also fits the
/// next shard when that one is a little larger (MDSWriter's shards all fall just under its
/// size limit, by varying amounts); an exact-size buffer fitted only the shorter half of them,
/// and a new 64 MiB buffer costs ~16k page faults.
const BUFFER_GRAIN: usize = 4 << 20;

/// The capacity [`fresh_keepable`] gives a buffer of `len` bytes.
fn keepable_capacity(len: usize) -> usize {
    if len < BUFFER_GRAIN {
        len.div_ceil(super::io::direct::ALIGN)
            .saturating_mul(super::io::direct::ALIGN)
    } else {
        len.div_ceil(BUFFER_GRAIN).saturating_mul(BUFFER_GRAIN)
    }
}

/// `len` zeroed, block-aligned bytes for a download that may be kept: the capacity is rounded
/// up to [`BUFFER_GRAIN`] when `len` is at least that.
fn fresh_keepable(len: usize) -> AlignedBuf {
    let mut b = fresh(keepable_capacity(len));
    b.set_len(len);
    b
}

/// `len` zeroed, block-aligned bytes. Running out of memory here is the same failure as
/// `vec![0; len]` would be.
fn fresh(len: usize) -> AlignedBuf {
    AlignedBuf::zeroed(len).unwrap_or_else(|_| {
        std::alloc::handle_alloc_error(
            std::alloc::Layout::from_size_align(len.max(1), 1)
                .unwrap_or(std::alloc::Layout::new::<u8>()),
        )
    })
}

impl Drop for DownloadBuffer {
    fn drop(&mut self) {
        if let Some(home) = self.home.upgrade() {
            let data = std::mem::replace(&mut self.data, AlignedBuf::empty());
            let _kept = home.give_back(data, self.taken);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Buffers are whole 4 KiB blocks (aligned for direct writes): sizes here are in blocks.
    const K: u64 = 4096;
    const KU: usize = 4096;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;

    /// Asserts that a demand download of `bytes`, with `lendable` free elsewhere, waits
    /// while `held` is taken and gets in once it is given back.
    fn waits_until_freed(
        budget: &Arc<DownloadBudget>,
        bytes: u64,
        lendable: u64,
        held: DownloadPermit<'_>,
    ) {
        let (tx, rx) = std::sync::mpsc::channel();
        let waiter = {
            let budget = budget.clone();
            std::thread::spawn(move || {
                let _p = budget.acquire_with_loan(bytes, Urgency::Demand, &|| lendable);
                tx.send(()).expect("send");
            })
        };
        assert!(rx
            .recv_timeout(std::time::Duration::from_millis(100))
            .is_err());
        drop(held);
        rx.recv().expect("in once the budget has room");
        waiter.join().expect("waiter");
    }

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
        let free = Arc::new(DownloadBudget::new(0));
        let _a = free.acquire(1 << 40, Urgency::Prefetch);
        let _b = free.acquire(1 << 40, Urgency::Demand);
        assert_eq!(free.in_use(), 0);
    }

    #[test]
    fn a_loan_lets_downloads_past_the_limit_by_what_is_free_and_no_further() {
        let budget = Arc::new(DownloadBudget::with_loan(100, 80));
        let free = AtomicU64::new(1000);
        let lendable = || free.load(Ordering::SeqCst);
        let a = budget.acquire_with_loan(60, Urgency::Prefetch, &lendable);
        assert_eq!(budget.lent(), 0, "within the limit");
        let b = budget.acquire_with_loan(60, Urgency::Prefetch, &lendable);
        assert_eq!((budget.in_use(), budget.lent()), (120, 20));
        // 180 is the most (the loan bound), whatever is free.
        let c = budget.acquire_with_loan(60, Urgency::Prefetch, &lendable);
        assert_eq!(budget.in_use(), 180);
        drop(c);
        // Only what the lender has free: 10 more now, so a 30-byte download waits.
        free.store(10, Ordering::SeqCst);
        waits_until_freed(&budget, 30, 10, b);
        drop(a);
        assert_eq!((budget.in_use(), budget.lent()), (0, 0));
        // Without a loan bound nothing is ever borrowed: a full budget makes the next wait
        // however much the lender has free.
        let plain = Arc::new(DownloadBudget::new(100));
        let full = plain.acquire_with_loan(100, Urgency::Prefetch, &lendable);
        waits_until_freed(&plain, 10, 1000, full);
    }

    /// Takes `n` permits of one grain each with `lendable` free at the lender, a buffer for
    /// each, and gives them all back.
    fn download_grains(budget: &Arc<DownloadBudget>, n: usize, lendable: u64) {
        let len = BUFFER_GRAIN;
        let permits: Vec<_> = (0..n)
            .map(|_| budget.acquire_with_loan(len as u64, Urgency::Prefetch, &|| lendable))
            .collect();
        let buffers: Vec<_> = permits.iter().map(|p| p.buffer(len)).collect();
        drop(buffers);
        drop(permits);
    }

    #[test]
    fn borrowed_buffers_are_kept_as_lent_until_the_lender_wants_its_share_back() {
        let g = BUFFER_GRAIN as u64;
        let budget = Arc::new(DownloadBudget::with_loan(2 * g, 1 << 30));
        download_grains(&budget, 4, 1 << 30);
        assert_eq!(budget.buffers_handed_out(), (4, 0));
        // All four are kept; the two past the limit count as lent.
        assert_eq!(budget.idle_buffer_bytes(), 4 * g);
        assert_eq!((budget.in_use(), budget.lent()), (0, 2 * g));
        // The next four downloads take them: no fresh memory.
        download_grains(&budget, 4, 1 << 30);
        assert_eq!(budget.buffers_handed_out(), (4, 4));
        // The lender takes its share back: the largest kept buffers past the limit go.
        assert_eq!(budget.free_kept_past(0), 2 * g);
        assert_eq!(budget.idle_buffer_bytes(), 2 * g);
        assert_eq!(budget.lent(), 0);
        assert_eq!(budget.free_kept_past(0), 0, "nothing past the limit");
        // A download while the lender has nothing free keeps no more than the limit: the
        // buffers past it are freed, except the one the download takes.
        download_grains(&budget, 4, 1 << 30);
        assert_eq!(budget.lent(), 2 * g);
        let p = budget.acquire(g, Urgency::Prefetch);
        assert_eq!(budget.in_use() + budget.idle_buffer_bytes(), 3 * g);
        let b = p.buffer(g as usize);
        assert_eq!((budget.idle_buffer_bytes(), budget.lent()), (g, 0));
        assert_eq!(budget.buffers_handed_out(), (6, 7));
        drop(b);
        drop(p);
        // The lender spares one grain: only the buffers past it go.
        download_grains(&budget, 4, 1 << 30);
        assert_eq!(budget.free_kept_past(g), g);
        assert_eq!(budget.lent(), g);
    }

    #[test]
    fn only_a_buffer_holding_its_own_download_s_bytes_is_kept_past_the_limit() {
        let g = BUFFER_GRAIN as u64;
        let budget = Arc::new(DownloadBudget::with_loan(2 * g, g));
        let lendable = || 1u64 << 30;
        // A retry's second buffer holds none of the permit's bytes: freed when past the
        // limit, while the first buffers, borrowed or not, are kept.
        let permits: Vec<_> = (0..3)
            .map(|_| budget.acquire_with_loan(g, Urgency::Prefetch, &lendable))
            .collect();
        let buffers: Vec<_> = permits.iter().map(|p| p.buffer(g as usize)).collect();
        let retry = permits[2].buffer(g as usize);
        drop(retry);
        assert_eq!(budget.idle_buffer_bytes(), 0);
        drop(buffers);
        drop(permits);
        assert_eq!((budget.idle_buffer_bytes(), budget.lent()), (3 * g, g));
        assert_eq!(budget.free_kept_past(0), g);
        // Buffers rounded up to the grain past their bytes: kept within the limit plus the
        // loan, and no further.
        let budget = Arc::new(DownloadBudget::with_loan(2 * g, g));
        let len = BUFFER_GRAIN + super::super::io::direct::ALIGN;
        let a = budget.acquire_with_loan(len as u64, Urgency::Prefetch, &lendable);
        let b = budget.acquire_with_loan(len as u64, Urgency::Prefetch, &lendable);
        let (ba, bb) = (a.buffer(len), b.buffer(len));
        assert_eq!(ba.data.capacity() as u64, 2 * g);
        // Past the limit plus the loan beside the other download's bytes: freed.
        drop(ba);
        drop(a);
        assert_eq!(budget.idle_buffer_bytes(), 0);
        drop(bb);
        drop(b);
        assert_eq!((budget.idle_buffer_bytes(), budget.lent()), (2 * g, 0));
    }

    /// Waits (up to 10 s) until `budget` keeps `bytes` of idle buffers.
    fn wait_for_idle_bytes(budget: &DownloadBudget, bytes: u64) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while budget.idle_buffer_bytes() != bytes {
            assert!(
                Instant::now() < deadline,
                "{} kept",
                budget.idle_buffer_bytes()
            );
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    #[test]
    fn a_buffer_made_ready_ahead_is_the_next_downloads_and_only_when_none_is_at_hand() {
        let len = 2 * BUFFER_GRAIN + 1;
        let cap = 3 * BUFFER_GRAIN as u64;
        let budget = Arc::new(DownloadBudget::new(4 * BUFFER_GRAIN as u64));
        budget.prepare_in_background(len);
        wait_for_idle_bytes(&budget, cap);
        assert_eq!(budget.buffers_prepared(), 1);
        assert_eq!(budget.buffers_handed_out(), (0, 0));
        assert_eq!(
            budget.in_use(),
            0,
            "its bytes count as taken only while it is made"
        );
        // A kept buffer is large enough: nothing more is made.
        budget.prepare_in_background(len);
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(budget.buffers_prepared(), 1);
        assert_eq!(budget.idle_buffer_bytes(), cap);
        // A larger one would not fit beside it: nothing is made (it would only be freed).
        budget.prepare_in_background(4 * BUFFER_GRAIN);
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(budget.buffers_prepared(), 1);
        assert_eq!(budget.idle_buffer_bytes(), cap);
        // The download takes it, with its pages already in.
        let p = budget.acquire(len as u64, Urgency::Demand);
        let b = p.buffer(len);
        assert_eq!(budget.buffers_handed_out(), (0, 1));
        assert_eq!(budget.idle_buffer_bytes(), 0);
        // While a download is under way (its buffer comes back to be kept), nothing is made.
        budget.prepare_in_background(len);
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(budget.buffers_prepared(), 1);
        drop(b);
        drop(p);
        assert_eq!(budget.idle_buffer_bytes(), cap);
        // Larger than the limit (once rounded up to the grain), or no limit: nothing is made.
        for (limit, want) in [
            (BUFFER_GRAIN as u64, len),
            (BUFFER_GRAIN as u64 + 1, BUFFER_GRAIN + 1),
            (0, len),
        ] {
            let other = Arc::new(DownloadBudget::new(limit));
            other.prepare_in_background(want);
            std::thread::sleep(Duration::from_millis(50));
            assert_eq!(other.buffers_prepared(), 0, "limit {limit}");
            assert_eq!(other.idle_buffer_bytes(), 0);
        }
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

    #[test]
    fn a_buffer_holds_its_download_s_bytes_and_is_the_next_download_s_buffer() {
        let budget = Arc::new(DownloadBudget::new(100 * K));
        let permit = budget.acquire(60 * K, Urgency::Prefetch);
        let mut first = permit.buffer(60 * KU);
        first.fill(7);
        let at = first.as_ptr();
        // The permit's bytes went with the buffer: they stay taken until it is dropped.
        drop(permit);
        assert_eq!(budget.in_use(), 60 * K);
        drop(first);
        assert_eq!((budget.in_use(), budget.idle_buffer_bytes()), (0, 60 * K));
        // A smaller download takes it, cut to its length.
        let p = budget.acquire(50 * K, Urgency::Prefetch);
        let second = p.buffer(50 * KU);
        assert_eq!((second.as_ptr(), second.len()), (at, 50 * KU));
        assert_eq!(budget.idle_buffer_bytes(), 0);
        // A longer one than any kept gets fresh zeroed memory.
        let q = budget.acquire(40 * K, Urgency::Prefetch);
        let third = q.buffer(40 * KU);
        assert_ne!(third.as_ptr(), at);
        assert!(third.iter().all(|&b| b == 0));
        // 50 taken by the second: the third's 40 blocks fit beside them, and are kept.
        drop((q, third));
        assert_eq!(
            (budget.in_use(), budget.idle_buffer_bytes()),
            (50 * K, 40 * K)
        );
        // Its 50 blocks given back, the second's 60-block buffer fits beside the 40 kept.
        drop((p, second));
        assert_eq!((budget.in_use(), budget.idle_buffer_bytes()), (0, 100 * K));
        // Kept buffers are freed once unused for long enough.
        assert_eq!(budget.free_idle(Duration::from_secs(3600)), 0);
        assert_eq!(budget.free_idle(Duration::ZERO), 100 * K);
        assert_eq!(budget.idle_buffer_bytes(), 0);
    }

    #[test]
    fn a_download_frees_kept_buffers_that_no_longer_fit_but_not_the_one_it_can_use() {
        let budget = Arc::new(DownloadBudget::new(100 * K));
        let kept_30_and_50 = || {
            let (a, b) = (
                budget.acquire(30 * K, Urgency::Prefetch),
                budget.acquire(50 * K, Urgency::Prefetch),
            );
            let (ba, bb) = (a.buffer(30 * KU), b.buffer(50 * KU));
            drop((a, b, ba, bb));
            assert_eq!(budget.idle_buffer_bytes(), 80 * K);
        };
        kept_30_and_50();
        // 60 taken: no kept buffer is large enough, and 60 + 80 > 100: the largest goes.
        let p = budget.acquire(60 * K, Urgency::Prefetch);
        assert_eq!(budget.idle_buffer_bytes(), 30 * K);
        drop(p);
        budget.free_idle(Duration::ZERO);
        kept_30_and_50();
        // 45 taken: the 50-block buffer is the one it will fill; beside it the 30 fit.
        let p = budget.acquire(45 * K, Urgency::Prefetch);
        assert_eq!(budget.idle_buffer_bytes(), 80 * K);
        let buf = p.buffer(45 * KU);
        assert_eq!(
            (buf.len() as u64, budget.idle_buffer_bytes()),
            (45 * K, 30 * K)
        );
    }

    #[test]
    fn a_kept_shard_buffer_also_fits_a_slightly_larger_next_shard() {
        let budget = Arc::new(DownloadBudget::new(256 << 20));
        let p = budget.acquire(67_011_524, Urgency::Prefetch);
        let first = p.buffer(67_011_524);
        let at = first.as_ptr();
        drop((p, first));
        let p = budget.acquire(67_090_295, Urgency::Prefetch);
        let second = p.buffer(67_090_295);
        assert_eq!((second.as_ptr(), second.len()), (at, 67_090_295));
    }

    #[test]
    fn buffers_of_an_unbounded_budget_or_of_none_are_not_kept() {
        let free = Arc::new(DownloadBudget::new(0));
        let p = free.acquire(10, Urgency::Demand);
        drop(p.buffer(10));
        assert_eq!((free.in_use(), free.idle_buffer_bytes()), (0, 0));
        let gone = Arc::new(DownloadBudget::new(100));
        let p = gone.acquire(10, Urgency::Demand);
        let b = p.buffer(10);
        drop(p);
        drop(gone);
        drop(b);
        let unkept = DownloadBuffer::unkept(5);
        assert_eq!(&unkept[..], &[0; 5]);
    }
}
