//! Ranged reads of an uncompressed shard: its header and single samples, for random access
//! (and `stat`) without downloading the shard. No checksum covers a range, and these bytes
//! size files or are printed, so each range is read twice at once and compared, a third read
//! deciding when the two differ.

use super::error::corrupt;
use super::{add, FetchError, Fetcher, ShardFault};
use crate::mds::{self, ShardEntry, ShardHeader};
use crate::store::ObjectKey;
use bytes::Bytes;
use std::ops::Range;

impl Fetcher {
    /// The header of an uncompressed shard by ranged GETs of `header_len(samples)` bytes (the
    /// sample count comes from index.json, then is checked against the bytes). No checksum
    /// covers a range, and a header sizes every file of its shard, so it is read twice at once
    /// and the two compared; when they differ a third read settles which one was damaged.
    pub fn fetch_header(&self, shard: usize) -> Result<ShardHeader, FetchError> {
        let (key, entry) = self.raw_key(shard)?;
        let url = self.store.url_of(&key);
        if entry.zip.is_some() {
            return Err(ShardFault::Corrupt {
                shard,
                file: url,
                reason: "ranged header read of a compressed shard".into(),
            }
            .into());
        }
        let len = mds::header_len(entry.samples);
        if len > entry.raw.bytes {
            return Err(ShardFault::Corrupt {
                shard,
                file: url,
                reason: format!("index.json says {} samples, which need a {len}-byte header, but the shard has {} bytes", entry.samples, entry.raw.bytes),
            }
            .into());
        }
        let bytes = self.range_by_majority(shard, &key, 0..len, "header")?;
        check_header(shard, &url, entry, &bytes)
    }

    /// Bytes `range` of `key` read twice at once and compared; when they differ a third
    /// read settles which one was damaged (two of three must agree). For ranged bytes no
    /// checksum covers (`what` names them in the messages).
    fn range_by_majority(
        &self,
        shard: usize,
        key: &ObjectKey,
        range: Range<u64>,
        what: &str,
    ) -> Result<Bytes, FetchError> {
        let (a, b) = self.store.get_range_twice(key, range.clone());
        let (a, b) = (a?, b?);
        add(&self.counters.bytes_fetched, (a.len() + b.len()) as u64);
        add(&self.counters.ranged_fetches, 2);
        if a == b {
            return Ok(a);
        }
        let url = self.store.url_of(key);
        let c = self.store.get_range(key, range)?;
        add(&self.counters.bytes_fetched, c.len() as u64);
        add(&self.counters.ranged_fetches, 1);
        tracing::warn!(shard, file = %url, "two reads of a shard {what} differed; a third decides");
        majority(a, b, c).ok_or_else(|| {
            ShardFault::Corrupt {
                shard,
                file: url,
                reason: format!("three ranged reads of the {what} gave three different answers"),
            }
            .into()
        })
    }

    /// Bytes `range` of an uncompressed shard (a sample), by ranged GETs: read twice at once
    /// and compared, a third read deciding when they differ, since no checksum covers a range
    /// and these bytes size files or are printed (`shardfs cat`).
    pub fn fetch_range(&self, shard: usize, range: Range<u64>) -> Result<Bytes, FetchError> {
        let (key, entry) = self.raw_key(shard)?;
        if range.end > entry.raw.bytes || range.start > range.end {
            return Err(ShardFault::OutOfRange {
                shard,
                file: entry.raw.basename.clone(),
                what: format!(
                    "bytes {}..{} of a {}-byte shard",
                    range.start, range.end, entry.raw.bytes
                ),
            }
            .into());
        }
        self.range_by_majority(shard, &key, range, "sample")
    }

    /// Sample `i` of a shard: two ranged GETs (header, sample) when the shard is
    /// uncompressed and remote (ranges cannot be hash-checked; sizes and offsets are); the
    /// whole shard, verified and decompressed (not cached), when compressed or local.
    pub fn fetch_sample(&self, shard: usize, i: u32) -> Result<Bytes, FetchError> {
        let entry = self.shard(shard)?;
        let out_of_range = || ShardFault::OutOfRange {
            shard,
            file: entry.raw.basename.clone(),
            what: format!("sample {i} of {}", entry.samples),
        };
        if entry.zip.is_none() && !self.is_local() {
            let header = self.fetch_header(shard)?;
            let r = header.sample_range(i).map_err(|_| out_of_range())?;
            self.fetch_range(shard, r)
        } else {
            let raw = self.fetch_shard(shard, 3)?;
            let header =
                ShardHeader::parse(&raw).map_err(|e| corrupt(shard, &entry.raw.basename, e))?;
            let r = header.sample_range(i).map_err(|_| out_of_range())?;
            let (start, end) = (r.start as usize, r.end as usize);
            // fetch_shard checked that the header's last offset is the shard's length.
            if end > raw.len() || start > end {
                return Err(out_of_range().into());
            }
            Ok(raw.slice(start..end))
        }
    }
}

/// The answer two of three reads agree on, if any.
fn majority(a: Bytes, b: Bytes, c: Bytes) -> Option<Bytes> {
    if a == b || a == c {
        Some(a)
    } else if b == c {
        Some(b)
    } else {
        None
    }
}

/// Parses a header and checks it against the index entry.
pub(super) fn check_header(
    shard: usize,
    url: &str,
    entry: &ShardEntry,
    bytes: &[u8],
) -> Result<ShardHeader, FetchError> {
    let header = ShardHeader::parse(bytes).map_err(|e| corrupt(shard, url, e))?;
    if header.num_samples() != entry.samples {
        return Err(corrupt(
            shard,
            url,
            format!(
                "header has {} samples, index.json says {}",
                header.num_samples(),
                entry.samples
            ),
        ));
    }
    if header.file_len() != entry.raw.bytes {
        return Err(corrupt(
            shard,
            url,
            format!(
                "header says {} bytes, index.json says {}",
                header.file_len(),
                entry.raw.bytes
            ),
        ));
    }
    // With only fixed-size columns every sample has the same length: a changed offset (the
    // ranged read is not hash-checked) shows as a sample of another length.
    let fixed: Option<u64> = entry.columns.iter().map(|c| c.size.map(u64::from)).sum();
    if let Some(want) = fixed {
        for i in 0..header.num_samples() {
            let r = header.sample_range(i).map_err(|e| corrupt(shard, url, e))?;
            if r.end - r.start != want {
                return Err(corrupt(
                    shard,
                    url,
                    format!(
                        "sample {i} has {} bytes, but its columns are fixed at {want}",
                        r.end - r.start
                    ),
                ));
            }
        }
    }
    Ok(header)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_reads_that_agree_outvote_the_third_and_three_that_differ_give_nothing() {
        let (x, y, z) = (
            Bytes::from_static(b"x"),
            Bytes::from_static(b"y"),
            Bytes::from_static(b"z"),
        );
        assert_eq!(majority(x.clone(), y.clone(), x.clone()), Some(x.clone()));
        assert_eq!(majority(y.clone(), x.clone(), x.clone()), Some(x.clone()));
        assert_eq!(majority(x.clone(), x.clone(), y.clone()), Some(x.clone()));
        assert_eq!(majority(x, y, z), None);
    }
}
