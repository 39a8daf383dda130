//! The readahead's advice for a sample of a resident shard: a `posix_fadvise` when cached
//! files go through the page cache, else a read into memory by the preloader.

use super::trust::FileStamp;
use super::{ShardCache, Slot};
use crate::cache::preload::Advice;
use crate::cache::stats::Counters;
use std::fs::File;
use std::ops::Range;
use std::sync::Arc;

impl ShardCache {
    /// Asks the kernel to start reading sample `i` of `shard` from the cached file into the
    /// page cache (`posix_fadvise(WILLNEED)`), so a read that comes soon finds it there
    /// instead of waiting for the disk. Does nothing (false) unless the shard is resident with
    /// its file open and its verified header in memory: it never blocks on the store, the disk
    /// or a checksum. (It does not look in the memory tier first: a look-up there would count
    /// as a use of the sample in the tier's admission policy, and advising pages already in
    /// the page cache costs little.) Nothing to do either when cached files bypass the page
    /// cache.
    pub fn advise_sample(&self, shard: usize, i: u32) -> Advice {
        let Some(header) = self.memory.header(shard) else {
            return Advice::Skipped;
        };
        let Ok(range) = header.sample_range(i) else {
            return Advice::Skipped;
        };
        let file = match self.lock().slots.get(shard) {
            Some(Slot::Resident { file: Some(f), .. }) => f.clone(),
            _ => return Advice::Skipped,
        };
        if self.direct.is_some() {
            return self.preload(shard, i, file, range);
        }
        let (Ok(offset), Ok(len)) = (
            libc::off_t::try_from(range.start),
            libc::off_t::try_from(range.end.saturating_sub(range.start)),
        ) else {
            return Advice::Skipped;
        };
        use std::os::fd::AsRawFd;
        // SAFETY: the descriptor is open for as long as `file` lives; the call reads no memory.
        let rc = unsafe {
            libc::posix_fadvise(file.as_raw_fd(), offset, len, libc::POSIX_FADV_WILLNEED)
        };
        if rc == 0 {
            Counters::add(&self.counters.advised, 1);
            Advice::Started
        } else {
            Advice::Skipped
        }
    }

    /// Queues a read of sample `i` of `shard` (bytes `range` of `file`) into memory, when the file is trusted as it is now (checked against its recorded
    /// checksum in this process, or written by it), the sample is not in memory yet, and there is
    /// room.
    pub(super) fn preload(
        &self,
        shard: usize,
        i: u32,
        file: Arc<File>,
        range: Range<u64>,
    ) -> Advice {
        if self.preloader.is_off() || self.memory.contains_sample(shard, i) {
            return Advice::Skipped;
        }
        let Ok(meta) = file.metadata() else {
            return Advice::Skipped;
        };
        if !self.trusted_as_is(shard, FileStamp::of(&meta)) || range.end > meta.len() {
            return Advice::Skipped;
        }
        let len = range.end - range.start;
        if !self.tier_has_room(len) {
            return Advice::Full;
        }
        let advice = self.preloader.queue(shard, i, file, range);
        if advice == Advice::Started {
            Counters::add(&self.counters.advised, 1);
        }
        advice
    }
}
