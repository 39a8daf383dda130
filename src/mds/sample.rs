//! Splitting one sample into its columns (MDS-SPEC §2, `decode_sample`): first a u32 length
//! for each variable-size column, in column order, then every column's bytes in column order.

use super::error::{MdsError, Result};
use super::index::Column;
use super::le::u32_at;
use std::ops::Range;

/// Byte ranges of each column within `sample`, in column order. Errors carry offsets within
/// the sample; the sample must be consumed exactly (the writer never leaves trailing bytes).
pub fn split_sample(columns: &[Column], sample: &[u8]) -> Result<Vec<Range<usize>>> {
    let variable = columns.iter().filter(|c| c.size.is_none()).count();
    let mut table = 0usize;
    let mut pos = variable * 4;
    let mut ranges = Vec::with_capacity(columns.len());
    for c in columns {
        let size = match c.size {
            Some(s) => s as usize,
            None => {
                let s = u32_at(sample, table, "column length")? as usize;
                table += 4;
                s
            }
        };
        let end = pos.checked_add(size).filter(|&e| e <= sample.len());
        let Some(end) = end else {
            if pos > sample.len() {
                // The length table itself runs past the sample.
                return Err(MdsError::Truncated {
                    offset: 0,
                    what: "column length table",
                    need: pos as u64,
                    have: sample.len() as u64,
                });
            }
            return Err(MdsError::Corrupt {
                offset: pos as u64,
                msg: format!(
                    "column {:?} needs {size} bytes, only {} left in the sample",
                    c.name,
                    sample.len() - pos
                ),
            });
        };
        ranges.push(pos..end);
        pos = end;
    }
    if pos != sample.len() {
        return Err(MdsError::Corrupt {
            offset: pos as u64,
            msg: format!(
                "{} trailing bytes after the last column of the sample",
                sample.len() - pos
            ),
        });
    }
    Ok(ranges)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mds::Encoding;

    fn col(name: &str, enc: &str) -> Column {
        let encoding: Encoding = enc.parse().unwrap();
        Column {
            name: name.into(),
            size: encoding.fixed_size().map(|s| s as u32),
            encoding,
        }
    }

    #[test]
    fn splits_fixed_and_variable() {
        let cols = [col("a", "str"), col("b", "int"), col("c", "bytes")];
        let mut s = Vec::new();
        s.extend(2u32.to_le_bytes());
        s.extend(1u32.to_le_bytes());
        s.extend(b"hi");
        s.extend(7i64.to_le_bytes());
        s.extend(b"z");
        let r = split_sample(&cols, &s).unwrap();
        assert_eq!(r, vec![8..10, 10..18, 18..19]);
        assert!(split_sample(&cols, &s[..18]).is_err());
        let mut long = s.clone();
        long.push(0);
        assert!(matches!(
            split_sample(&cols, &long),
            Err(MdsError::Corrupt { offset: 19, .. })
        ));
        let mut huge = s.clone();
        huge[0..4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(split_sample(&cols, &huge).is_err());
    }
}
