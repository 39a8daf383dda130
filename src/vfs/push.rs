//! `SiblingPush`: which of a sample's other files to hand to the kernel's page cache when
//! its first file is read, so the reader finds them there and their reads never cross FUSE.
//!
//! A loader reads every file of a sample one after the other (`00042.jpg`, then
//! `00042.cls`): two FUSE round trips per sample, each a wake-up of a daemon thread and of
//! the reader, for bytes that were in memory together when the first was served (a sample's
//! columns are one stretch of its shard). Handing the others to the page cache
//! (`FUSE_NOTIFY_STORE`, done by the FUSE layer on a thread of its own) halves the round
//! trips of such a loader. The first file of each sample is still read through us: that read
//! is how the readahead learns where each reader is.
//!
//! A file nobody reads would cost a copy into the page cache for nothing, so the columns to
//! hand over are learnt from the reads: every [`CYCLE`] first reads, pushing pauses for
//! [`LEARN`] of them, and a column is handed over from then on when its files were read in
//! that pause for at least three quarters of the samples whose other files were (its reads
//! come through us again while nothing is pushed).

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use bytes::Bytes;

use super::inode::Ino;
use super::source::ColumnSet;
use crate::status::PagePushStatus;

/// Reads at offset 0 per cycle: the first [`LEARN`] learn which columns are read, the rest
/// push them.
pub const CYCLE: u64 = 8192;
/// Reads at offset 0 at the start of each cycle during which nothing is pushed.
pub const LEARN: u64 = 128;
/// Files larger than this are not handed over (a read of a large file is streamed in
/// requests of up to 1 MiB anyway, and a copy nobody reads would be costly).
pub const MAX_FILE_BYTES: usize = 8 << 20;
/// Column numbers are 8 bits in an inode number.
const COLUMNS: usize = 256;
/// Samples whose files were handed over recently, remembered so that a read of one of them
/// that came first after all does not hand the others over a second time.
const RECENT: usize = 1024;

/// Hands whole file `Ino`'s bytes to the kernel's page cache, from a thread of its own (the
/// FUSE layer's), which records the outcome in the counters; false when it could not take
/// them now (its queue is full).
pub type PushPages = Box<dyn Fn(Ino, Bytes, Arc<PushCounters>) -> bool + Send + Sync>;

/// Hands many whole files to the kernel's page cache at once, from the same thread as
/// [`PushPages`] (the files of a shard that just landed); false when it could not take them
/// (its queue for such batches is full). With `wait` it waits a while for room first
/// (only from a thread that answers no reader); without, it never blocks.
pub type PushBatch = Box<dyn Fn(Vec<(Ino, Bytes)>, Arc<PushCounters>, bool) -> bool + Send + Sync>;

/// The whole bytes of file `Ino` when a batch holds it, queued or being handed over: a read
/// of it whose shard cannot be read now is answered from them. The bytes of a landed shard's
/// files are views of its download buffer, so while they wait, that buffer's download memory
/// stays taken; a read that needed a new download of the shard (evicted meanwhile, or not
/// written) could wait for that memory while the pusher waits for the read's page lock.
pub type PushedBytes = Box<dyn Fn(Ino) -> Option<Bytes> + Send + Sync>;

/// What became of the files handed over.
#[derive(Debug, Default)]
pub struct PushCounters {
    files: AtomicU64,
    bytes: AtomicU64,
    dropped: AtomicU64,
    refused: AtomicU64,
}

impl PushCounters {
    /// A file of `bytes` bytes is in the page cache now.
    pub fn stored(&self, bytes: usize) {
        self.files.fetch_add(1, Relaxed);
        self.bytes.fetch_add(bytes as u64, Relaxed);
    }

    /// The kernel did not take a file (it no longer holds the inode, or the mount is ending).
    pub fn refused(&self) {
        self.refused.fetch_add(1, Relaxed);
    }

    /// A file was not handed over: the queue to the kernel was full.
    pub fn dropped(&self) {
        self.dropped.fetch_add(1, Relaxed);
    }

    /// `n` files were not handed over: the queue to the kernel was full.
    pub fn dropped_many(&self, n: u64) {
        self.dropped.fetch_add(n, Relaxed);
    }

    /// The counters, for `status.json`.
    pub fn snapshot(&self) -> PagePushStatus {
        PagePushStatus {
            files: self.files.load(Relaxed),
            bytes: self.bytes.load(Relaxed),
            dropped: self.dropped.load(Relaxed),
            refused: self.refused.load(Relaxed),
        }
    }
}

/// The learnt columns and what was pushed.
pub(crate) struct SiblingPush {
    /// Reads at offset 0 so far (their position in the cycle).
    ticks: AtomicU64,
    /// Reads at offset 0 of each column during this cycle.
    reads: [AtomicU64; COLUMNS],
    /// Columns to hand over, one bit each (set at the end of each learning pause).
    wanted: [AtomicU64; COLUMNS / 64],
    /// `sample + 1` of samples handed over recently, by `sample % RECENT`.
    recent: [AtomicU64; RECENT],
    /// What became of the files handed over.
    counters: Arc<PushCounters>,
}

impl Default for SiblingPush {
    fn default() -> Self {
        Self {
            ticks: AtomicU64::new(0),
            reads: [const { AtomicU64::new(0) }; COLUMNS],
            wanted: [const { AtomicU64::new(0) }; COLUMNS / 64],
            recent: [const { AtomicU64::new(0) }; RECENT],
            counters: Arc::default(),
        }
    }
}

impl SiblingPush {
    /// Counts a read at offset 0 of column `column` of `sample`, and returns the other
    /// columns to hand over now: none while learning, none when this sample's were handed over
    /// already. No allocation: it runs on every such read.
    pub fn on_first_read(&self, sample: u64, column: u32) -> ColumnSet {
        let tick = self.ticks.fetch_add(1, Relaxed) % CYCLE;
        if tick == 0 {
            // A new cycle: learn again from reads that all come through us.
            for w in &self.wanted {
                w.store(0, Relaxed);
            }
            for r in &self.reads {
                r.store(0, Relaxed);
            }
        }
        if let Some(r) = self.reads.get(column as usize) {
            r.fetch_add(1, Relaxed);
        }
        if tick == LEARN {
            self.learn();
        }
        if tick < LEARN {
            return ColumnSet::default();
        }
        let mut wanted = ColumnSet::from_words(self.wanted.each_ref().map(|w| w.load(Relaxed)));
        wanted.remove(column);
        if wanted.is_empty() {
            return wanted;
        }
        let slot = &self.recent[(sample % RECENT as u64) as usize];
        if slot.swap(sample.wrapping_add(1), Relaxed) == sample.wrapping_add(1) {
            return ColumnSet::default();
        }
        wanted
    }

    /// Sets the columns to hand over from this cycle's reads: those read for at least three
    /// quarters as many samples as the most read column.
    fn learn(&self) {
        let counts: Vec<u64> = self.reads.iter().map(|r| r.load(Relaxed)).collect();
        let most = counts.iter().copied().max().unwrap_or(0);
        for (c, &n) in counts.iter().enumerate() {
            if most > 0 && n.saturating_mul(4) >= most.saturating_mul(3) {
                self.wanted[c / 64].fetch_or(1 << (c % 64), Relaxed);
            }
        }
    }

    /// The counters the FUSE layer's thread records into.
    pub fn counters(&self) -> &Arc<PushCounters> {
        &self.counters
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reads `n` samples from `first`, each column of `read` at offset 0 in that order;
    /// returns what each read said to hand over.
    fn read_samples(p: &SiblingPush, first: u64, n: u64, read: &[u32]) -> Vec<ColumnSet> {
        let mut out = Vec::new();
        for s in first..first + n {
            for &c in read {
                out.push(p.on_first_read(s, c));
            }
        }
        out
    }

    fn set(columns: &[u32]) -> ColumnSet {
        let mut s = ColumnSet::default();
        for &c in columns {
            s.insert(c);
        }
        s
    }

    #[test]
    fn nothing_is_handed_over_while_learning_then_the_columns_read_are() {
        let p = SiblingPush::default();
        // Columns 0 and 2 of three are read; the learning pause is LEARN reads.
        let learning = read_samples(&p, 0, LEARN / 2, &[0, 2]);
        assert!(learning.iter().all(ColumnSet::is_empty));
        // From here the first read of a sample hands over the other column read, once.
        let after = read_samples(&p, 1000, 4, &[0, 2]);
        assert_eq!(after[0], set(&[2]));
        assert!(
            after[1].is_empty(),
            "the sample's files were handed over already"
        );
        assert_eq!(after[2], set(&[2]));
    }

    #[test]
    fn a_column_that_is_not_read_is_not_handed_over() {
        let p = SiblingPush::default();
        read_samples(&p, 0, LEARN, &[1]);
        assert!(read_samples(&p, 5000, 3, &[1])
            .iter()
            .all(ColumnSet::is_empty));
    }

    #[test]
    fn each_cycle_learns_again() {
        let p = SiblingPush::default();
        read_samples(&p, 0, LEARN / 2, &[0, 1]);
        // The rest of the cycle: only column 0 comes through (1 was handed over).
        let rest = CYCLE - LEARN;
        read_samples(&p, 100_000, rest, &[0]);
        // A new cycle: the reader now reads column 0 only, so nothing is handed over.
        read_samples(&p, 200_000, LEARN, &[0]);
        assert!(read_samples(&p, 300_000, 3, &[0])
            .iter()
            .all(ColumnSet::is_empty));
    }

    #[test]
    fn counts_what_became_of_the_files() {
        let c = PushCounters::default();
        c.stored(100);
        c.dropped();
        c.refused();
        assert_eq!(
            c.snapshot(),
            PagePushStatus {
                files: 1,
                bytes: 100,
                dropped: 1,
                refused: 1
            }
        );
    }
}
