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

/// Whether column `column` is the only variable-size column of the samples (so that its
/// length follows from the sample's: [`column_len_from_sample_len`]).
pub fn is_sole_variable_column(columns: &[Column], column: usize) -> bool {
    columns.get(column).is_some_and(|c| c.size.is_none())
        && columns.iter().filter(|c| c.size.is_none()).count() == 1
}

/// The stored length of column `column` known from the sample's total length alone: when it
/// is the sample's only variable-size column (its length is what the fixed-size columns and
/// the one-entry length table leave). `None` for a fixed-size column, when other columns also
/// vary, or when the sample is too short to hold the fixed parts.
pub fn column_len_from_sample_len(
    columns: &[Column],
    sample_len: u64,
    column: usize,
) -> Option<u64> {
    if !is_sole_variable_column(columns, column) {
        return None;
    }
    let fixed: u64 = columns.iter().filter_map(|c| c.size).map(u64::from).sum();
    sample_len.checked_sub(4)?.checked_sub(fixed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mds::Encoding;

    #[test]
    fn the_sole_variable_column_s_length_follows_from_the_sample_s() {
        let cols = [col("image", "bytes"), col("label", "int")];
        // A 4-byte length table, the image, then 8 bytes of label.
        let mut sample = 100u32.to_le_bytes().to_vec();
        sample.extend(std::iter::repeat_n(7u8, 100));
        sample.extend(5i64.to_le_bytes());
        let from_bytes = split_sample(&cols, &sample).unwrap();
        assert_eq!(
            column_len_from_sample_len(&cols, sample.len() as u64, 0),
            Some((from_bytes[0].end - from_bytes[0].start) as u64)
        );
        assert_eq!(
            column_len_from_sample_len(&cols, sample.len() as u64, 1),
            None
        );
        assert_eq!(column_len_from_sample_len(&cols, 11, 0), None, "too short");
        let two = [col("a", "bytes"), col("b", "str")];
        assert_eq!(column_len_from_sample_len(&two, 100, 0), None);
        assert!(!is_sole_variable_column(&cols, 5));
    }

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
