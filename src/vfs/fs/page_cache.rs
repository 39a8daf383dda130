//! Handing files to the kernel's page cache ahead of their reads: a sample's other files
//! when its first is read (`SiblingPush`), and the files readers are about to read of each
//! shard that lands from the store (`vfs::landed`).

use std::sync::Arc;

use bytes::Bytes;

use super::Vfs;
use crate::vfs::inode::{ColumnNo, Ino, Node, SampleId};
use crate::vfs::push::{self, PushBatch, PushPages, PushedBytes};
use crate::vfs::source::{LandedShard, Location};

impl Vfs {
    /// Sets how to hand a file's bytes to the kernel's page cache (the FUSE layer's store
    /// notification, from a thread of its own). Without it nothing is handed over. Only the
    /// first call counts.
    pub fn set_push_pages(&self, f: PushPages) {
        let _ = self.push_pages.set(f);
    }

    /// After the read at offset 0 of column `column` of the sample at `at`: hands the
    /// sample's other files that readers read (see `SiblingPush`) to the kernel's page
    /// cache when their verified bytes are in memory.
    pub(super) fn push_siblings(&self, at: &Location, column: ColumnNo) {
        let Some(push_pages) = self.push_pages.get() else {
            return;
        };
        let wanted = self.push.on_first_read(at.sample, column.0);
        if wanted.is_empty() {
            return;
        }
        for (c, bytes) in self.source.sibling_files(at, wanted) {
            let Some(ino) = self.pushable(at.sample, ColumnNo(c), &bytes) else {
                continue;
            };
            if !push_pages(ino, bytes, self.push.counters().clone()) {
                self.push.counters().dropped();
            }
        }
    }

    /// The inode to hand `bytes`, the verified whole file of column `col` of `sample`, to
    /// the page cache as; `None` when it must not go. A file whose size the kernel was given
    /// from unverified bytes goes only when its verified bytes have that size (which then
    /// counts as checked); one whose given size proved wrong does not go (its read says so).
    /// A file handed over with no size known yet has its size recorded from those bytes, so
    /// the kernel's look-up of it, which comes next, is answered from the record.
    fn pushable(&self, sample: u64, col: ColumnNo, bytes: &Bytes) -> Option<Ino> {
        if bytes.is_empty() || bytes.len() > push::MAX_FILE_BYTES {
            return None;
        }
        if !self
            .sizes
            .record_if_consistent(sample, col, bytes.len() as u64)
        {
            return None;
        }
        Node::SampleFile(SampleId(sample), col).ino()
    }

    /// Sets how to hand many files to the kernel's page cache at once (the FUSE layer's
    /// store notifications, from a thread of its own), and from then on hands over the files
    /// readers are about to read of every shard that lands from the store (see
    /// `vfs::landed`); `held` gives the bytes of such a file still waiting, for its reads
    /// (see [`PushedBytes`]). Only the first call counts.
    pub fn set_push_batches(self: &Arc<Self>, f: PushBatch, held: PushedBytes) {
        if self.push_batch.set(f).is_err() {
            return;
        }
        let _ = self.pushed_bytes.set(held);
        let vfs = Arc::downgrade(self);
        self.source
            .watch_landings(Arc::new(move |landed: &LandedShard| {
                if let Some(v) = vfs.upgrade() {
                    v.push_landed(landed);
                }
            }));
    }

    /// Hands the files of `landed` that readers of listed folders are about to read to the
    /// kernel's page cache. On a readahead fetch thread it waits a while for room in the
    /// queue (the next download waits with it, so pushing keeps up with downloading); on a
    /// reader's thread it never waits (the kernel may hold the pages of the file that reader
    /// asked for until it is answered): a full queue drops them, and they are read through
    /// FUSE as usual.
    fn push_landed(&self, landed: &LandedShard) {
        let Some(push_batch) = self.push_batch.get() else {
            return;
        };
        let columns = self.landed.columns();
        if columns.is_empty() {
            return;
        }
        let started = std::time::Instant::now();
        let samples = self.landed.samples_of(
            landed.global_shard,
            &|r| self.readahead.cursor(r.0 as usize),
            &|r, e| self.order(r, e).ok(),
            &|s| self.source.locate(s).map(|at| at.global_shard),
        );
        let mut files = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for t in samples {
            // A sample listed in two folders of its rank is one inode: handed over once.
            if !seen.insert(t.sample) {
                continue;
            }
            let Some(at) = self.source.locate(t.sample) else {
                continue;
            };
            for (c, bytes) in self.source.landed_files(landed, &at, columns) {
                if let Some(ino) = self.pushable(at.sample, ColumnNo(c), &bytes) {
                    files.push((ino, bytes));
                }
            }
        }
        if files.is_empty() {
            return;
        }
        let n = files.len() as u64;
        let wait = crate::readahead::on_fetch_thread();
        let prepared = started.elapsed();
        let queued = push_batch(files, self.landed.counters().clone(), wait);
        if !queued {
            self.landed.counters().dropped_many(n);
        }
        tracing::debug!(
            shard = landed.global_shard,
            files = n,
            queued,
            prepare_us = prepared.as_micros() as u64,
            queue_us = started.elapsed().saturating_sub(prepared).as_micros() as u64,
            "a landed shard's files went to the pusher"
        );
    }

    /// The bytes of file `ino` when they wait in the pusher's queue: its read is answered
    /// from them at once (never queued behind a read of its shard that waits for a download,
    /// which could wait for the download memory those queued bytes hold).
    pub(super) fn held(&self, ino: Ino) -> Option<Bytes> {
        self.pushed_bytes.get().and_then(|held| held(ino))
    }
}
