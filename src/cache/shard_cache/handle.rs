//! `ShardHandle`: an open, pinned shard of the disk tier, read by the byte, header or sample.

use super::ShardCache;
use crate::cache::memory::Provenance;
use crate::cache::stats::Counters;
use crate::cache::CacheError;
use crate::fetch::ShardFault;
use crate::mds::ShardHeader;
use bytes::Bytes;
use std::fs::File;
use std::sync::Arc;

/// An open, pinned shard: it stays on disk (is never evicted) while this handle lives.
pub struct ShardHandle {
    pub(super) cache: Arc<ShardCache>,
    pub(super) shard: usize,
    pub(super) file: Arc<File>,
    pub(super) len: u64,
}

impl std::fmt::Debug for ShardHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ShardHandle(shard {}, {} bytes)", self.shard, self.len)
    }
}

impl ShardHandle {
    /// The shard number.
    pub fn shard(&self) -> usize {
        self.shard
    }

    /// Size of the uncompressed shard file.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// True for an empty file (never for a valid shard).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// `len` bytes at `offset` of the cached file (io_uring or pread, direct or buffered).
    pub fn read_at(&self, offset: u64, len: usize) -> Result<Bytes, CacheError> {
        if offset
            .checked_add(len as u64)
            .is_none_or(|end| end > self.len)
        {
            return Err(self.cache.out_of_range(
                self.shard,
                format!("bytes {offset}+{len} of a {}-byte file", self.len),
            ));
        }
        let read = match self.cache.direct {
            Some(path) => path.read_exact_at(&self.file, offset, len),
            None => self
                .cache
                .reader
                .read_exact_at(&self.file, offset, len)
                .map(Bytes::from),
        };
        read.map_err(|e| {
            CacheError::io(
                "read",
                self.cache.shard_path(self.shard).unwrap_or_default(),
                e,
            )
        })
    }

    /// The parsed header (memory tier, else read from the file).
    pub fn header(&self) -> Result<Arc<ShardHeader>, CacheError> {
        if let Some(h) = self.cache.memory.header(self.shard) {
            return Ok(h);
        }
        let path = || {
            self.cache
                .shard_path(self.shard)
                .map(|p| p.display().to_string())
                .unwrap_or_default()
        };
        let count = self.read_at(0, 4.min(self.len as usize))?;
        let n = ShardHeader::sample_count(&count).map_err(|e| ShardFault::Corrupt {
            shard: self.shard,
            file: path(),
            reason: e.to_string(),
        })?;
        let len = crate::mds::header_len(n);
        if len > self.len {
            return Err(ShardFault::Corrupt {
                shard: self.shard,
                file: path(),
                reason: format!("header of {n} samples is longer than the file"),
            }
            .into());
        }
        let bytes = self.read_at(0, len as usize)?;
        let h = Arc::new(ShardHeader::parse(&bytes).map_err(|e| ShardFault::Corrupt {
            shard: self.shard,
            file: path(),
            reason: e.to_string(),
        })?);
        self.cache
            .tier_put_header(self.shard, Provenance::Verified, h.clone());
        Ok(h)
    }

    /// The bytes of sample `i` (memory tier, else the file).
    pub fn sample(&self, i: u32) -> Result<Bytes, CacheError> {
        if let Some(b) = self.cache.memory.sample(self.shard, i) {
            Counters::add(&self.cache.counters.memory_hits, 1);
            return Ok(b);
        }
        Counters::add(&self.cache.counters.memory_misses, 1);
        let h = self.header()?;
        let r = h.sample_range(i).map_err(|_| {
            self.cache
                .out_of_range(self.shard, format!("sample {i} of {}", h.num_samples()))
        })?;
        let b = self.read_at(r.start, (r.end - r.start) as usize)?;
        self.cache
            .tier_put_sample(self.shard, i, Provenance::Verified, b.clone());
        Ok(b)
    }
}

impl Drop for ShardHandle {
    fn drop(&mut self) {
        self.cache.unpin(self.shard);
    }
}
