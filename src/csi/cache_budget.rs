//! The node-wide disk budget of `--cache-root`, shared by every volume's cache.
//!
//! Each mount daemon keeps its cache within its `--cache-limit`; the plugin makes sure those
//! limits add up to no more than the node's budget. A volume without `cacheLimit` gets the
//! plugin's default. Before a new mount, caches that no mounted volume uses (left by unstaged
//! PersistentVolumes, or by a plugin that died before removing an inline volume's) are
//! removed, oldest first, while they and the mounted volumes' limits would exceed the budget.
//! A mount that still does not fit is refused (ResourceExhausted: kubelet retries it, and it
//! succeeds once other volumes are unpublished).

use crate::size::{parse_size, SizeError};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// A size given as bytes or as a share of the cache filesystem.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Amount {
    /// So many bytes.
    Bytes(u64),
    /// This percentage of the size of the filesystem holding `--cache-root`.
    Percent(f64),
}

impl Amount {
    /// Parses `50%`, `200GiB`, `1.5TB`, `4096`.
    pub fn parse(s: &str) -> Result<Amount, AmountError> {
        let t = s.trim();
        if let Some(p) = t.strip_suffix('%') {
            let v: f64 = p
                .trim()
                .parse()
                .map_err(|_| AmountError::NotAPercentage(s.to_string()))?;
            if !(v > 0.0 && v <= 100.0) {
                return Err(AmountError::PercentageOutOfRange(s.to_string()));
            }
            return Ok(Amount::Percent(v));
        }
        Ok(Amount::Bytes(parse_size(t)?))
    }

    /// The amount in bytes, for a filesystem of `disk` bytes.
    pub fn bytes(self, disk: u64) -> u64 {
        match self {
            Amount::Bytes(b) => b,
            Amount::Percent(p) => (disk as f64 * p / 100.0) as u64,
        }
    }
}

/// Why a text is not an [`Amount`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AmountError {
    /// `…%` with no number before the `%`.
    #[error("not a percentage: {0:?}")]
    NotAPercentage(String),
    /// A percentage of 0 or less, or above 100.
    #[error("percentage out of range (0, 100]: {0:?}")]
    PercentageOutOfRange(String),
    /// Not a size either.
    #[error(transparent)]
    Size(#[from] SizeError),
}

/// Why a volume's cache does not fit.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum BudgetError {
    /// The limits of the mounted volumes plus this one exceed the node's budget.
    #[error("the node's cache budget is {total} bytes; mounted volumes hold {committed} of it and this volume's cacheLimit is {asked} bytes: it will be mounted once others are unpublished (or give it a smaller cacheLimit)")]
    Exhausted {
        /// The node's budget.
        total: u64,
        /// The limits of mounted (and being mounted) volumes.
        committed: u64,
        /// This volume's limit.
        asked: u64,
    },
    /// A bad `cacheLimit` value.
    #[error("volume attribute `cacheLimit`: {0}")]
    BadLimit(SizeError),
}

/// The budget of one plugin process.
#[derive(Debug)]
pub struct CacheBudget {
    root: PathBuf,
    /// The node's budget in bytes.
    pub total: u64,
    /// The `cacheLimit` of a volume that gives none.
    pub default_limit: u64,
    /// Limits of mounts under way (checked, not yet recorded), by cache folder.
    pending: Mutex<HashMap<PathBuf, u64>>,
}

/// A cache limit admitted into the budget until the mount is recorded or fails (drop).
#[derive(Debug)]
pub struct Admission<'a> {
    budget: &'a CacheBudget,
    cache: PathBuf,
}

impl Drop for Admission<'_> {
    fn drop(&mut self) {
        self.budget.lock().remove(&self.cache);
    }
}

impl CacheBudget {
    /// A budget of `total` over `root`, where volumes without a limit get `default_limit`
    /// (never more than `total`).
    pub fn new(root: &Path, total: u64, default_limit: u64) -> CacheBudget {
        CacheBudget {
            root: root.to_path_buf(),
            total,
            default_limit: default_limit.min(total),
            pending: Mutex::default(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<PathBuf, u64>> {
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Admits a volume whose cache is `cache` with `limit` bytes, given the caches of the
    /// volumes mounted now (`mounted`: folder and limit). Idle caches are removed, oldest
    /// first, while the whole would exceed the budget.
    pub fn admit(
        &self,
        cache: &Path,
        limit: u64,
        mounted: &[(PathBuf, u64)],
    ) -> Result<Admission<'_>, BudgetError> {
        let mut pending = self.lock();
        let mut in_use: HashMap<PathBuf, u64> = mounted.iter().cloned().collect();
        for (dir, l) in pending.iter() {
            in_use.insert(dir.clone(), *l);
        }
        in_use.remove(cache);
        let committed: u64 = in_use.values().fold(0u64, |a, b| a.saturating_add(*b));
        let fits = committed.saturating_add(limit) <= self.total;
        if fits {
            let mut idle = self.idle_caches(cache, &in_use);
            let mut on_disk: u64 = idle
                .iter()
                .fold(0u64, |sum, (_, _, size)| sum.saturating_add(*size));
            // Oldest last, so pop() takes it.
            idle.sort_by_key(|b| std::cmp::Reverse(b.1));
            while committed.saturating_add(limit).saturating_add(on_disk) > self.total {
                let Some((dir, _, size)) = idle.pop() else {
                    break;
                };
                match std::fs::remove_dir_all(&dir) {
                    Ok(()) => {
                        tracing::info!(cache = %dir.display(), bytes = size, "removed an idle cache to make room in the node's cache budget");
                        on_disk = on_disk.saturating_sub(size);
                    }
                    Err(e) => {
                        tracing::warn!(cache = %dir.display(), error = %e, "cannot remove an idle cache")
                    }
                }
            }
        }
        if !fits {
            return Err(BudgetError::Exhausted {
                total: self.total,
                committed,
                asked: limit,
            });
        }
        pending.insert(cache.to_path_buf(), limit);
        Ok(Admission {
            budget: self,
            cache: cache.to_path_buf(),
        })
    }

    /// Cache folders under the root that no volume uses: (folder, last change, bytes on disk).
    fn idle_caches(
        &self,
        own: &Path,
        in_use: &HashMap<PathBuf, u64>,
    ) -> Vec<(PathBuf, std::time::SystemTime, u64)> {
        let Ok(entries) = std::fs::read_dir(&self.root) else {
            return Vec::new();
        };
        entries
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.is_dir() && p != own && !in_use.contains_key(p))
            .map(|p| {
                let modified = std::fs::metadata(&p)
                    .and_then(|m| m.modified())
                    .unwrap_or(std::time::UNIX_EPOCH);
                let size = disk_usage(&p);
                (p, modified, size)
            })
            .collect()
    }
}

/// Bytes a folder takes on disk (allocated blocks, recursively; symlinks not followed).
pub fn disk_usage(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let mut total = 0u64;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let Ok(meta) = e.metadata() else { continue };
            total = total.saturating_add(meta.blocks() * 512);
            if meta.is_dir() {
                stack.push(e.path());
            }
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn amounts_parse_as_bytes_or_percent() {
        assert_eq!(Amount::parse("50%"), Ok(Amount::Percent(50.0)));
        assert_eq!(Amount::parse("2GiB"), Ok(Amount::Bytes(2 << 30)));
        assert_eq!(Amount::Percent(25.0).bytes(1000), 250);
        assert!(Amount::parse("0%").is_err());
        assert!(Amount::parse("150%").is_err());
        assert!(Amount::parse("lots").is_err());
    }

    #[test]
    fn limits_add_up_to_the_budget_and_idle_caches_make_room() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let budget = CacheBudget::new(root, 1 << 20, 4 << 20);
        assert_eq!(budget.default_limit, 1 << 20, "never above the budget");
        let (a, b, idle) = (root.join("a"), root.join("b"), root.join("idle"));
        std::fs::create_dir_all(&idle).unwrap();
        std::fs::write(idle.join("shard"), vec![1u8; 300 << 10]).unwrap();
        // Two pending admissions share the budget.
        let first = budget.admit(&a, 600 << 10, &[]).unwrap();
        assert!(idle.exists(), "600 KiB + 300 KiB idle fit in 1 MiB");
        let refused = budget.admit(&b, 600 << 10, &[]);
        assert!(
            matches!(refused, Err(BudgetError::Exhausted { committed, .. }) if committed == 600 << 10),
            "{refused:?}"
        );
        drop(first);
        // `a` is mounted now (recorded), and `b` fits only once the idle cache is gone.
        let _second = budget
            .admit(&b, 400 << 10, &[(a.clone(), 600 << 10)])
            .unwrap();
        assert!(!idle.exists(), "the idle cache was removed to make room");
    }
}
