//! One download per shard: a read or the readahead that finds a shard absent reserves its
//! room, fetches it (through the dataset's fetcher, within the download budget), writes it
//! to the disk tier and wakes everyone who waited on the same shard.

use super::flight::Flight;
use super::read::sample_span;
use super::room::{Room, RoomWait};
use super::trust::{FileStamp, Trust};
use super::{OnLanded, ShardCache, Slot};
use crate::cache::download_budget::Urgency;
use crate::cache::file_sum::FileSum;
use crate::cache::io;
use crate::cache::layout::Durability;
use crate::cache::memory::Provenance;
use crate::cache::stats::Counters;
use crate::cache::CacheError;
use crate::fetch::ShardFault;
use crate::mds::ShardHeader;
use bytes::Bytes;
use std::fs::File;
use std::sync::Arc;
use std::time::Instant;

/// Cleans up a fill that did not finish normally (its thread panicked): frees the slot and the
/// reservation and wakes the waiters, so no `Flight::wait` hangs forever.
pub(super) struct FillGuard<'a> {
    cache: &'a ShardCache,
    shard: usize,
    need: u64,
    flight: Arc<Flight>,
    armed: bool,
}

impl Drop for FillGuard<'_> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        {
            let mut st = self.cache.lock();
            st.reserved = st.reserved.saturating_sub(self.need);
            if let Some(slot) = st.slots.get_mut(self.shard) {
                *slot = Slot::Absent;
            }
        }
        self.cache.room.notify_all();
        Counters::add(&self.cache.counters.fill_failures, 1);
        self.flight
            .finish(Err(CacheError::FillAborted { shard: self.shard }));
    }
}

impl ShardCache {
    /// Resident (and, if `pin`, pinned) on return (`Ok(true)`), or the error of the fill.
    /// `Ok(false)`: no room now and `wait` is [`RoomWait::GiveUp`]; nothing was done.
    /// `demand`: a reader waits for the shard, so a download made here goes before the
    /// readahead's, in download memory and in connections.
    ///
    /// A read (`pin`) that waited on a fill started by someone else (readahead, another read)
    /// which failed starts one fill of its own before it fails: a read fails only after a fill
    /// made for it failed past the retry budget, never because of another fill's bad luck.
    pub(super) fn acquire(
        &self,
        shard: usize,
        pin: bool,
        wait: RoomWait,
        demand: bool,
    ) -> Result<bool, CacheError> {
        let need = self.dataset.shard(shard)?.raw.bytes;
        let mut counted = false;
        let mut second_chance = pin;
        let deadline = Instant::now() + self.opts.pinned_wait;
        loop {
            let mut st = self.lock();
            st.clock += 1;
            let now = st.clock;
            let slot = st.slots.get_mut(shard).ok_or(ShardFault::NoSuchShard {
                shard,
                shards: self.keys.len(),
            })?;
            match slot {
                Slot::Resident { pins, last_use, .. } => {
                    if pin {
                        *pins += 1;
                    }
                    *last_use = now;
                    if !counted {
                        Counters::add(&self.counters.disk_hits, 1);
                    }
                    return Ok(true);
                }
                Slot::Filling(flight) => {
                    let flight = flight.clone();
                    drop(st);
                    if !counted {
                        Counters::add(&self.counters.disk_misses, 1);
                        counted = true;
                    }
                    match flight.wait() {
                        // Resident now (or evicted again already): look again.
                        Ok(()) => {}
                        // The failed fill left the slot absent: look again and fill it.
                        Err(e) if second_chance => {
                            second_chance = false;
                            tracing::debug!(shard, error = %e, "a fill this read waited on failed; fetching again");
                        }
                        Err(e) => return Err(e),
                    }
                }
                Slot::Absent => {
                    if !counted {
                        Counters::add(&self.counters.disk_misses, 1);
                        counted = true;
                    }
                    let mut st = match self.make_room(st, shard, need, wait, deadline)? {
                        Room::Made(st) => st,
                        // The slot may have changed while waiting: look again.
                        Room::Retry => continue,
                        Room::NotNow => return Ok(false),
                    };
                    let flight = Arc::new(Flight::default());
                    st.slots[shard] = Slot::Filling(flight.clone());
                    st.reserved = st.reserved.saturating_add(need);
                    drop(st);
                    self.run_fill(shard, need, &flight, pin, demand)?;
                    return Ok(true);
                }
            }
        }
    }

    /// Fills the slot of `shard`, which the caller set to `Filling(flight)` with `need` bytes
    /// reserved: downloads it, then makes it resident (pinned once if `pin`) or absent again,
    /// and tells the flight's waiters.
    pub(super) fn run_fill(
        &self,
        shard: usize,
        need: u64,
        flight: &Arc<Flight>,
        pin: bool,
        demand: bool,
    ) -> Result<(), CacheError> {
        let mut guard = FillGuard {
            cache: self,
            shard,
            need,
            flight: flight.clone(),
            armed: true,
        };
        let result = self.fill(shard, need, demand, flight);
        guard.armed = false;
        let mut st = self.lock();
        st.reserved = st.reserved.saturating_sub(need);
        match result {
            Ok((bytes, file)) => {
                st.clock += 1;
                let last_use = st.clock;
                st.slots[shard] = Slot::Resident {
                    bytes,
                    pins: u32::from(pin),
                    last_use,
                    file,
                };
                st.usage = st.usage.saturating_add(bytes);
                drop(st);
                self.room.notify_all();
                self.policy.inserted(shard, bytes);
                flight.finish(Ok(()));
                Ok(())
            }
            Err(e) => {
                st.slots[shard] = Slot::Absent;
                drop(st);
                self.room.notify_all();
                Counters::add(&self.counters.fill_failures, 1);
                flight.finish(Err(e.clone()));
                Err(e)
            }
        }
    }

    /// Downloads, verifies, decompresses and writes one shard (of `size` uncompressed bytes)
    /// atomically. Returns its size, and the written file opened for reading (when it could
    /// be: its first read then need not open it, and the readahead can read it ahead).
    pub(super) fn fill(
        &self,
        shard: usize,
        size: u64,
        demand: bool,
        flight: &Flight,
    ) -> Result<(u64, Option<Arc<File>>), CacheError> {
        // A read waits for it: its download goes before the readahead's, in download memory
        // and in connections.
        let urgency = if demand {
            Urgency::Demand
        } else {
            Urgency::Prefetch
        };
        let memory = self
            .downloads
            .acquire_with_loan(size, urgency, &|| self.tier_unused());
        let _demand = crate::store::demand_scope(demand);
        let started = Instant::now();
        let key = self.key(shard)?;
        let durability = match self.direct {
            Some(path) => Durability::Direct(path),
            None => Durability::Unsynced,
        };
        let tag = format!("shard{shard}");
        // A download in parts is written to disk part by part as it lands (on a thread of
        // its own), so the shard is on disk soon after its last byte is in (the parts that
        // land last are written after its bytes are published), and its download memory free
        // for the next one; otherwise it is written after its bytes are published.
        let stage = |len: u64| match self.layout.stage_in_pieces(len, &tag, durability) {
            Ok(staged) => Some(staged),
            Err(e) => {
                // Written again after the checks, which reports then.
                tracing::debug!(error = %e, "cannot stage a download as it lands");
                None
            }
        };
        let buffer = |len: usize| memory.buffer(len);
        let fetched = self.dataset.fetcher().fetch_shard_into(
            shard,
            self.opts.verify_attempts,
            &buffer,
            Some(&stage),
        )?;
        let (raw, staged) = (fetched.raw, fetched.staged);
        let fetched_in = started.elapsed();
        self.counters.fetch_latency.observe(fetched_in);
        if let Ok(h) = ShardHeader::parse(&raw) {
            self.tier_put_header(shard, Provenance::Verified, Arc::new(h));
        }
        flight.publish(raw.clone());
        if let Some(landed) = self.landed.get() {
            landed(shard, &raw);
        }
        let dest = self.layout.shard_path(key);
        // The store's CRC64NVME when it vouched for these very bytes: no second pass over
        // them (see `file_sum.rs`).
        let sum = match fetched.crc64nvme {
            Some(crc) => FileSum::Crc64Nvme(crc),
            None => FileSum::xxh3_of(&raw),
        };
        // The parts that landed last are written now, after the readers waiting for the
        // shard have its bytes (`publish` above).
        let staged = staged.and_then(|pieces| match pieces.write_rest(&raw) {
            Ok(pieces) => Some(pieces),
            Err(e) => {
                tracing::debug!(shard, error = %e, "cannot write a staged download's last parts; writing it whole");
                None
            }
        });
        let written = self.layout.write_sum(key, sum).and_then(|()| match staged {
            Some(pieces) => pieces
                .finish()
                .and_then(|file| self.layout.commit(file, &dest)),
            None => self.layout.write_atomically(&raw, &dest, &tag, durability),
        });
        if let Err(e) = written {
            // A full or failing cache disk: the verified bytes are in hand, so readers can
            // still be served from the memory tier when it can hold them; the next read
            // of another sample tries the disk again.
            Counters::add(&self.counters.disk_write_failures, 1);
            let kept = self.keep_in_memory(shard, &raw);
            tracing::warn!(
                shard,
                error = %e,
                served_from_memory = kept,
                "cannot write to the cache disk"
            );
            return Err(e);
        }
        // Written and checked just now: trusted as it is on disk.
        let opened = self.open_cached(&dest);
        let (file, meta) = match opened.and_then(|f| f.metadata().map(|m| (f, m))) {
            Ok((f, m)) => (Some(Arc::new(f)), Some(m)),
            Err(_) => (None, std::fs::metadata(&dest).ok()),
        };
        let verified = meta.map(|m| FileStamp::of(&m));
        self.trust
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(shard, Trust { sum, verified });
        Counters::add(&self.counters.shards_fetched, 1);
        tracing::debug!(
            shard,
            bytes = raw.len(),
            fetch_ms = fetched_in.as_millis() as u64,
            total_ms = started.elapsed().as_millis() as u64,
            "shard cached"
        );
        Ok((raw.len() as u64, file))
    }

    /// Sets what is told of every shard that lands from the store from now on, with its
    /// verified bytes, before it is written to disk (once; later calls are ignored). For
    /// handing the files readers will read to the kernel's page cache while the bytes are at
    /// hand.
    pub fn on_landed(&self, f: OnLanded) {
        let _ = self.landed.set(f);
    }

    /// Makes memory ready for a download ahead of it, when `shard` is neither on disk nor
    /// being fetched and would be downloaded into a buffer: a buffer as large as the largest
    /// stored shard, its pages mapped in on a thread of its own
    /// (`DownloadBudget::prepare_in_background`: nothing is done while a download is under
    /// way or a kept buffer is large enough). For the moment a reader is about to come (its
    /// folder was listed), so that the first download of a cold start does not pay for fresh
    /// memory on the first file's critical path.
    pub fn prepare_download(&self, shard: usize) {
        if !matches!(self.lock().slots.get(shard), Some(Slot::Absent)) {
            return;
        }
        let fetcher = self.dataset.fetcher();
        if !fetcher.downloads_in_parts(shard) {
            return;
        }
        if let Ok(len) = usize::try_from(self.largest_download) {
            self.downloads.prepare_in_background(len);
        }
    }

    /// Puts every sample of a verified shard into the memory tier when it fits in half of
    /// the tier's sample budget (so one shard cannot flush everything else). True if kept.
    pub(super) fn keep_in_memory(&self, shard: usize, raw: &Bytes) -> bool {
        if raw.len() as u64 > self.memory.sample_budget() / 2
            || !self.tier_has_room(raw.len() as u64)
        {
            return false;
        }
        let Ok(header) = ShardHeader::parse(raw) else {
            return false;
        };
        for i in 0..header.num_samples() {
            let Some(r) = sample_span(&header, i, raw.len()) else {
                return false;
            };
            // Copies: a slice would hold the download buffer, and with it the download
            // budget, for as long as the tier keeps the sample.
            self.memory.put_sample(
                shard,
                i,
                Provenance::Verified,
                io::direct::kept_copy(&raw[r]),
            );
        }
        true
    }
}
