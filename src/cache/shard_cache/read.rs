//! Reads: a pinned shard, a header or a sample, from the memory tier, the verified bytes of a
//! fill in progress, the disk tier, or ranged reads of an uncompressed remote shard.

use super::handle::ShardHandle;
use super::room::RoomWait;
use super::{ShardCache, Slot};
use crate::cache::io;
use crate::cache::memory::Provenance;
use crate::cache::stats::Counters;
use crate::cache::CacheError;
use crate::fetch::ShardFault;
use crate::mds::ShardHeader;
use bytes::Bytes;
use std::fs::File;
use std::sync::Arc;

/// Where sample `i` lies in a whole shard of `len` bytes with this header; `None` when the
/// header has no such sample or its offsets run past the shard.
pub(super) fn sample_span(
    header: &ShardHeader,
    i: u32,
    len: usize,
) -> Option<std::ops::Range<usize>> {
    let r = header.sample_range(i).ok()?;
    let (start, end) = (usize::try_from(r.start).ok()?, usize::try_from(r.end).ok()?);
    (start <= end && end <= len).then_some(start..end)
}

impl ShardCache {
    /// The shard on disk, fetching it if needed (one download however many threads ask),
    /// pinned against eviction until the handle is dropped.
    pub fn get(self: &Arc<Self>, shard: usize) -> Result<ShardHandle, CacheError> {
        match self.get_checked(shard)? {
            Some(h) => Ok(h),
            // The cached file failed its checksum and is gone: fetch it again, once.
            None => self.get_checked(shard)?.ok_or_else(|| {
                ShardFault::Corrupt {
                    shard,
                    file: self
                        .shard_path(shard)
                        .unwrap_or_default()
                        .display()
                        .to_string(),
                    reason: "a freshly cached copy failed its checksum too (failing disk?)".into(),
                }
                .into()
            }),
        }
    }

    /// The open file of resident `shard`: the one kept in its slot, else opened now and kept.
    /// A kept file whose name was unlinked behind our back is dropped and the path reopened.
    pub(super) fn resident_file(
        &self,
        shard: usize,
        path: &std::path::Path,
    ) -> std::io::Result<(Arc<File>, std::fs::Metadata)> {
        use std::os::unix::fs::MetadataExt;
        let kept = match self.lock().slots.get(shard) {
            Some(Slot::Resident { file: Some(f), .. }) => Some(f.clone()),
            _ => None,
        };
        if let Some(f) = kept {
            match f.metadata() {
                Ok(m) if m.nlink() > 0 => return Ok((f, m)),
                _ => tracing::debug!(shard, "cached file was unlinked; reopening its path"),
            }
        }
        let f = Arc::new(self.open_cached(path)?);
        let meta = f.metadata()?;
        if let Some(Slot::Resident { file, .. }) = self.lock().slots.get_mut(shard) {
            *file = Some(f.clone());
        }
        Ok((f, meta))
    }

    pub(super) fn get_checked(
        self: &Arc<Self>,
        shard: usize,
    ) -> Result<Option<ShardHandle>, CacheError> {
        self.acquire(shard, true, RoomWait::Wait, true)?;
        let path = self.shard_path(shard)?;
        match self.resident_file(shard, &path) {
            Ok((f, meta)) => {
                match self.verify_file(shard, &f, &meta) {
                    Ok(true) => {}
                    Ok(false) => {
                        self.unpin(shard);
                        self.forget(shard);
                        return Ok(None);
                    }
                    Err(e) => {
                        self.unpin(shard);
                        return Err(e);
                    }
                }
                let len = meta.len();
                self.policy.touched(shard);
                Ok(Some(ShardHandle {
                    cache: self.clone(),
                    shard,
                    file: f,
                    len,
                }))
            }
            Err(e) => {
                // Deleted (or unreadable) behind our back: forget it so the next call refetches.
                self.unpin(shard);
                self.forget(shard);
                Err(CacheError::io("open", path, e))
            }
        }
    }

    /// The parsed header of `shard`: from memory, from the cached file, by one ranged GET
    /// when the shard is uncompressed and not local, else by fetching the whole shard.
    /// The header may come from a ranged read (not hash-checked): use it for sizes only.
    pub fn header(self: &Arc<Self>, shard: usize) -> Result<Arc<ShardHeader>, CacheError> {
        if let Some(h) = self.memory.header_any(shard) {
            Counters::add(&self.counters.memory_hits, 1);
            return Ok(h);
        }
        Counters::add(&self.counters.memory_misses, 1);
        if let Some(raw) = self.flight_verified(shard) {
            // On its way: its verified header (the fill put it in memory before publishing).
            if let Some(h) = self.memory.header(shard) {
                return Ok(h);
            }
            return Ok(Arc::new(
                ShardHeader::parse(&raw).map_err(|e| self.corrupt(shard, e))?,
            ));
        }
        let header = if self.is_resident(shard) || !self.dataset.fetcher().is_ranged(shard)? {
            return self.get(shard)?.header();
        } else {
            Arc::new(self.dataset.fetcher().fetch_header(shard)?)
        };
        self.tier_put_header(shard, Provenance::Ranged, header.clone());
        Ok(header)
    }

    /// Sample `i` of `shard`: memory tier, else the verified bytes of a fill in progress (a
    /// read does not wait for the disk write), else the cached file (fetching the shard if
    /// needed). Verified bytes only; when the disk cannot take the shard, the verified samples
    /// the failed fill left in memory still answer.
    pub fn sample(self: &Arc<Self>, shard: usize, i: u32) -> Result<Bytes, CacheError> {
        if let Some(b) = self.memory.sample(shard, i) {
            Counters::add(&self.counters.memory_hits, 1);
            return Ok(b);
        }
        if let Some(b) = self.preloader.take((shard, i)) {
            // Kept in the tier from here, for the sample's other columns.
            Counters::add(&self.counters.preload_hits, 1);
            if self.tier_has_room(b.len() as u64) {
                self.memory
                    .put_sample(shard, i, Provenance::Verified, b.clone());
            }
            return Ok(b);
        }
        if let Some(b) = self.sample_from_flight(shard, i)? {
            // A read that waited for its shard's download.
            Counters::add(&self.counters.disk_misses, 1);
            return Ok(b);
        }
        match self.get(shard) {
            Ok(h) => h.sample(i),
            Err(e @ CacheError::Io { .. }) => self.memory.sample(shard, i).ok_or(e),
            Err(e) => Err(e),
        }
    }

    /// The verified bytes of sample `i` of `shard` when the memory tier holds them now: never
    /// reads the disk or the store (for handing a sample's other files to the kernel ahead of
    /// their reads, which is only worth it when the bytes are at hand).
    pub fn sample_in_memory(&self, shard: usize, i: u32) -> Option<Bytes> {
        self.memory.sample(shard, i)
    }

    /// Sample `i` without filling the disk tier: memory, else the verified bytes of a fill in
    /// progress (waiting for them: the shard is on its way anyway, and ranged GETs beside its
    /// download would fetch the same bytes twice), else the cached file if resident, else
    /// ranged GETs (header + sample) for an uncompressed shard, else a full fill.
    /// Ranged bytes are not hash-checked: they answer `stat`, never a read.
    pub fn sample_direct(self: &Arc<Self>, shard: usize, i: u32) -> Result<Bytes, CacheError> {
        if let Some(b) = self.memory.sample_any(shard, i) {
            Counters::add(&self.counters.memory_hits, 1);
            return Ok(b);
        }
        if let Some(b) = self.sample_from_flight(shard, i)? {
            return Ok(b);
        }
        if self.is_resident(shard) || !self.dataset.fetcher().is_ranged(shard)? {
            return self.get(shard)?.sample(i);
        }
        Counters::add(&self.counters.memory_misses, 1);
        let header = self.header(shard)?;
        let r = header.sample_range(i).map_err(|_| {
            self.out_of_range(shard, format!("sample {i} of {}", header.num_samples()))
        })?;
        let b = self.dataset.fetcher().fetch_range(shard, r)?;
        if self.tier_has_room(b.len() as u64) {
            self.memory
                .put_sample(shard, i, Provenance::Ranged, b.clone());
        }
        Ok(b)
    }

    /// The stored length of sample `i` of `shard` from the shard's header alone, for `stat`:
    /// the header comes from memory, the cached file, a fill in progress, or one ranged GET
    /// of an uncompressed remote shard (then kept in memory for the shard's other samples;
    /// not hash-checked: sizes only).
    pub fn sample_len(self: &Arc<Self>, shard: usize, i: u32) -> Result<u64, CacheError> {
        if let Some(b) = self.memory.sample_any(shard, i) {
            return Ok(b.len() as u64);
        }
        let header = self.header(shard)?;
        let r = header.sample_range(i).map_err(|_| {
            self.out_of_range(shard, format!("sample {i} of {}", header.num_samples()))
        })?;
        Ok(r.end.saturating_sub(r.start))
    }

    pub(super) fn out_of_range(&self, shard: usize, what: String) -> CacheError {
        ShardFault::OutOfRange {
            shard,
            file: self
                .keys
                .get(shard)
                .map(|k| k.to_string())
                .unwrap_or_default(),
            what,
        }
        .into()
    }

    /// Sample `i` of `shard` from the verified bytes of a fill in progress (started by the
    /// readahead or another read), as soon as they are checked: the read does not wait for
    /// the disk write. `None` when nobody fills the shard or the fill ended first: read it the
    /// usual way (which fills it on this thread when it is absent).
    pub(super) fn sample_from_flight(
        &self,
        shard: usize,
        i: u32,
    ) -> Result<Option<Bytes>, CacheError> {
        let Some(raw) = self.flight_verified(shard) else {
            return Ok(None);
        };
        let header = match self.memory.header(shard) {
            Some(h) => h,
            None => Arc::new(ShardHeader::parse(&raw).map_err(|e| self.corrupt(shard, e))?),
        };
        let r = sample_span(&header, i, raw.len()).ok_or_else(|| {
            self.out_of_range(
                shard,
                format!(
                    "sample {i} of {} in {} bytes",
                    header.num_samples(),
                    raw.len()
                ),
            )
        })?;
        // A copy: a slice would keep the whole shard in memory as long as it lives.
        Ok(Some(io::direct::kept_copy(&raw[r])))
    }

    /// The verified bytes of the fill of `shard` in progress, waiting until they pass their
    /// checks; `None` when nobody fills it or the fill ended first (look at the slot again).
    pub(super) fn flight_verified(&self, shard: usize) -> Option<Bytes> {
        let flight = match self.lock().slots.get(shard) {
            Some(Slot::Filling(f)) => f.clone(),
            _ => return None,
        };
        flight.wait_verified()
    }

    /// A verified shard whose header does not parse.
    pub(super) fn corrupt(&self, shard: usize, e: impl std::fmt::Display) -> CacheError {
        ShardFault::Corrupt {
            shard,
            file: self.key(shard).map(|k| k.to_string()).unwrap_or_default(),
            reason: e.to_string(),
        }
        .into()
    }
}
