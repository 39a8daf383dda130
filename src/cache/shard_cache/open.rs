//! Opening a dataset's cache folder: the budget checked against the largest shard, the
//! folder prepared and locked, the complete shards of earlier runs adopted (the rest
//! deleted), and a smaller budget than last time enforced.

use super::room::{Room, RoomWait};
use super::trust::Trust;
use super::{ShardCache, Slot, State};
use crate::cache::dataset::Dataset;
use crate::cache::download_budget::{free_idle_in_background, DownloadBudget};
use crate::cache::io;
use crate::cache::layout::{Layout, LAYOUT_VERSION};
use crate::cache::memory::MemoryTier;
use crate::cache::policy::{EvictionPolicy, LruPolicy};
use crate::cache::preloader::Preloader;
use crate::cache::stats::Counters;
use crate::cache::{CacheError, CacheOptions};
use crate::mds::ShardEntry;
use crate::store::ObjectKey;
use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Instant;

/// What an earlier run left in the folder: the slots of the complete shards, their recorded
/// checksums, the bytes they take, and the clock after them (oldest first).
pub(super) struct Adopted {
    slots: Vec<Slot>,
    trust: HashMap<usize, Trust>,
    usage: u64,
    clock: u64,
}

impl ShardCache {
    /// Opens (or creates) the cache folder of `dataset` under `opts.cache_dir` with LRU
    /// eviction. Complete shards left by earlier runs are adopted without refetching.
    pub fn open(dataset: Arc<Dataset>, opts: CacheOptions) -> Result<Arc<ShardCache>, CacheError> {
        Self::open_with_policy(dataset, opts, Arc::new(LruPolicy))
    }

    /// Like [`ShardCache::open`] with a custom eviction policy.
    pub fn open_with_policy(
        dataset: Arc<Dataset>,
        opts: CacheOptions,
        policy: Arc<dyn EvictionPolicy>,
    ) -> Result<Arc<ShardCache>, CacheError> {
        let shards = dataset.index().shards();
        let limit = opts.cache_limit.unwrap_or(u64::MAX);
        check_budget(shards, limit)?;
        let largest_download = shards
            .iter()
            .map(|s| s.stored_file().bytes)
            .max()
            .unwrap_or(0);
        let keys = shards
            .iter()
            .map(|s| ObjectKey::new(s.raw.basename.clone()))
            .collect::<Result<Vec<_>, _>>()?;
        let layout = Layout::new(&opts.cache_dir, &dataset.id().key());
        let meta = serde_json::json!({
            "source": dataset.id().source,
            "index_sha256": dataset.id().index_sha256,
            "layout": LAYOUT_VERSION,
        });
        let lock = layout.prepare(meta.to_string().as_bytes())?;
        let reader = io::select(opts.io, opts.uring_depth)?;
        let direct = (opts.direct_io && io::direct_wanted()? && io::direct::probe(&layout.tmp))
            .then(|| {
                io::effective_mode(opts.io)
                    .map(|mode| io::choose_direct(mode, &layout.tmp, io::uring_direct::probe))
            })
            .transpose()?;
        if direct.is_none() {
            tracing::info!(
                reader = reader.name(),
                "cached shard files go through the page cache"
            );
        }
        let adopted = adopt(&layout, &keys, shards)?;
        tracing::info!(dir = %layout.root.display(), adopted = adopted.trust.len(), usage = adopted.usage, "shard cache opened");
        // With direct I/O, part of the memory tier's share holds samples read ahead instead.
        let preload_cap = if direct.is_some() {
            opts.memory_limit / 8 * 3
        } else {
            0
        };
        let counters = Arc::new(Counters::default());
        let downloads = Arc::new(DownloadBudget::with_loan(
            opts.download_memory,
            opts.download_loan,
        ));
        let cache = Arc::new(ShardCache {
            memory: MemoryTier::new(opts.memory_limit - preload_cap),
            preloader: Preloader::new(preload_cap, &counters, direct),
            counters,
            dataset,
            layout,
            keys,
            limit,
            state: Mutex::new(State {
                slots: adopted.slots,
                usage: adopted.usage,
                reserved: 0,
                clock: adopted.clock,
            }),
            room: Condvar::new(),
            landed: std::sync::OnceLock::new(),
            header_fetches: Default::default(),
            _idle_freeing: free_idle_in_background(&downloads),
            downloads,
            largest_download,
            policy,
            reader,
            direct,
            opts,
            trust: Mutex::new(adopted.trust),
            verifying: Mutex::new(()),
            _lock: lock,
        });
        for (i, s) in cache.lock().slots.iter().enumerate() {
            if let Slot::Resident { bytes, .. } = s {
                cache.policy.inserted(i, *bytes);
            }
        }
        cache.shrink_to_limit()?;
        Ok(cache)
    }

    /// A smaller budget than last time: evicts until usage <= limit (need 0), no further.
    pub(super) fn shrink_to_limit(&self) -> Result<(), CacheError> {
        let st = self.lock();
        if st.usage <= self.limit {
            return Ok(());
        }
        match self.make_room(st, usize::MAX, 0, RoomWait::GiveUp, Instant::now())? {
            Room::Made(_) => Ok(()),
            Room::Retry | Room::NotNow => Err(CacheError::Full {
                shard: usize::MAX,
                need: 0,
                limit: self.limit,
                pinned: 0,
                filling: self.lock().reserved,
            }),
        }
    }
}

/// A budget smaller than the largest shard is refused, with the size it needs.
fn check_budget(shards: &[ShardEntry], limit: u64) -> Result<(), CacheError> {
    if let Some((i, big)) = shards.iter().enumerate().max_by_key(|(_, s)| s.raw.bytes) {
        if big.raw.bytes > limit {
            return Err(CacheError::BudgetTooSmall {
                limit,
                shard: i,
                basename: big.raw.basename.clone(),
                bytes: big.raw.bytes,
            });
        }
    }
    Ok(())
}

/// Adopts the complete shards under `shards/` (the right size, with a recorded checksum),
/// oldest first, and deletes anything else there.
fn adopt(
    layout: &Layout,
    keys: &[ObjectKey],
    shards: &[ShardEntry],
) -> Result<Adopted, CacheError> {
    let by_name: HashMap<&str, usize> = keys
        .iter()
        .enumerate()
        .map(|(i, k)| (k.as_str(), i))
        .collect();
    let mut found = layout.scan()?;
    found.sort_by_key(|(_, _, mtime)| *mtime);
    let mut out = Adopted {
        slots: vec![Slot::Absent; shards.len()],
        trust: HashMap::new(),
        usage: 0,
        clock: 0,
    };
    for (rel, size, _) in found {
        let recorded = by_name
            .get(rel.as_str())
            .and_then(|&i| layout.read_sum(&keys[i]).map(|sum| (i, sum)));
        match recorded {
            Some((i, sum)) if size == shards[i].raw.bytes => {
                out.trust.insert(
                    i,
                    Trust {
                        sum,
                        verified: None,
                    },
                );
                out.clock += 1;
                out.slots[i] = Slot::Resident {
                    bytes: size,
                    pins: 0,
                    last_use: out.clock,
                    file: None,
                };
                out.usage += size;
            }
            _ => {
                let p = layout.shards.join(&rel);
                tracing::info!(path = %p.display(), "removing stray or incomplete cache file");
                let _ = std::fs::remove_file(&p);
            }
        }
    }
    Ok(out)
}
