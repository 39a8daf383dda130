//! `Preloaded`: samples the readahead expects soon, read from cached shard files into memory
//! before their reader asks, when those files bypass the page cache.
//!
//! With `O_DIRECT` cache files (see `io::direct`) the kernel neither reads ahead nor keeps
//! what it read, so without this every sample read of a cached shard waits for one disk read
//! (~120 µs here) while the reader does nothing else, and the disk serves one request per
//! reader at a time. The readahead knows each rank's next positions ([`Advice`]); reading
//! them on a few threads of our own keeps several disk reads in flight and lets a FUSE read
//! find its bytes in memory. (With buffered cache files the same advice is a
//! `posix_fadvise(WILLNEED)` and the page cache holds the bytes.)
//!
//! Bounded in bytes (queued reads included), so a slow reader cannot make it grow: when
//! full, the advice says so ([`Advice::Full`]) and the readahead tries again later. Each
//! entry is taken by the first read of its sample (the memory tier keeps it from there for
//! the sample's other columns); an entry nobody took (a reader that skipped ahead) is dropped
//! when room is needed and it has waited longer than [`STALE_AFTER`].

use bytes::Bytes;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

/// What an advice to read a sample ahead did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Advice {
    /// A read ahead was started (or the kernel was asked to start one).
    Started,
    /// Nothing to do: the sample is already in memory, or its shard is not on local disk.
    Skipped,
    /// No room for more samples read ahead now: ask again once readers have taken some.
    Full,
}

/// An entry nobody took for this long may be dropped to make room. Readers take what was
/// read for them within milliseconds; an entry this old is most likely one whose reader
/// read it before the advice came (or skipped it).
pub const STALE_AFTER: Duration = Duration::from_secs(1);

/// A reader whose sample is being read ahead waits this long for it at most (a read takes
/// ~0.1 ms), then reads it itself.
const WAIT_FOR_READ: Duration = Duration::from_millis(20);

type Key = (usize, u32);

/// Samples read ahead, and bytes reserved for reads on their way, within `cap` bytes.
pub(crate) struct Preloaded {
    cap: u64,
    held: Mutex<Held>,
    /// Notified when a read ahead ends while a reader waits for it.
    done: Condvar,
    /// Advice refused for want of room.
    full: AtomicU64,
    /// Reads called off because the reader came first.
    late: AtomicU64,
    /// Samples read ahead that nobody took, dropped to make room.
    unused: AtomicU64,
}

/// What became of the reads ahead, for `status.json`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct PreloadStats {
    pub full: u64,
    pub late: u64,
    pub unused: u64,
}

#[derive(Default)]
struct Held {
    /// Samples read, with the time of their reservation (which names their place in `order`).
    entries: HashMap<Key, (Bytes, Instant)>,
    /// Keys in the order they were reserved, with the reservation's time (records of entries
    /// taken since are skipped when met).
    order: VecDeque<(Key, Instant)>,
    /// Keys reserved whose read has not finished.
    pending: HashMap<Key, Pending>,
    /// Bytes of `entries` plus `pending`.
    bytes: u64,
    /// Readers waiting for a read ahead to end.
    waiters: u32,
}

/// A reservation whose read has not finished.
struct Pending {
    len: u64,
    /// When it was reserved (its place in `order`).
    at: Instant,
    /// A thread is reading it now (else it waits in the queue).
    reading: bool,
}

impl Preloaded {
    /// An empty store of at most `cap` bytes.
    pub fn new(cap: u64) -> Self {
        Preloaded {
            cap,
            held: Mutex::new(Held::default()),
            done: Condvar::new(),
            full: AtomicU64::new(0),
            late: AtomicU64::new(0),
            unused: AtomicU64::new(0),
        }
    }

    /// True when it may hold nothing (no room was given to it).
    pub fn is_off(&self) -> bool {
        self.cap == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Held> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Reserves room for sample `key` of `len` bytes: `Started` when the caller should now
    /// read it and [`Preloaded::put`] (or [`Preloaded::cancel`]) it, `Skipped` when it is held
    /// or on its way already, `Full` when it does not fit.
    pub fn reserve(&self, key: Key, len: u64) -> Advice {
        let mut h = self.lock();
        if h.entries.contains_key(&key) || h.pending.contains_key(&key) {
            return Advice::Skipped;
        }
        if h.bytes.saturating_add(len) > self.cap {
            let dropped = h.drop_stale(Instant::now());
            self.unused.fetch_add(dropped, Relaxed);
            if h.bytes.saturating_add(len) > self.cap {
                self.full.fetch_add(1, Relaxed);
                return Advice::Full;
            }
        }
        let now = Instant::now();
        h.bytes += len;
        h.pending.insert(
            key,
            Pending {
                len,
                at: now,
                reading: false,
            },
        );
        h.order.push_back((key, now));
        h.compact();
        Advice::Started
    }

    /// Called by the thread about to read `key`: false when the read was called off (its
    /// reader came first), so it need not be read.
    pub fn begin(&self, key: Key) -> bool {
        match self.lock().pending.get_mut(&key) {
            Some(p) => {
                p.reading = true;
                true
            }
            None => false,
        }
    }

    /// The bytes read for a reservation.
    pub fn put(&self, key: Key, bytes: Bytes) {
        let mut h = self.lock();
        let Some(p) = h.pending.remove(&key) else {
            return;
        };
        h.bytes = h.bytes.saturating_sub(p.len);
        h.bytes += bytes.len() as u64;
        h.entries.insert(key, (bytes, p.at));
        if h.waiters > 0 {
            self.done.notify_all();
        }
    }

    /// Gives a reservation's room back (its read failed).
    pub fn cancel(&self, key: Key) {
        let mut h = self.lock();
        h.release(key);
        if h.waiters > 0 {
            self.done.notify_all();
        }
    }

    /// Takes sample `key` out if it was read ahead, waiting for a read of it that is under
    /// way (at most [`WAIT_FOR_READ`]). One still queued is called off: the caller reads
    /// the sample itself.
    pub fn take(&self, key: Key) -> Option<Bytes> {
        if self.is_off() {
            // Nothing is ever read ahead: no lock on the read path.
            return None;
        }
        let mut h = self.lock();
        if h.pending.get(&key).is_some_and(|p| p.reading) {
            let until = Instant::now() + WAIT_FOR_READ;
            h.waiters += 1;
            while h.pending.contains_key(&key) {
                let now = Instant::now();
                if now >= until {
                    break;
                }
                h = self
                    .done
                    .wait_timeout(h, until - now)
                    .unwrap_or_else(|p| p.into_inner())
                    .0;
            }
            h.waiters -= 1;
        }
        let Some((b, _)) = h.entries.remove(&key) else {
            if h.release(key) {
                self.late.fetch_add(1, Relaxed);
            }
            return None;
        };
        h.bytes = h.bytes.saturating_sub(b.len() as u64);
        if h.entries.is_empty() && h.pending.is_empty() {
            h.order.clear();
        }
        Some(b)
    }

    /// Whether sample `key` is held or on its way.
    #[cfg(test)]
    pub fn contains(&self, key: Key) -> bool {
        let h = self.lock();
        h.entries.contains_key(&key) || h.pending.contains_key(&key)
    }

    /// Bytes held and reserved now.
    pub fn bytes(&self) -> u64 {
        self.lock().bytes
    }

    /// Counts of what became of the advice.
    pub fn stats(&self) -> PreloadStats {
        PreloadStats {
            full: self.full.load(Relaxed),
            late: self.late.load(Relaxed),
            unused: self.unused.load(Relaxed),
        }
    }
}

impl Held {
    /// Drops the reservation of `key` whose read has not finished, and its room; false when
    /// there was none.
    fn release(&mut self, key: Key) -> bool {
        let Some(p) = self.pending.remove(&key) else {
            return false;
        };
        self.bytes = self.bytes.saturating_sub(p.len);
        true
    }

    /// Forgets the order of entries taken already once they outnumber the live ones, so the
    /// order stays within a small multiple of what is held.
    fn compact(&mut self) {
        let live = self.entries.len() + self.pending.len();
        if self.order.len() > 2 * live + 1024 {
            let (entries, pending) = (&self.entries, &self.pending);
            self.order.retain(|(key, at)| {
                pending.get(key).is_some_and(|p| p.at == *at)
                    || entries.get(key).is_some_and(|(_, r)| r == at)
            });
        }
    }

    /// Drops entries nobody took within [`STALE_AFTER`], oldest first, and forgets the order
    /// of entries already taken. Returns how many entries it dropped.
    fn drop_stale(&mut self, now: Instant) -> u64 {
        let mut dropped = 0;
        while let Some(&(key, at)) = self.order.front() {
            let held = self.entries.get(&key).is_some_and(|(_, r)| *r == at);
            let reading = self.pending.get(&key).is_some_and(|p| p.at == at);
            if reading || (held && now.duration_since(at) < STALE_AFTER) {
                // Still being read, or fresh: it stays, and so does everything after it.
                break;
            }
            if held {
                if let Some((b, _)) = self.entries.remove(&key) {
                    self.bytes = self.bytes.saturating_sub(b.len() as u64);
                    dropped += 1;
                }
            }
            // Else taken already (a newer reservation of the same key has its own place).
            self.order.pop_front();
        }
        dropped
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(n: usize) -> Bytes {
        Bytes::from(vec![7u8; n])
    }

    #[test]
    fn reads_ahead_are_bounded_taken_once_and_give_room_back() {
        let p = Preloaded::new(100);
        assert_eq!(p.reserve((0, 1), 60), Advice::Started);
        assert_eq!(p.reserve((0, 1), 60), Advice::Skipped, "already on its way");
        assert_eq!(p.reserve((0, 2), 60), Advice::Full, "60 + 60 > 100");
        assert!(p.take((0, 1)).is_none(), "not read yet");
        assert_eq!(p.bytes(), 0, "a reader that came first called the read off");
        p.put((0, 1), bytes(60));
        assert!(!p.contains((0, 1)), "and its bytes are not kept");
        assert_eq!(p.reserve((0, 1), 60), Advice::Started);
        p.put((0, 1), bytes(60));
        assert!(p.contains((0, 1)));
        assert_eq!(p.take((0, 1)).map(|b| b.len()), Some(60));
        assert!(p.take((0, 1)).is_none(), "taken once");
        assert_eq!(p.bytes(), 0);
        assert_eq!(p.reserve((0, 2), 60), Advice::Started);
        p.cancel((0, 2));
        assert_eq!(p.bytes(), 0, "a failed read gives its room back");
        assert!(!p.contains((0, 2)));
    }

    #[test]
    fn a_reader_waits_for_a_read_under_way_and_calls_off_a_queued_one() {
        let p = std::sync::Arc::new(Preloaded::new(1000));
        assert_eq!(p.reserve((4, 0), 10), Advice::Started);
        assert!(p.begin((4, 0)), "under way");
        let reader = {
            let p = p.clone();
            std::thread::spawn(move || p.take((4, 0)))
        };
        std::thread::sleep(Duration::from_millis(2));
        p.put((4, 0), bytes(10));
        assert_eq!(reader.join().unwrap().map(|b| b.len()), Some(10));
        assert_eq!(p.reserve((4, 1), 10), Advice::Started);
        assert!(
            p.take((4, 1)).is_none(),
            "queued: the reader reads it itself"
        );
        assert!(!p.begin((4, 1)), "so the read ahead is not made");
        assert_eq!(p.stats().late, 1);
        assert_eq!(p.bytes(), 0);
    }

    #[test]
    fn only_entries_nobody_took_for_a_while_make_room() {
        let p = Preloaded::new(100);
        assert_eq!(p.reserve((1, 0), 50), Advice::Started);
        p.put((1, 0), bytes(50));
        assert_eq!(p.reserve((1, 1), 50), Advice::Started);
        // Fresh entries are kept: the reader is about to take them.
        assert_eq!(p.reserve((1, 2), 50), Advice::Full);
        let later = Instant::now() + STALE_AFTER + Duration::from_millis(1);
        let mut h = p.lock();
        assert_eq!(h.drop_stale(later), 1);
        // The read entry went; the one still being read stays.
        assert!(!h.entries.contains_key(&(1, 0)));
        assert!(h.pending.contains_key(&(1, 1)));
        assert_eq!(h.bytes, 50);
    }

    #[test]
    fn the_order_stays_small_while_an_entry_nobody_takes_stays() {
        let p = Preloaded::new(1 << 30);
        assert_eq!(p.reserve((3, 0), 10), Advice::Started);
        p.put((3, 0), bytes(10));
        for i in 1..10_000 {
            assert_eq!(p.reserve((3, i), 10), Advice::Started);
            p.put((3, i), bytes(10));
            assert!(p.take((3, i)).is_some());
        }
        assert!(p.lock().order.len() <= 2 + 1024, "{}", p.lock().order.len());
        assert!(p.contains((3, 0)));
    }

    #[test]
    fn taken_entries_leave_no_trace_in_the_order() {
        let p = Preloaded::new(1000);
        for i in 0..50 {
            assert_eq!(p.reserve((2, i), 10), Advice::Started);
            p.put((2, i), bytes(10));
            assert!(p.take((2, i)).is_some());
        }
        assert!(p.lock().order.is_empty());
        assert_eq!(p.bytes(), 0);
    }
}
