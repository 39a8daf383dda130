//! The disk budget: room for a fill made by evicting what the policy chooses, waiting for
//! fills and unpins where that can help; pins and unpins.

use super::{ShardCache, Slot, State};
use crate::cache::policy::{Candidate, EvictionContext};
use crate::cache::stats::Counters;
use crate::cache::CacheError;
use std::sync::MutexGuard;
use std::time::Instant;

/// Whether `acquire` may block until other fills finish or readers unpin to make room.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum RoomWait {
    /// Reads: wait for room; fail only when the pinned shards leave no room at all.
    Wait,
    /// Prefetch: give up quietly when there is no room right now.
    GiveUp,
}

/// What `make_room` did.
pub(super) enum Room<'a> {
    /// Room was made; the lock is still held.
    Made(MutexGuard<'a, State>),
    /// It waited for a change (fill finished, unpin, eviction); look at the slot again.
    Retry,
    /// No room now, and the caller does not wait.
    NotNow,
}

impl ShardCache {
    /// Makes `shard` resident (fetching if needed) without keeping a pin. Blocking; when the
    /// budget is taken by other fills or pinned shards it waits for room, and reports
    /// [`CacheError::Full`] only when the pinned shards alone leave no room for this one.
    pub fn ensure(&self, shard: usize) -> Result<(), CacheError> {
        self.acquire(shard, false, RoomWait::Wait, true).map(|_| ())
    }

    /// Like [`ShardCache::ensure`] for prefetching: never waits for room. Returns `Ok(false)`
    /// (and fetches nothing) when the shard would not fit now without waiting.
    pub fn ensure_if_room(&self, shard: usize) -> Result<bool, CacheError> {
        self.acquire(shard, false, RoomWait::GiveUp, false)
    }

    /// [`ShardCache::ensure_if_room`] for a shard a reader is about to block on: its download
    /// goes before the prefetches', in download memory and in connections, as a read's does.
    pub fn ensure_if_room_for_reader(&self, shard: usize) -> Result<bool, CacheError> {
        self.acquire(shard, false, RoomWait::GiveUp, true)
    }

    /// Evicts `shard` now if it is resident and unpinned; returns whether it did.
    pub fn evict(&self, shard: usize) -> bool {
        let mut st = self.lock();
        match st.slots.get(shard) {
            Some(Slot::Resident { pins: 0, .. }) => {
                self.remove(&mut st, shard);
                drop(st);
                self.room.notify_all();
                true
            }
            _ => false,
        }
    }

    /// Evicts until `need` more bytes fit, asking the policy for victims.
    ///
    /// When no victim is left, room can still appear: fills in progress finish (their
    /// reservation turns into evictable shards) and readers unpin. Then, with
    /// [`RoomWait::Wait`], it waits on `room` and returns [`Room::Retry`]; with
    /// [`RoomWait::GiveUp`] it returns [`Room::NotNow`]. When the pinned shards plus this one
    /// exceed the limit it waits for unpins until `deadline` only. [`CacheError::Full`] when
    /// that runs out or nothing can change (no fill in progress, no pin to wait for, and the
    /// policy refuses every candidate).
    pub(super) fn make_room<'a>(
        &'a self,
        mut st: MutexGuard<'a, State>,
        incoming: usize,
        need: u64,
        wait: RoomWait,
        deadline: Instant,
    ) -> Result<Room<'a>, CacheError> {
        while st.usage.saturating_add(st.reserved).saturating_add(need) > self.limit {
            let mut candidates = Vec::new();
            let mut pinned = Vec::new();
            let mut pinned_bytes = 0u64;
            for (i, s) in st.slots.iter().enumerate() {
                if let Slot::Resident {
                    bytes,
                    pins,
                    last_use,
                    ..
                } = s
                {
                    if *pins == 0 {
                        candidates.push(Candidate {
                            shard: i,
                            bytes: *bytes,
                            last_use: *last_use,
                        });
                    } else {
                        pinned.push(i);
                        pinned_bytes = pinned_bytes.saturating_add(*bytes);
                    }
                }
            }
            let ctx = EvictionContext {
                candidates: &candidates,
                pinned: &pinned,
                incoming,
                need,
                usage: st.usage.saturating_add(st.reserved),
                limit: self.limit,
                prefetch: wait == RoomWait::GiveUp,
            };
            let victim = self
                .policy
                .choose_victim(&ctx)
                .filter(|v| candidates.iter().any(|c| c.shard == *v));
            if let Some(v) = victim {
                self.remove(&mut st, v);
                continue;
            }
            let possible = pinned_bytes.saturating_add(need) <= self.limit;
            // Something that may free room is under way: a fill, or (when the policy had
            // nothing to choose from) a pinned reader that will let go.
            let may_change = st.reserved > 0 || (candidates.is_empty() && pinned_bytes > 0);
            if may_change && wait == RoomWait::GiveUp {
                return Ok(Room::NotNow);
            }
            if possible && may_change {
                // A fill in progress always ends (see `FillGuard`), so this wait does too.
                drop(self.room.wait(st).unwrap_or_else(|p| p.into_inner()));
                return Ok(Room::Retry);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if may_change && !left.is_zero() {
                // Only unpins can make room: wait for them, but not forever.
                let (st, _) = self
                    .room
                    .wait_timeout(st, left)
                    .unwrap_or_else(|p| p.into_inner());
                drop(st);
                return Ok(Room::Retry);
            }
            if wait == RoomWait::GiveUp {
                return Ok(Room::NotNow);
            }
            return Err(CacheError::Full {
                shard: incoming,
                need,
                limit: self.limit,
                pinned: pinned_bytes,
                filling: st.reserved,
            });
        }
        Ok(Room::Made(st))
    }

    pub(super) fn remove(&self, st: &mut State, shard: usize) {
        if let Some(Slot::Resident { bytes, .. }) = st.slots.get(shard).cloned() {
            st.slots[shard] = Slot::Absent;
            st.usage = st.usage.saturating_sub(bytes);
            if let Ok(k) = self.key(shard) {
                let _ = std::fs::remove_file(self.layout.shard_path(k));
            }
            Counters::add(&self.counters.evictions, 1);
            self.policy.removed(shard);
            tracing::debug!(shard, bytes, "shard evicted");
        }
    }

    pub(super) fn forget(&self, shard: usize) {
        let mut st = self.lock();
        if let Some(Slot::Resident { bytes, pins: 0, .. }) = st.slots.get(shard).cloned() {
            st.slots[shard] = Slot::Absent;
            st.usage = st.usage.saturating_sub(bytes);
            drop(st);
            self.room.notify_all();
        }
    }

    pub(super) fn unpin(&self, shard: usize) {
        let mut st = self.lock();
        if let Some(Slot::Resident { pins, .. }) = st.slots.get_mut(shard) {
            *pins = pins.saturating_sub(1);
            if *pins == 0 {
                drop(st);
                self.room.notify_all();
            }
        }
    }
}
