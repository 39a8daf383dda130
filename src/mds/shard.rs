//! The MDS shard layout (MDS-SPEC §2): `u32 N | u32 offsets[N+1] | config JSON | samples`.
//!
//! The header is all a reader needs to find sample `i` in O(1): its bytes are
//! `offsets[i]..offsets[i+1]`. [`ShardHeader::parse`] takes only a prefix of the file, so a
//! remote reader can fetch `4` bytes, then [`header_len`] bytes, then one sample by range.
//! Offsets are checked once at parse (non-decreasing, past the header), so later look-ups
//! cannot fail except on an index out of range.

use super::error::{MdsError, Result};
use super::index::ShardEntry;
use super::le::u32_at;
use super::sample::split_sample;
use std::ops::Range;

/// Bytes of the header of a shard with `n` samples: the count and `n + 1` offsets.
pub fn header_len(n: u32) -> u64 {
    4 + 4 * (u64::from(n) + 1)
}

/// The parsed header of one shard: its sample offsets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardHeader {
    offsets: Vec<u32>,
}

impl ShardHeader {
    /// Reads the sample count `N` from the first 4 bytes of a shard.
    pub fn sample_count(prefix: &[u8]) -> Result<u32> {
        u32_at(prefix, 0, "sample count")
    }

    /// Parses the header from a prefix of the shard at least [`header_len`]`(N)` long.
    pub fn parse(prefix: &[u8]) -> Result<ShardHeader> {
        let n = Self::sample_count(prefix)?;
        let need = header_len(n);
        if (prefix.len() as u64) < need {
            return Err(MdsError::Truncated {
                offset: 0,
                what: "shard header",
                need,
                have: prefix.len() as u64,
            });
        }
        let count = n as usize + 1;
        let mut offsets = Vec::with_capacity(count);
        for k in 0..count {
            let pos = 4 + 4 * k;
            let off = u32_at(prefix, pos, "sample offset")?;
            if k == 0 && u64::from(off) < need {
                return Err(MdsError::Corrupt {
                    offset: pos as u64,
                    msg: format!("first sample offset {off} lies inside the {need}-byte header"),
                });
            }
            if let Some(&prev) = offsets.last() {
                if off < prev {
                    return Err(MdsError::Corrupt {
                        offset: pos as u64,
                        msg: format!("sample offset {k} is {off}, before the previous {prev}"),
                    });
                }
            }
            offsets.push(off);
        }
        Ok(ShardHeader { offsets })
    }

    /// Samples in the shard.
    pub fn num_samples(&self) -> u32 {
        (self.offsets.len() - 1) as u32
    }

    /// Length of the whole shard file (the last offset).
    pub fn file_len(&self) -> u64 {
        u64::from(self.offsets[self.offsets.len() - 1])
    }

    /// Byte range of the config JSON that follows the offsets.
    pub fn config_range(&self) -> Range<u64> {
        header_len(self.num_samples())..u64::from(self.offsets[0])
    }

    /// Byte range of sample `i` within the shard file.
    pub fn sample_range(&self, i: u32) -> Result<Range<u64>> {
        let i = i as usize;
        match (self.offsets.get(i), self.offsets.get(i + 1)) {
            (Some(&b), Some(&e)) => Ok(u64::from(b)..u64::from(e)),
            _ => Err(MdsError::SampleOutOfRange {
                index: i as u64,
                samples: u64::from(self.num_samples()),
            }),
        }
    }
}

/// A whole uncompressed shard in memory, checked against its index entry.
/// Errors from its methods name the shard's basename.
#[derive(Debug, Clone)]
pub struct ShardView<'a> {
    entry: &'a ShardEntry,
    header: ShardHeader,
    data: &'a [u8],
}

impl<'a> ShardView<'a> {
    /// Parses the header of `data` (the raw shard bytes) and checks it against `entry`:
    /// same sample count, and the last offset equals both the data length and `raw.bytes`.
    pub fn new(entry: &'a ShardEntry, data: &'a [u8]) -> Result<ShardView<'a>> {
        let name = entry.raw.basename.as_str();
        let header = ShardHeader::parse(data).map_err(|e| e.in_file(name))?;
        if header.num_samples() != entry.samples {
            return Err(MdsError::Corrupt {
                offset: 0,
                msg: format!(
                    "shard holds {} samples, index.json says {}",
                    header.num_samples(),
                    entry.samples
                ),
            }
            .in_file(name));
        }
        if header.file_len() != data.len() as u64 || entry.raw.bytes != data.len() as u64 {
            return Err(MdsError::Corrupt {
                offset: 4 + 4 * u64::from(entry.samples),
                msg: format!(
                    "last sample offset {} and index.json size {} must both equal the file length {}",
                    header.file_len(),
                    entry.raw.bytes,
                    data.len()
                ),
            }
            .in_file(name));
        }
        Ok(ShardView {
            entry,
            header,
            data,
        })
    }

    /// The parsed header.
    pub fn header(&self) -> &ShardHeader {
        &self.header
    }

    /// The bytes of sample `i`.
    pub fn sample(&self, i: u32) -> Result<&'a [u8]> {
        let r = self
            .header
            .sample_range(i)
            .map_err(|e| e.in_file(&self.entry.raw.basename))?;
        // Offsets were checked against the data length in `new`.
        Ok(&self.data[r.start as usize..r.end as usize])
    }

    /// The bytes of every column of sample `i`, in column order.
    pub fn columns(&self, i: u32) -> Result<Vec<&'a [u8]>> {
        let sample = self.sample(i)?;
        let start = self.header.sample_range(i).map(|r| r.start).unwrap_or(0);
        let ranges = split_sample(&self.entry.columns, sample)
            .map_err(|e| rebase(e, start).in_file(&self.entry.raw.basename))?;
        Ok(ranges.into_iter().map(|r| &sample[r]).collect())
    }

    /// The bytes of column `col` of sample `i`.
    pub fn column(&self, i: u32, col: usize) -> Result<&'a [u8]> {
        let mut cols = self.columns(i)?;
        if col >= cols.len() {
            return Err(MdsError::Corrupt {
                offset: 0,
                msg: format!("column {col} out of range ({} columns)", cols.len()),
            });
        }
        Ok(cols.swap_remove(col))
    }
}

/// Turns an offset within a sample into an offset within the shard file.
fn rebase(e: MdsError, base: u64) -> MdsError {
    match e {
        MdsError::Truncated {
            offset,
            what,
            need,
            have,
        } => MdsError::Truncated {
            offset: offset + base,
            what,
            need,
            have,
        },
        MdsError::Corrupt { offset, msg } => MdsError::Corrupt {
            offset: offset + base,
            msg,
        },
        e => e,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shard(samples: &[&[u8]]) -> Vec<u8> {
        let n = samples.len() as u32;
        let config = b"{}";
        let mut off = header_len(n) as u32 + config.len() as u32;
        let mut out = n.to_le_bytes().to_vec();
        for s in samples {
            out.extend(off.to_le_bytes());
            off += s.len() as u32;
        }
        out.extend(off.to_le_bytes());
        out.extend(config);
        for s in samples {
            out.extend(*s);
        }
        out
    }

    #[test]
    fn finds_samples() {
        let data = shard(&[b"abc", b"", b"de"]);
        let h = ShardHeader::parse(&data).unwrap();
        assert_eq!(h.num_samples(), 3);
        assert_eq!(h.file_len(), data.len() as u64);
        assert_eq!(h.config_range(), 20..22);
        let r = h.sample_range(2).unwrap();
        assert_eq!(&data[r.start as usize..r.end as usize], b"de");
        assert!(matches!(
            h.sample_range(3),
            Err(MdsError::SampleOutOfRange {
                index: 3,
                samples: 3
            })
        ));
    }

    #[test]
    fn rejects_bad_headers() {
        let data = shard(&[b"abc", b"de"]);
        assert!(matches!(
            ShardHeader::parse(&data[..10]),
            Err(MdsError::Truncated { .. })
        ));
        assert!(matches!(
            ShardHeader::parse(&[0xff, 0xff, 0xff, 0xff, 0, 0]),
            Err(MdsError::Truncated {
                need: 17179869188,
                ..
            })
        ));
        let mut dec = data.clone();
        dec[8..12].copy_from_slice(&5u32.to_le_bytes());
        assert!(matches!(
            ShardHeader::parse(&dec),
            Err(MdsError::Corrupt { .. })
        ));
        let mut inside = data.clone();
        inside[4..8].copy_from_slice(&3u32.to_le_bytes());
        assert!(matches!(
            ShardHeader::parse(&inside),
            Err(MdsError::Corrupt { offset: 4, .. })
        ));
    }
}
